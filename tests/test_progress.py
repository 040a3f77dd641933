"""`dlbench run`'s progress: a line per finished cell when stdout is not a terminal, the bar's
failure lines escaped, the estimate of the time left, and --dry-run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from dlbench.cli.main import main
from dlbench.cli.run import RichProgress
from dlbench.planning.estimate import Estimate
from dlbench.planning.plan import Cell, suite_from_dict
from dlbench.storage.store import Sample
from tests.conftest import requires

FAKE = str(Path(__file__).with_name("fakefw.py"))
ROOT = Path(__file__).resolve().parents[1]


def cells():
    return [Cell("torch", "eager", "lenet", "forward", 64, t) for t in (1, 2)]


def samples(values_ms, repeat=0):
    return [Sample(repeat, i, "measure", v * 1e6) for i, v in enumerate(values_ms)]


def test_plain_lines_per_cell_with_median_ci_and_time_left(capsys):
    suite = suite_from_dict({"models": ["lenet"], "protocol": {"repeats": 1}})
    a, b = cells()
    progress = RichProgress(Estimate(suite, [a, b]), terminal=False)
    progress("start", total=2, done=0)
    progress("phase", text="verify torch/eager: 1 model(s)")
    progress("cell_start", cell=a)
    progress("cell_done", cell=a, status="ok", reason="", samples=samples([2.0, 1.0, 3.0, 2.0, 2.5]))
    progress("cell_start", cell=b)
    progress("cell_done", cell=b, status="failed", reason="process exited with SIGABRT", samples=[])
    progress.stop()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("dlbench: 2 cell(s) to measure; about ") and "from the protocol" in lines[0]
    assert lines[1] == "  verify torch/eager: 1 model(s)"
    assert re.fullmatch(r"\[1/2\] torch/eager/lenet/forward/b64/t1/cpu: ok 2\.00 \[[\d.]+, [\d.]+\] ms "
                        r"\(\d+ s; about \d+ s left\)", lines[2]), lines[2]
    assert lines[3].startswith("[2/2] torch/eager/lenet/forward/b64/t2/cpu: failed: process exited with SIGABRT (")
    assert "left" not in lines[3]  # the last cell: nothing left to estimate


def test_time_left_comes_from_measured_cells():
    suite = suite_from_dict({"models": ["lenet"], "protocol": {"repeats": 1}})
    a, b = cells()
    progress = RichProgress(Estimate(suite, [a, b]), terminal=False)
    progress.estimate.record(a, 100.0, "ok")  # as if cell a had taken 100 s
    progress.left.remove(a)
    progress.done, progress.total = 1, 2
    assert 99 < progress.seconds_left() <= 100.0
    # without an estimate (dlbench reproduce): the mean of the cells finished so far
    bare = RichProgress(terminal=False)
    bare.total = 3
    assert bare.seconds_left() is None
    bare.done, bare.finished_s = 1, [30.0]
    assert bare.seconds_left() == 60.0


def test_the_bar_prints_data_strings_literally(capsys):
    """A reason holding rich markup ("[/]") raised MarkupError, and "[red]" was eaten as a style."""
    (a, _) = cells()
    progress = RichProgress(terminal=True)
    progress("start", total=1, done=0)
    progress("phase", text="verify [/] torch")
    progress("cell_start", cell=a)
    progress("cell_done", cell=a, status="failed", reason="boom [red]x[/red] [/]", samples=[])
    progress.stop()
    assert "boom [red]x[/red] [/]" in capsys.readouterr().out


@requires("torch")
def test_run_piped_prints_a_line_per_cell(tmp_path, fresh_gates):
    """`dlbench run | cat`: stdout a pipe, one line per finished cell (was: nothing until the tables), and
    a line per gate it runs."""
    env = {**os.environ, "DLBENCH_PLUGINS": FAKE, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "dlbench", "run", "--model", "lenet", "--framework", "fakefw", "--variant", "ok,crash",
           "--scenario", "forward", "--batch", "4", "--threads", "1", "--warmup", "1", "--min-iters", "3",
           "--min-time", "0", "--repeats", "1", "--db", str(tmp_path / "r.db")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)  # stdout a pipe, as `| cat`
    assert out.returncode == 1, out.stderr[-2000:]  # the crash variant fails
    lines = out.stdout.splitlines()
    assert any(line.startswith("dlbench: 2 cell(s) to measure; about ") for line in lines)
    assert "  verify fakefw/ok: 1 model(s)" in lines
    ok = next(line for line in lines if line.startswith("[1/2] "))
    assert re.match(r"\[1/2\] fakefw/ok/lenet/forward/b4/t1/cpu: ok [\d.]+ \[[\d.]+, [\d.]+\] ms \(\d+ s; about .* left\)",
                    ok), ok
    crash = next(line for line in lines if line.startswith("[2/2] "))
    assert crash.startswith("[2/2] fakefw/crash/lenet/forward/b4/t1/cpu: failed: ")
    assert "\x1b[" not in out.stdout  # plain text, no terminal codes


@requires("torch")
def test_dry_run_lists_cells_and_estimate_and_stores_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLBENCH_PLUGINS", FAKE)
    from dlbench.frameworks import FRAMEWORKS, load_plugins

    load_plugins()
    db = tmp_path / "r.db"
    try:
        args = ["run", "--dry-run", "--model", "lenet", "--framework", "fakefw,onnxruntime", "--variant", "ok,default",
                "--scenario", "forward,gradient", "--threads", "1", "--db", str(db)]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "fakefw/ok/lenet/forward/b64/t1/cpu" in out and "fakefw/ok/lenet/gradient/b64/t1/cpu" in out
        assert re.search(r"onnxruntime/default/lenet/gradient/b64/t1/cpu\s*│\s*unsupported: no process", out)
        assert re.search(r"estimate: about [\d a-z]+ \(rough, from the protocol and no earlier run on this machine in this "
                     r"database: .*: 3 process\(es\) per cell", out)
        assert "no run created" in out
        assert main([*args, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert len(data["cells"]) == 4 and data["estimate_s"] > data["setup_s"] > 0
        assert [c["runs_a_process"] for c in data["cells"] if c["framework"] == "onnxruntime"] == [True, False]
        assert not db.exists()
    finally:
        FRAMEWORKS.pop("fakefw", None)


@requires("torch")
def test_a_suite_says_which_installed_frameworks_it_leaves_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLBENCH_PLUGINS", FAKE)
    from dlbench.frameworks import FRAMEWORKS, load_plugins

    load_plugins()
    path = tmp_path / "s.yaml"
    path.write_text("name: mine\ndescription: mine for a test\nframeworks: installed\ninstalled_except: [fakefw]\n"
                    "models: [lenet]\n")
    try:
        assert main(["run", "--suite", str(path), "--dry-run", "--db", str(tmp_path / "r.db")]) == 0
        out = capsys.readouterr().out
        line = next(line for line in out.splitlines() if "leaves out" in line)
        assert line.startswith("the mine suite (mine for a test) leaves out installed fakefw; to include them, "
                               f"name every framework: dlbench run --suite {path} --framework ")
        assert line.split("--framework ")[1].split(",")[-1] == "fakefw" and "torch" in line
        assert "fakefw/" not in out.replace(line, "")
    finally:
        FRAMEWORKS.pop("fakefw", None)
