"""Fault injection on `dlbench run`: signals to the driver, a killed worker, two drivers on one
database, resuming a run that is still measured. What each promises is in docs/reliability.md.

The drivers are real `python -m dlbench.cli run` processes measuring the fake framework
(tests/fakefw.py); its ``held`` variant parks a cell mid-measurement while the file named by
``DLBENCH_FAKE_HOLD`` lists the cell's batch size, so a fault always lands inside a measurement
without any sleep in the test. Each driver gets a private TMPDIR, so the check that no temporary
directory is left sees only its own.
"""

import hashlib
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench import lease
from dlbench.cli import main
from dlbench.store import SCHEMA_VERSION, Store
from tests.conftest import FAKE, requires
from tests.old_schema import make_v2

pytestmark = requires("torch")

SRC = str(Path(__file__).resolve().parents[1] / "src")
WAIT_S = 300  # a generous bound for a 2-core CI machine; reaching it fails the test


@pytest.fixture(autouse=True)
def _fake(fake_framework):
    """Every test here may use the fake framework (tests/fakefw.py)."""


class Driver:
    """A `dlbench run` process on ``db`` with the private temporary directory ``tmp``."""

    def __init__(self, path: Path, db: Path, tmp: Path, hold: Path, *args: str, name: str = "driver"):
        tmp.mkdir(exist_ok=True)
        self.out, self.err = path / f"{name}.out", path / f"{name}.err"
        env = {**os.environ, "DLBENCH_PLUGINS": FAKE, "PYTHONPATH": SRC, "TMPDIR": str(tmp),
               "DLBENCH_FAKE_HOLD": str(hold)}
        cmd = [sys.executable, "-m", "dlbench.cli", "run", "--db", str(db), "--json", *args]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)

    @property
    def stderr(self) -> str:
        return self.err.read_text()

    def wait(self) -> int:
        return self.proc.wait(timeout=WAIT_S)

    def worker(self, batch: int) -> int:
        """The pid of this driver's worker measuring the cell of ``batch``, once it runs."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the driver ended early ({self.proc.returncode}): {self.stderr[-2000:]}"
            for pid, job in workers_of(self.proc.pid):
                if job.get("kind") == "scenario" and job["cell"]["batch"] == batch:
                    return pid
            time.sleep(0.1)
        raise AssertionError(f"no worker measuring batch {batch} within {WAIT_S} s")


def cell_args(*batches: int) -> list[str]:
    return ["--model", "lenet", "--framework", "fakefw", "--variant", "held", "--scenario", "forward",
            "--batch", ",".join(map(str, batches)), "--threads", "1", "--warmup", "1", "--min-iters", "3",
            "--min-time", "0", "--repeats", "1"]


def _stat(pid: int) -> list[str] | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def workers_of(parent: int) -> list[tuple[int, dict]]:
    """(pid, job) of every live ``dlbench.worker`` whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[0] == "Z" or int(stat[1]) != parent:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode().split("\0")
            job = json.loads(Path(cmd[cmd.index("dlbench.worker") + 1]).read_text())
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(entry.name), job))
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` ends (a killed process needs a moment to be reaped)."""
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def ours(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("dlbench"))


def run_of(db: Path) -> dict:
    store = Store(db, create=False)
    try:
        (run_id,) = [r["id"] for r in store.list_runs()]
        return store.get_run(run_id)
    finally:
        store.close()


def cells_of(db: Path) -> dict[str, tuple[int, str]]:
    conn = sqlite3.connect(db)
    try:
        return {key: (cid, status) for cid, key, status in conn.execute("SELECT id, key, status FROM cells")}
    finally:
        conn.close()


def digest(db: Path, cell_ids: list[int]) -> str:
    """Hash of the stored cells ``cell_ids``: every column of them and of all their samples."""
    conn = sqlite3.connect(db)
    try:
        marks = ",".join("?" * len(cell_ids))
        cells = conn.execute(f"SELECT * FROM cells WHERE id IN ({marks}) ORDER BY id", cell_ids).fetchall()
        samples = conn.execute(f"SELECT * FROM samples WHERE cell_id IN ({marks}) ORDER BY rowid", cell_ids).fetchall()
    finally:
        conn.close()
    assert samples, "no samples to compare"
    return hashlib.sha256(repr((cells, samples)).encode()).hexdigest()


def resume(path: Path, command: str, tmp: Path) -> subprocess.CompletedProcess:
    """Run the resume command as printed (``dlbench run --resume ID --db DB``) in another driver."""
    args = command.split()
    assert args[:3] == ["dlbench", "run", "--resume"], command
    env = {**os.environ, "DLBENCH_PLUGINS": FAKE, "PYTHONPATH": SRC, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "dlbench.cli", *args[1:], "--json"], env=env, capture_output=True,
                          text=True, timeout=WAIT_S)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_driver_stops_the_run_cleanly(tmp_path, sig, code):
    """SIGTERM (timeout, systemd, Slurm, CI cancellation) left the run `running`, its worker measuring
    and its temporary directories behind, exit 143 from Python's default action; now it ends as
    Ctrl-C does: worker killed, nothing left in TMPDIR, run `interrupted`, the exact resume command."""
    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    hold.write_text("3")
    driver = Driver(tmp_path, db, tmp, hold, *cell_args(2, 3))
    worker = driver.worker(3)
    driver.proc.send_signal(sig)
    assert driver.wait() == code
    run = run_of(db)
    assert run["status"] == "interrupted"
    command = f"dlbench run --resume {run['id']} --db {db}"
    assert command in driver.stderr and f"interrupted by {sig.name}" in driver.stderr
    assert gone(worker), "the worker outlived the driver"
    assert not workers_of(driver.proc.pid)
    assert ours(tmp) == []
    before = cells_of(db)
    assert list(before) == ["fakefw/held/lenet/forward/b2/t1/cpu"] and before[next(iter(before))][1] == "ok"
    if sig != signal.SIGTERM:
        return
    stored = digest(db, [cid for cid, _ in before.values()])
    hold.unlink()
    done = resume(tmp_path, command, tmp)
    assert done.returncode == 0, done.stderr
    after = cells_of(db)
    assert len(after) == 2 and all(status == "ok" for _, status in after.values())
    assert all(after[k] == v for k, v in before.items()), "a finished cell was measured again"
    assert digest(db, [cid for cid, _ in before.values()]) == stored
    assert run_of(db)["status"] == "complete" and ours(tmp) == []


def test_sigkill_of_the_driver_leaves_a_stale_run_that_resumes(tmp_path, capsys):
    """kill -9 of `dlbench run`: its worker dies with it (PR_SET_PDEATHSIG), the run reads `stale`
    (it stayed `running` forever), the next run removes the dead driver's temporary directory,
    and --resume measures only the missing cells and leaves the stored ones as they were."""
    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    hold.write_text("3")
    driver = Driver(tmp_path, db, tmp, hold, *cell_args(2, 3))
    worker = driver.worker(3)
    driver.proc.send_signal(signal.SIGKILL)
    assert driver.wait() == -signal.SIGKILL
    assert gone(worker), "the worker outlived its SIGKILLed driver"
    left = ours(tmp)
    assert len(left) == 1 and left[0].startswith(f"dlbench-run-{driver.proc.pid}-")
    run = run_of(db)
    assert run["status"] == "stale" and run["lease"]["pid"] == driver.proc.pid
    assert main(["runs", "--db", str(db), "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["stale"]
    before = cells_of(db)
    assert len(before) == 1
    stored = digest(db, [cid for cid, _ in before.values()])
    hold.unlink()
    done = resume(tmp_path, f"dlbench run --resume {run['id']} --db {db}", tmp)
    assert done.returncode == 0, done.stderr
    after = cells_of(db)
    assert len(after) == 2 and all(status == "ok" for _, status in after.values())
    assert all(after[k] == v for k, v in before.items()), "a finished cell was measured again"
    assert digest(db, [cid for cid, _ in before.values()]) == stored
    assert run_of(db)["status"] == "complete"
    assert ours(tmp) == [], "the dead driver's temporary directory was not removed"


def test_sigkill_of_a_worker_fails_its_cell_and_the_run_goes_on(tmp_path):
    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    hold.write_text("2")
    driver = Driver(tmp_path, db, tmp, hold, *cell_args(2, 3))
    worker = driver.worker(2)
    os.kill(worker, signal.SIGKILL)
    assert driver.wait() == 1  # a cell without a time
    failed = json.loads(driver.out.read_text())["failed"]
    assert [(c["key"], c["status"]) for c in failed] == [("fakefw/held/lenet/forward/b2/t1/cpu", "failed")]
    assert "killed by SIGKILL" in failed[0]["reason"]
    assert sorted(status for _, status in cells_of(db).values()) == ["failed", "ok"]
    assert run_of(db)["status"] == "complete"
    assert ours(tmp) == []


def test_resume_of_a_live_run_is_refused(tmp_path, capsys):
    """--resume of a run still measured re-measured the same cell beside the driver (skewing both)
    and then failed on the store's UNIQUE constraint; now it is refused, naming pid and host."""
    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    hold.write_text("3")
    driver = Driver(tmp_path, db, tmp, hold, *cell_args(2, 3))
    driver.worker(3)
    run_id = run_of(db)["id"]
    before = cells_of(db)
    stored = digest(db, [cid for cid, _ in before.values()])
    assert main(["run", "--resume", run_id, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"pid {driver.proc.pid} on host {platform.node()}" in err and len(err.strip().splitlines()) == 1
    assert cells_of(db) == before and digest(db, [cid for cid, _ in before.values()]) == stored
    assert run_of(db)["status"] == "running"
    hold.unlink()
    assert driver.wait() == 0, driver.stderr
    assert [status for _, status in cells_of(db).values()] == ["ok", "ok"]
    assert run_of(db)["status"] == "complete" and run_of(db)["lease"] is None


def test_resume_on_another_machine_is_refused_and_the_run_left_as_it_was(tmp_path, capsys):
    """A study resumed in a later session on another CPU mixed two machines' times in one run (the
    sessions' CPUs differ: AVX2 one day, AVX-512 the next). Now refused, naming what differs, with the
    run untouched; the same machine under another hostname still resumes."""
    from dlbench.measure import environment

    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    driver = Driver(tmp_path, db, tmp, hold, *cell_args(2))
    assert driver.wait() == 0, driver.stderr
    run_id = run_of(db)["id"]
    store = Store(db, create=False)
    here = store.environment(run_id)
    elsewhere = {**here, "hostname": "elsewhere",
                 "cpu": {**here["cpu"], "model": "Other CPU", "flags": [*here["cpu"]["flags"], "avx512zz"]}}
    store.save_environment(run_id, elsewhere)
    store.close()
    before = cells_of(db)
    assert main(["run", "--resume", run_id, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for needle in (run_id, "another machine", "Other CPU", "avx512zz then only"):
        assert needle in err, err
    store = Store(db, create=False)
    assert store.environment(run_id) == elsewhere
    store.save_environment(run_id, {**here, "hostname": "renamed"})
    store.close()
    assert cells_of(db) == before and run_of(db)["status"] == "complete"
    assert environment.machine_differences(environment.machine(here), environment.this_machine()) == []
    assert main(["run", "--resume", run_id, "--db", str(db)]) == 0, capsys.readouterr().err


def test_two_drivers_on_one_database(tmp_path):
    """Two runs measured at once on one database: both complete, each with its own cells, and neither
    removes the other's temporary directory (each run starts by removing those of dead drivers)."""
    db, tmp, hold = tmp_path / "r.db", tmp_path / "tmp", tmp_path / "hold"
    hold.write_text("3")
    first = Driver(tmp_path, db, tmp, hold, *cell_args(3), name="first")
    first.worker(3)
    second = Driver(tmp_path, db, tmp, hold, *cell_args(3), name="second")
    second.worker(3)
    assert len(ours(tmp)) == 2
    hold.unlink()
    assert first.wait() == 0, first.stderr
    assert second.wait() == 0, second.stderr
    store = Store(db, create=False)
    try:
        runs = store.list_runs()
        assert [r["status"] for r in runs] == ["complete", "complete"]
        assert [[c.status for c in store.cells(r["id"])] for r in runs] == [["ok"], ["ok"]]
    finally:
        store.close()
    assert ours(tmp) == []


# --- leases and temporary directories, without measuring ------------------------------------------
def _run_with_lease(db: Path, pid: int, host: str, token: str, heartbeat: float) -> str:
    from dlbench.flags import build_suite

    suite = build_suite(models=["lenet"], frameworks=["fakefw"], variants=["ok"], scenarios=["forward"], batches=[2],
                        threads=[1])
    store = Store(db)
    try:
        run_id = store.create_run(suite.name, suite.model_dump())
        assert store.claim_lease(run_id, {"pid": pid, "host": host, "token": token, "heartbeat": heartbeat},
                                 lease.live) is None
        return run_id
    finally:
        store.close()


def test_another_hosts_run_is_live_while_its_heartbeat_is_fresh(tmp_db, capsys):
    run_id = _run_with_lease(tmp_db, 4242, "elsewhere", "", time.time())
    assert main(["run", "--resume", run_id, "--db", str(tmp_db)]) == 2
    assert "pid 4242 on host elsewhere" in capsys.readouterr().err
    conn = sqlite3.connect(tmp_db)
    with conn:
        conn.execute("UPDATE leases SET heartbeat=?", (time.time() - lease.STALE_AFTER_S - 1,))
    conn.close()
    assert run_of(tmp_db)["status"] == "stale"


def test_a_recycled_pid_does_not_keep_a_run_alive(tmp_db):
    """The driver's pid now names another process (this one): the token (boot id, start time) differs."""
    mine = lease.holder()
    run_id = _run_with_lease(tmp_db, mine["pid"], mine["host"], mine["token"].split("/")[0] + "/1", time.time())
    store = Store(tmp_db, create=False)
    try:
        assert store.get_run(run_id)["status"] == ("stale" if mine["token"] else "running")
    finally:
        store.close()


def test_a_database_from_before_leases_opens_and_is_migrated(tmp_db):
    run_id = make_v2(tmp_db, status="running")  # version 2 less its leases is version 1
    conn = sqlite3.connect(tmp_db)
    with conn:
        conn.execute("DROP TABLE leases")
        conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.close()
    store = Store(tmp_db, create=False)
    try:
        run = store.get_run(run_id)
        assert run["suite_name"] == "old" and run["status"] == "stale"  # `running`, by a driver long gone
    finally:
        store.close()
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert conn.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)
    conn.close()


def test_sweep_removes_only_directories_of_dead_drivers(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    paths = {name: tmp_path / name for name in (f"dlbench-run-{dead.pid}-a", f"dlbench-run-{me}-b",
                                                f"dlbench-run-{me}-c", "dlbench-run-x-d", "dlbench-job-e")}
    for p in paths.values():
        p.mkdir()
    (paths[f"dlbench-run-{me}-b"] / "owner").write_text(lease.process_token(me) or "")
    (paths[f"dlbench-run-{me}-c"] / "owner").write_text("another-boot/1")  # this pid, another process
    removed = lease.sweep(tmp_path)
    expected = {f"dlbench-run-{dead.pid}-a"} | ({f"dlbench-run-{me}-c"} if lease.process_token(me) else set())
    assert {p.name for p in removed} == expected
    assert {p.name for p in tmp_path.iterdir()} == set(paths) - expected
