"""benchmarks/_common.py: the command a docs/performance header quotes is relative to the repository."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_common():
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_header_command_is_relative_to_the_repo():
    """Headers quoted `python /work/main/benchmarks/quick_suite.py`: the checkout's absolute path."""
    common = load_common()
    script = str(ROOT / "benchmarks" / "side_by_side.py")
    assert common.command([script, "h2o", "--db", str(ROOT / "scratch.db"), "--", "--repeats", "1"]) == \
        "python benchmarks/side_by_side.py h2o --db scratch.db -- --repeats 1"
    # a path outside the repository is the machine's scratch folder (a bisection's fragment quoted
    # `--workdir /work/bisect-faster`): DIR; an argument that is no path is kept as given
    assert common.command([script, "--db", "/elsewhere/x.db", "--rounds", "40"]) == \
        "python benchmarks/side_by_side.py --db DIR --rounds 40"
    assert str(ROOT) not in common.header("t")
