"""`dlbench cluster up/down`: network namespaces on a bridge, shaped with tc tbf; nothing left behind
on success, on error or on Ctrl-C; --latency refused in one line where netem is missing; the
loopback fallback where namespaces cannot be made."""

import json

import pytest

from dlbench.cli.main import main
from dlbench.distributed import cluster
from dlbench.distributed.scaling import Session
from dlbench.planning.plan import Cell, suite_from_dict

pytestmark = pytest.mark.machine_wide  # the namespaces and bridge are machine-wide
WHY = cluster.unavailable()
needs_netns = pytest.mark.skipif(WHY != "", reason=f"network namespaces unavailable here: {WHY}")


@pytest.fixture(autouse=True)
def state_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_CLUSTER_STATE", str(tmp_path / "cluster.json"))
    yield tmp_path / "cluster.json"
    if WHY == "":
        cluster.down()


def test_parse_rate_and_latency():
    assert cluster.parse_rate("1gbit") == 1e9 and cluster.parse_rate("100mbit") == 1e8
    assert cluster.parse_rate("125mbps") == 1e9
    assert cluster.parse_latency("0.2ms") == pytest.approx(2e-4) and cluster.parse_latency("200us") == pytest.approx(2e-4)
    for bad in ("fast", "1 gigabit", "-1gbit", "0mbit"):
        with pytest.raises(cluster.ClusterError):
            cluster.parse_rate(bad)
    with pytest.raises(cluster.ClusterError):
        cluster.parse_latency("soon")


@needs_netns
def test_up_shapes_links_and_down_removes_everything(state_file):
    import subprocess

    state = cluster.up(2, "100mbit")
    assert [n.addr for n in state.nodes] == ["10.213.0.10", "10.213.0.11"]
    assert json.loads(state_file.read_text())["bandwidth"] == "100mbit"
    qdisc = subprocess.run(["tc", "-n", "dlbench-n0", "qdisc", "show", "dev", "dlb-n0"], capture_output=True,
                           text=True).stdout
    assert "tbf" in qdisc and "100Mbit" in qdisc
    with pytest.raises(cluster.ClusterError, match="already up"):
        cluster.up(2)
    removed = cluster.down()
    assert {"dlbench-n0", "dlbench-n1", "dlb-br0"} <= set(removed)
    assert cluster._ours() == [] and not state_file.exists()


@needs_netns
def test_shaped_link_delivers_its_rate():
    from dlbench.distributed import linkprobe

    cluster.up(2, "100mbit")
    probe = linkprobe.measure("10.213.0.10", 29399, 4 << 20, ["ip", "netns", "exec", "dlbench-n0"],
                              ["ip", "netns", "exec", "dlbench-n1"])
    assert probe is not None
    assert 0.6 * 12.5e6 < probe["bandwidth_Bps"] < 1.2 * 12.5e6  # 100 Mbit/s = 12.5 MB/s


@needs_netns
@pytest.mark.parametrize("error", [cluster.ClusterError("planted"), KeyboardInterrupt()])
def test_failure_during_up_leaves_nothing(monkeypatch, state_file, error):
    calls = []
    real = cluster._shape

    def shape(dev, ns, state):
        calls.append(dev)
        if len(calls) == 3:  # second node
            raise error
        real(dev, ns, state)
    monkeypatch.setattr(cluster, "_shape", shape)
    with pytest.raises(type(error)):
        cluster.up(2, "1gbit")
    assert cluster._ours() == [] and not state_file.exists()


@pytest.mark.skipif(WHY != "" or cluster.netem_available(), reason="needs namespaces and a kernel without netem")
def test_latency_without_netem_is_one_line_exit_2(capsys, state_file):
    assert main(["cluster", "up", "--nodes", "2", "--latency", "0.2ms"]) == 2
    err = capsys.readouterr().err
    assert "netem" in err and len(err.strip().splitlines()) == 1
    assert cluster._ours() == [] and not state_file.exists()
    assert main(["run", "--model", "lenet", "--scenario", "scaling", "--cluster", "--latency", "1ms",
                 "--db", str(state_file.parent / "r.db")]) == 2
    assert "netem" in capsys.readouterr().err and not (state_file.parent / "r.db").exists()


@needs_netns
def test_cli_up_status_down(capsys):
    assert main(["cluster", "up", "--nodes", "2", "--bandwidth", "1gbit"]) == 0
    assert main(["cluster", "status", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["bandwidth_bps"] == 1e9
    assert main(["cluster", "down"]) == 0
    assert cluster._ours() == []


def test_bad_cluster_usage(capsys):
    assert main(["cluster", "up"]) == 2
    assert "--nodes" in capsys.readouterr().err
    assert main(["cluster", "up", "--nodes", "2", "--bandwidth", "fast"]) == 2
    assert "bad bandwidth" in capsys.readouterr().err


def test_without_namespaces_the_run_falls_back_to_loopback(monkeypatch, capsys):
    monkeypatch.setattr(cluster, "unavailable", lambda: "network namespaces need root")
    suite = suite_from_dict({"models": ["lenet"], "scenarios": ["scaling"], "distributed": {"cluster": "netns"}})
    cell = Cell("torch", "eager", "lenet", "scaling", 4, 1, workers=1, scaling="weak", exchange="allreduce",
                cluster="netns")
    with Session(suite, [cell]) as session:
        net = session.network.describe()
    assert net["kind"] == "loopback" and net["fallback"] == "network namespaces need root"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "loopback" in err[0]
