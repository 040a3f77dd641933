"""Building an environment under faults: a signal stops pip with dlbench, and two builds of one
environment never write into one folder at once (issue #31, defect 2)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlbench import envs
from dlbench.cli.main import main
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


# --- --dry-run names the environments a run would build --------------------------------------------
def _record(root: Path, framework: str, seconds: float, size: int) -> None:
    path = root / framework.replace("==", "-")
    (path / "lib").mkdir(parents=True)
    (path / "lib" / "blob").write_bytes(b"\0" * size)
    record = envs.EnvRecord(framework=framework, path=str(path), python=sys.executable, python_version="3.11",
                            created="2026-01-01T00:00:00+00:00", create_seconds=seconds, framework_version="0.4.30")
    (path / envs.RECORD).write_text(json.dumps(record.to_dict()))


def test_a_dry_run_names_the_environments_it_would_build_with_size_and_time(envs_dir, capsys, tmp_path):
    argv = ["run", "--framework", "jax==0.4.31,torch", "--model", "lenet", "--scenario", "forward", "--threads", "1",
            "--dry-run", "--db", str(tmp_path / "r.db")]
    pytest.importorskip("torch")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "environments to build first" in out and "jax==0.4.31: size and time unknown" in out
    _record(envs_dir, "jax==0.4.30", 120.0, 3 * 2**20)  # one built here before: the estimate goes by it
    assert main([*argv, "--json"]) == 0
    (build,) = json.loads(capsys.readouterr().out)["environments_to_build"]
    assert build["framework"] == "jax==0.4.31" and build["seconds"] == 120.0 and build["size_bytes"] >= 3 * 2**20
    assert main(argv) == 0
    assert "jax==0.4.31: about 3 MiB, about 120 s to build (median of 1 of jax's" in capsys.readouterr().out
    assert not (tmp_path / "r.db").exists()


# --- a removal beside a build, and what a killed build leaves (issue 41, item 7) -------------------------
def test_a_removal_waits_for_a_build_of_the_same_environment(envs_dir):
    """``envs remove`` takes the build lock: beside a running ``create --force`` it says who builds and
    waits, then removes; before, it deleted the folder under the build, which then failed with an
    internal error."""
    (envs_dir / "mxnet" / "bin").mkdir(parents=True)
    said: list[str] = []
    result: list[bool] = []
    with envs.build_lock("mxnet"):
        worker = threading.Thread(target=lambda: result.append(envs.remove("mxnet", progress=said.append)))
        worker.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
        assert said and f"pid {os.getpid()}" in said[0] and "waiting" in said[0], said
        time.sleep(0.2)
        assert (envs_dir / "mxnet" / "bin").is_dir() and result == []  # nothing removed under the build
    worker.join(timeout=30)
    assert result == [True] and not (envs_dir / "mxnet").exists()


def test_cli_remove_beside_a_build_waits_and_says_so(envs_dir):
    (envs_dir / "mxnet").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": SRC, "DLBENCH_ENVS_DIR": str(envs_dir), "PYTHONUNBUFFERED": "1"}
    with envs.build_lock("mxnet"):
        proc = subprocess.Popen([sys.executable, "-m", "dlbench", "envs", "remove", "mxnet"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=60)
        assert first and "is building this environment; waiting" in first[0], first
        time.sleep(0.2)
        assert proc.poll() is None and (envs_dir / "mxnet").is_dir()  # waiting, nothing removed
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "mxnet: removed" in out, out + err
    assert "Traceback" not in err and not (envs_dir / "mxnet").exists()


def _fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """An 'interpreter' that records its pid and a child's, then waits on the child: a build step that
    is still running."""
    pids = tmp_path / "pids"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 120 &\necho $! >> {pids}\nwait\n")
    fake.chmod(0o755)
    return fake, pids


def test_a_build_killed_with_sigkill_leaves_nothing_running_under_the_next(tmp_path, envs_dir, monkeypatch):
    """SIGKILL gives dlbench no chance to stop its build steps (they run in sessions of their own); the
    next build of that environment stops them before it builds, instead of building the folder while
    the dead build's step still writes into it."""
    fake, pids = _fake_python(tmp_path)
    env = {**os.environ, "PYTHONPATH": SRC, "DLBENCH_ENVS_DIR": str(envs_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "envs", "create", "mxnet", "--python", str(fake)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = [int(p) for p in pids.read_text().split()]
        proc.kill()
        proc.wait(timeout=30)
        assert all(_alive(p) for p in started)  # what SIGKILL leaves: the build step goes on
        alive_at_build: list[bool] = []

        def build_step(cmd, log, what, path=None):
            alive_at_build.append(any(_alive(p) for p in started))
            raise envs.EnvError("stopped here by the test")

        monkeypatch.setattr(envs, "_run", build_step)
        said: list[str] = []
        with pytest.raises(envs.EnvError, match="stopped here"):
            envs.create(framework_info("mxnet"), progress=said.append)
        assert alive_at_build == [False], "the next build started beside the killed build's step"
        assert any("left by an interrupted build" in s for s in said), said
    finally:
        for p in started:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_removal_stops_what_a_killed_build_left_running(tmp_path, envs_dir):
    path = envs_dir / "mxnet"
    path.mkdir(parents=True)
    orphan = subprocess.Popen(["sleep", "120"], env={**os.environ, envs.BUILD_MARK: str(path)},
                              start_new_session=True)
    try:
        assert envs.remove("mxnet") and not path.exists()
        assert orphan.wait(timeout=30) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
