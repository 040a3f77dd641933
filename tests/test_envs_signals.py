"""Building an environment under faults: a signal stops pip with dlbench, and two builds of one
environment never write into one folder at once (issue #31, defect 2)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlbench import envs
from dlbench.frameworks import framework_info

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(autouse=True)
def envs_dir(tmp_path, monkeypatch):
    root = tmp_path / "envs"
    monkeypatch.setenv("DLBENCH_ENVS_DIR", str(root))
    return root


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_to_envs_create_stops_the_build_steps_too(tmp_path, envs_dir):
    """The build step (here a stand-in for ``python -m venv``/pip, which starts a child of its own) is
    killed with its whole process group; before, SIGTERM ended dlbench and left pip running parentless."""
    pids = tmp_path / "pids"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 120 &\necho $! >> {pids}\nwait\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": SRC, "DLBENCH_ENVS_DIR": str(envs_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "envs", "create", "mxnet", "--python", str(fake)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 2 and all(_alive(p) for p in started)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in started if _alive(p)]
    for p in left:  # do not leave them behind when the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"build steps outlived dlbench: {left}"
    assert proc.returncode == 143 and "SIGTERM" in err and "Traceback" not in err, err
    assert not (envs_dir / "mxnet").exists()  # the half-built folder is removed


def test_a_second_build_of_one_environment_waits_for_the_first(envs_dir, monkeypatch):
    """While one build holds the lock, a second ``create`` of the same environment says who holds it and
    waits; it then finds the first one's environment and reuses it instead of building into its folder."""
    built: list[str] = []

    def fake_create(info, python, force, progress):
        built.append(info.name)
        return "built"

    monkeypatch.setattr(envs, "_create", fake_create)
    said: list[str] = []
    result: list = []
    with envs.build_lock("mxnet"):
        worker = threading.Thread(target=lambda: result.append(envs.create(framework_info("mxnet"),
                                                                           progress=said.append)))
        worker.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
        assert said and f"pid {os.getpid()}" in said[0] and "waiting" in said[0], said
        time.sleep(0.2)
        assert built == []  # still waiting: nothing built beside the holder
    worker.join(timeout=30)
    assert built == ["mxnet"] and result == ["built"]


def test_builds_of_different_environments_do_not_wait_for_each_other(envs_dir, monkeypatch):
    monkeypatch.setattr(envs, "_create", lambda info, python, force, progress: info.name)
    with envs.build_lock("mxnet"):
        assert envs.create(framework_info("chainer")) == "chainer"
