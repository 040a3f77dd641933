"""benchmarks/ci_time.py --processes: the sitecustomize that logs every Python process the tests start, and
the table of their seconds by kind."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_ci_time():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its own `from _common import ...`
    try:
        spec = importlib.util.spec_from_file_location("ci_time", ROOT / "benchmarks" / "ci_time.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_logger_writes_a_line_per_process_forks_and_os_exit_included(tmp_path):
    """A fork's line counts from the fork; a process ending in os._exit (as dlbench's workers may) is logged."""
    ci_time = load_ci_time()
    log = tmp_path / "processes.jsonl"
    (tmp_path / "logger").mkdir()
    (tmp_path / "logger" / "sitecustomize.py").write_text(ci_time.LOGGER % {"frameworks": ci_time.FRAMEWORKS,
                                                                            "log": str(log)})
    program = "import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(0.2)\n    os._exit(0)\nos.waitpid(pid, 0)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "logger")}
    subprocess.run([sys.executable, "-c", program], env=env, check=True)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(p["entry"] for p in lines) == ["-c", "fork"]
    fork = next(p for p in lines if p["entry"] == "fork")
    parent = next(p for p in lines if p["entry"] == "-c")
    assert 0.2 <= fork["s"] <= parent["s"]  # the fork's clock restarts at the fork, not at the parent's start
    assert not parent["pytest"] and parent["mods"] == []


def test_the_table_leaves_out_pytests_own_processes_and_sums_by_kind(capsys, monkeypatch):
    ci_time = load_ci_time()
    monkeypatch.setattr(ci_time, "_import_seconds", lambda name: 2.0)
    ci_time._print_processes([
        {"s": 900.0, "entry": "-c", "mods": ["torch"], "pytest": True},  # an xdist test process: left out
        {"s": 3.0, "entry": "worker.py", "mods": ["onnxruntime", "torch"], "pytest": False},  # named by the first
        {"s": 5.0, "entry": "worker.py", "mods": ["torch"], "pytest": False},
        {"s": 4.0, "entry": "linkprobe.py", "mods": [], "pytest": False},
    ], wall=600.0)
    out = capsys.readouterr().out
    assert "3, 0.2 min of wall time together" in out
    assert "| worker.py | torch | 1 | 5 | 5.0 |" in out and "| worker.py | onnxruntime | 1 | 3 | 3.0 |" in out
    assert "| torch | 2 | 2.0 s | 4 s |" in out and "| onnxruntime | 1 | 2.0 s | 2 s |" in out  # all that imported it


def test_the_cpu_line_says_the_run_s_cpu_time_and_the_steal_share():
    ci_time = load_ci_time()
    before = {"user": 100, "nice": 0, "system": 50, "idle": 800, "iowait": 0, "irq": 0, "softirq": 0, "steal": 50}
    after = {**before, "user": 400, "system": 110, "idle": 1000, "steal": 90}  # 600 ticks, 40 of them stolen
    line = ci_time.cpu_line(600.0, 60.0, before, after)
    assert line == ("CPU time of the run's processes: 11.0 min (user 10.0, system 1.0); "
                    "the machine's time stolen by other guests meanwhile: 6.7%")
    assert ci_time.cpu_line(60.0, 0.0, {}, {}) == "CPU time of the run's processes: 1.0 min (user 1.0, system 0.0)"


def test_an_unknown_commit_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ci_time.py"), "--commit", "no-such-commit"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.strip() == f"ci_time: no commit 'no-such-commit' in {ROOT}"
