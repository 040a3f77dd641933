"""Shared fixtures: frameworks are parametrized over what is installed, skipping the rest with why."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import signal
import tempfile
from pathlib import Path

import pytest

try:  # pytest 9 keeps a node's id in ``_id`` (a NodeId); before, in ``_nodeid``, which pytest-xdist sets itself
    from _pytest.nodeid import NodeId
except ImportError:
    NodeId = None


def requires(module: str) -> pytest.MarkDecorator:
    """Skip a test whose framework is not installed (CI installs them all)."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


#: tests over CI's time budget (XLA and Keras-on-JAX/TF compiles on a 2-core machine): run with DLBENCH_SLOW_TESTS=1
over_budget = pytest.mark.skipif(not os.environ.get("DLBENCH_SLOW_TESTS"),
                                 reason="over CI's time budget; set DLBENCH_SLOW_TESTS=1 to run")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``scripts/test.sh`` runs the tests in two processes), each test process gets
    cores of its own: every measuring process a test starts inherits them, so two tests never time
    on the same core, and a cell's "all cores" is its test process's share. Tests that use the
    same machine-wide things (network namespaces, Ray clusters, JVMs, scans of every process) take the
``machine_wide`` lock (marked so), so they run one at a time whichever test process has them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0))
    MACHINE_CORES.extend(cores)
    if worker.startswith("gw") and 1 < count <= len(cores):
        os.sched_setaffinity(0, cores[int(worker[2:])::count])
    if worker:
        # an xdist worker ignores SIGINT, and processes it starts would inherit that: a test sending
        # Ctrl-C to a `dlbench run` it started would be ignored (Python keeps an ignored SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``--dist loadgroup`` (scripts/test.sh): each group runs in one test process, whole.
    Under plain load balancing a module's tests land on both processes, so a module-scoped fixture
    (a framework's built models, a run read by many tests) was made twice, and a test waiting for a
    lock (``machine_wide``, or a gate another process is running) sat idle. Without xdist the marks
    change nothing. A test that names its own ``xdist_group`` keeps it."""
    loadgroup = vars(config.option).get("loadgroup", False)  # set in an xdist test process under loadgroup
    for item in items:
        group = xdist_group_of(item)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        mark = item.get_closest_marker("xdist_group")
        if NodeId is not None and loadgroup and mark is not None and "@" not in item.nodeid:
            # what pytest-xdist does to ``item._nodeid``, which pytest 9 no longer reads (a node's id is
            # ``_id``): without this every group was silently ignored and the tests balanced one by one
            item._id = NodeId.parse(f"{item.nodeid}@{mark.args[0] if mark.args else mark.kwargs['name']}")


def xdist_group_of(item: pytest.Item) -> str | None:
    """``machine_wide`` for the tests that take its lock (they run one after another anyway, so in one
    process they never wait); the test's module for a test using a module- or session-scoped fixture of
    its own module (made once, not once per test process); else none (balanced test by test)."""
    if item.get_closest_marker("machine_wide") is not None:
        return "machine_wide"
    module = item.nodeid.split("::")[0]
    for defs in item._fixtureinfo.name2fixturedefs.values():
        if defs and defs[-1].scope in ("module", "session") and defs[-1].baseid == module:
            return module
    return None


#: held by a test using machine-wide things, across the test processes of a session (an flock)
MACHINE_LOCK = os.path.join(tempfile.gettempdir(), "dlbench-tests-machine-wide.lock")


@pytest.fixture(autouse=True)
def machine_wide(request):
    """One test at a time among those marked ``machine_wide``: they use network namespaces and their
    bridge (fixed names), Ray clusters, H2O's JVMs, or scan every process for leftovers. Autouse from
    here, so the lock is taken before a test module's own fixtures set anything up and released after
    they tear it down. Under scripts/test.sh's ``--dist loadgroup`` these tests are also one xdist group
    (:func:`xdist_group_of`), so one process runs them all and the lock never keeps the other waiting;
    the lock still holds them apart from another session's, or a run without the groups."""
    if request.node.get_closest_marker("machine_wide") is None:
        yield
        return
    with open(MACHINE_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


#: every core this test session may use (a test process under xdist is pinned to its share)
MACHINE_CORES: list[int] = []


@pytest.fixture
def whole_machine():
    """The test process's affinity widened to every core for one test (its measuring processes
    inherit it): for the tests whose expectations are about the machine's core count."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, MACHINE_CORES)
    yield
    os.sched_setaffinity(0, mine)


@pytest.fixture(autouse=True, scope="session")
def shared_peak_cache(shared_dir):
    """One machine-peak measurement per thread count for the whole session, whichever test process
    asks first (see runner._peak_cache; a file read while the other writes it reads as absent, and that
    peak is measured again): each run would otherwise spend seconds per thread count measuring the same
    GEMM peaks, one process per engine, and each test process measured its own."""
    old = os.environ.get("DLBENCH_PEAK_CACHE")
    os.environ["DLBENCH_PEAK_CACHE"] = str(shared_dir / "peaks.json")
    yield
    if old is None:
        os.environ.pop("DLBENCH_PEAK_CACHE", None)
    else:
        os.environ["DLBENCH_PEAK_CACHE"] = old


@pytest.fixture(autouse=True, scope="session")
def no_reuse_across_runs(shared_dir):
    """Compiled code is never reused across tests (``DLBENCH_COMPILATION_CACHE=off``): a cell's first
    call would change with what an earlier test compiled; nor is a calibration of the estimate
    (``DLBENCH_CALIBRATION=off``: a dry run starts no process unless a test asks for one).

    The gate's passes are kept for the session only, in its shared folder (never a developer's
    ``~/.cache/dlbench``), so the hundred-odd runs the tests start verify LeNet in torch once, not once
    each (828 s -> 734 s for the whole suite, docs/ci.md). That is safe for what the tests check because a kept pass
    stands only for the same fingerprint (:mod:`dlbench.measure.reuse`: dlbench's source, the
    interpreter's installs, the machine, the variant's environment and a plug-in's module file), so a
    planted defect (a plug-in framework, a variant) is verified afresh, and a failure is never kept. A
    test about the gate running (its progress lines, its process) takes :func:`fresh_gates`.

    Nor does a dry run ask an index the sizes of the packages of an environment it would build
    (``DLBENCH_PACKAGE_SIZES=off``): a test of that plants its index (tests/test_bisect.py). The CPU's
    description (py-cpuinfo, read once per boot) is kept in the session's folder too."""
    old = {k: os.environ.get(k) for k in ("DLBENCH_GATE_CACHE", "DLBENCH_COMPILATION_CACHE", "DLBENCH_CALIBRATION",
                                          "DLBENCH_PACKAGE_SIZES", "DLBENCH_CPU_INFO")}
    os.environ["DLBENCH_CPU_INFO"] = str(shared_dir / "cpu-info.json")  # py-cpuinfo once per session, kept there
    os.environ["DLBENCH_PACKAGE_SIZES"] = "off"
    os.environ["DLBENCH_COMPILATION_CACHE"] = "off"
    os.environ["DLBENCH_CALIBRATION"] = "off"  # a dry run's estimate from the fixed guesses: no process started
    os.environ["DLBENCH_GATE_CACHE"] = str(shared_dir / "gate-verdicts.json")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def fresh_gates(monkeypatch):
    """This test's runs verify every group afresh, keeping nothing (see :func:`no_reuse_across_runs`)."""
    monkeypatch.setenv("DLBENCH_GATE_CACHE", "off")


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A folder every test process of this session sees: under pytest-xdist each process has its own
    base temp inside the session's, so the session's is its parent (a framework's session gate,
    tests/frameworks/test_equivalence.py, is kept there)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: the fake framework plugin: the torch backend with planted misbehaviours (crash, hang, oom, ...)
FAKE = str(Path(__file__).with_name("fakefw.py"))


@pytest.fixture
def fake_framework(monkeypatch):
    """``fakefw`` registered here and, through DLBENCH_PLUGINS, in every measuring process."""
    from dlbench.frameworks import FRAMEWORKS, load_plugins

    monkeypatch.setenv("DLBENCH_PLUGINS", FAKE)
    load_plugins()
    yield
    FRAMEWORKS.pop("fakefw", None)


@pytest.fixture
def tmp_db(tmp_path):
    return tmp_path / "results.db"


def requires_framework(name: str) -> pytest.MarkDecorator:
    """Skip unless dlbench can measure ``name``: installed in this Python or in its own environment
    (``dlbench envs create NAME``), which is where such a framework's tests then run it."""
    from dlbench.frameworks import installed_version

    return pytest.mark.skipif(installed_version(name) is None,
                              reason=f"{name} is neither installed nor in a dlbench environment "
                                     f"(dlbench envs create {name})")


def env_models(quick: list[str], full: list[str]) -> list[str]:
    """Models a backend test runs the gate on: ``quick`` (lenet or fcn-r: CI runs these) unless
    ``DLBENCH_TEST_ALL_MODELS=1`` asks for ``full`` too (the models exercising a backend's special rules;
    ``dlbench verify --framework NAME`` covers the whole zoo)."""
    import os

    return quick + [m for m in full if m not in quick] if os.environ.get("DLBENCH_TEST_ALL_MODELS") == "1" else quick


def run_in_framework(name: str, code: str, timeout: float = 600) -> dict:
    """Run ``code`` in the interpreter that measures ``name`` (its environment's, or this one) with this
    checkout's dlbench on the path; the code prints one JSON object as its last line, returned here."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    from dlbench import envs

    python = envs.python_for(name) or sys.executable
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([python, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=timeout, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _lenet_in(name: str, backend: str) -> str:
    """Code that makes ``b``, framework ``name``'s backend (class ``backend`` of its module) on 1 thread,
    and ``built(model)``: LeNet (or a part of it, ``lenet#k``), small, seeded, and its placed batch of 4."""
    return f"""
        import inspect, json, tempfile
        from pathlib import Path
        import numpy as np
        from dlbench.frameworks.{name}.backend import {backend}
        from dlbench.models import get_model
        from dlbench.models.weights import init_weights
        from dlbench.data.synthetic import make_batch
        b = {backend}(); b.set_threads(1)

        def built(model):
            spec = get_model(model, small=True)
            m = b.build(spec, init_weights(spec, 0))
            return m, b.place(make_batch(spec, 4, 0), m)
    """


def part_input_gradient_shapes(name: str, backend: str, input_grad: str) -> list:
    """For LeNet's parts 0-2 in framework ``name`` (backend class ``backend`` of its module): the shape
    of the input gradient that one call of the part's gradient closure computed, or None. ``input_grad``
    is an expression of ``p`` (the placed batch), ``run`` (the closure) and ``out`` (what it returned)
    giving that gradient or None. A part after the first differentiates its input
    (``models.split.differentiates_input``), as the whole model's backward does."""
    return run_in_framework(name, _lenet_in(name, backend) + f"""
        shapes = []
        for k in range(3):
            m, p = built(f"lenet#{{k}}")
            run = b.gradient(m, p); out = run()
            g = {input_grad}
            shapes.append(None if g is None else list(np.shape(np.asarray(g))))
        print(json.dumps(shapes))
    """)


def profile_in_framework(name: str, backend: str, scenario: str = "gradient") -> dict:
    """LeNet's ``scenario`` closure in framework ``name`` profiled over 2 calls by its backend
    (``backend``, the class in its module): the stored summary (``measure.profile.profile_closure``),
    and whether every complete event of the trace file has the fields Chrome and Perfetto need."""
    return run_in_framework(name, _lenet_in(name, backend) + f"""
        from dlbench.measure.profile import profile_closure, read_trace
        m, p = built("lenet")
        run = getattr(b, "{scenario}")(m, p); b.sync(run())
        with tempfile.TemporaryDirectory() as tmp:  # the trace goes with it (none left in the system's temp)
            out = Path(tmp)
            summary = profile_closure(b.profile, run, 2, out)
            spans = [e for e in read_trace(out / summary["trace"]) if e.get("ph") in ("X", "B")]
        summary["chrome_fields"] = bool(spans) and all({{"name", "ts", "pid", "tid"}} <= e.keys() for e in spans)
        print(json.dumps(summary))
    """)
