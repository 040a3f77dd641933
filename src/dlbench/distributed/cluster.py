"""A cluster of network namespaces on one machine: ``dlbench cluster up --nodes N``.

N namespaces (``dlbench-n0`` ...), each joined to a bridge (``dlb-br0``) by a veth pair, each end
shaped with ``tc tbf`` (a token-bucket rate limit, both directions). Addresses are private and
ours alone: the bridge holds 10.213.0.1/24, node i holds 10.213.0.(10+i). Latency needs
``tc netem``; where the kernel lacks it ``--latency`` is refused with one line (nothing is
created). Every object carries the ``dlb`` prefix and is written to a state file the moment it
exists, so ``dlbench cluster down`` (and any error or Ctrl-C during ``up``) removes exactly what
was made, plus anything with our prefix an earlier crash left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlbench.core.outputs import replace_file

PREFIX_NS = "dlbench-n"
BRIDGE = "dlb-br0"
SUBNET = "10.213.0"
BRIDGE_ADDR = f"{SUBNET}.1"
MAX_NODES = 64


class ClusterError(Exception):
    """The cluster cannot be made or used here; the message is one line."""


@dataclass
class NodeInfo:
    ns: str
    host_if: str
    ns_if: str
    addr: str


@dataclass
class ClusterState:
    nodes: list[NodeInfo] = field(default_factory=list)
    bridge: str = ""
    bandwidth: str = ""
    bandwidth_bps: float | None = None
    latency: str = ""
    latency_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ClusterState:
        return cls(**{**d, "nodes": [NodeInfo(**n) for n in d.get("nodes", [])]})

    def describe(self) -> str:
        shaped = f"tbf {self.bandwidth}" if self.bandwidth else "unshaped"
        lat = f", netem {self.latency}" if self.latency else ""
        return f"{len(self.nodes)} network namespaces on bridge {self.bridge} ({shaped}{lat})"


def state_path() -> Path:
    return Path(os.environ.get("DLBENCH_CLUSTER_STATE", "/run/dlbench/cluster.json"))


_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
          "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_rate(text: str) -> float:
    """``1gbit`` -> 1e9 bits/s (tc's units: kbit, mbit, gbit; kbps/mbps/gbps are bytes)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]+)\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS:
        raise ClusterError(f"bad bandwidth {text!r}: use e.g. 100mbit, 1gbit, 10gbit")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ClusterError(f"bandwidth must be positive, got {text!r}")
    return value


def parse_latency(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(us|ms|s)\s*", text or "")
    if not m:
        raise ClusterError(f"bad latency {text!r}: use e.g. 200us, 0.2ms, 1ms")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _sh(["ip", *args], check)


def _sh(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def unavailable() -> str:
    """Why namespaces cannot be made here ("" when they can)."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{PREFIX_NS}probe{os.getpid()}"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"ip netns does not work here: {made.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return ""


def netem_available() -> bool:
    """Whether the kernel has sch_netem, probed on the loopback of a throw-away namespace."""
    probe = f"{PREFIX_NS}netem{os.getpid()}"
    try:
        if _ip("netns", "add", probe, check=False).returncode != 0:
            return False
        return _sh(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                   check=False).returncode == 0
    finally:
        _ip("netns", "del", probe, check=False)


def load_state() -> ClusterState | None:
    path = state_path()
    if not path.exists():
        return None
    try:
        return ClusterState.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(state: ClusterState) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(state.to_dict(), indent=2))


def _shape(dev: str, ns: str | None, state: ClusterState) -> None:
    """Root qdisc of one veth end: netem (delay) with a tbf child, or tbf alone."""
    tc = ["tc", *(["-n", ns] if ns else []), "qdisc", "add", "dev", dev]
    tbf = []
    if state.bandwidth_bps:
        burst = max(32 * 1024, int(state.bandwidth_bps / 8 / 250))  # at least one 4 ms tick of tokens
        tbf = ["tbf", "rate", state.bandwidth, "burst", str(burst), "latency", "50ms"]
    if state.latency:
        # netem delays each direction by its own qdisc; half the round-trip latency each way
        one_way = f"{state.latency_s / 2 * 1e6:.0f}us"
        _sh([*tc, "root", "handle", "1:", "netem", "delay", one_way])
        if tbf:
            _sh([*tc, "parent", "1:1", "handle", "10:", *tbf])
    elif tbf:
        _sh([*tc, "root", *tbf])


def up(nodes: int, bandwidth: str | None = "1gbit", latency: str | None = None) -> ClusterState:
    """Create the cluster; on any error or interruption remove what was made and re-raise."""
    if not 1 <= nodes <= MAX_NODES:
        raise ClusterError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    bps = parse_rate(bandwidth) if bandwidth else None
    lat = parse_latency(latency) if latency else 0.0
    why = unavailable()
    if why:
        raise ClusterError(f"cannot create network namespaces: {why}")
    if latency and not netem_available():
        raise ClusterError("--latency needs tc netem (sch_netem), which this kernel does not have; "
                           "run without --latency (bandwidth shaping with tbf works)")
    if load_state() is not None or _ours():
        raise ClusterError("a dlbench cluster is already up; run: dlbench cluster down")
    state = ClusterState(bandwidth=bandwidth or "", bandwidth_bps=bps, latency=latency or "", latency_s=lat)
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        state.bridge = BRIDGE
        _save(state)
        _ip("addr", "add", f"{BRIDGE_ADDR}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i in range(nodes):
            node = NodeInfo(f"{PREFIX_NS}{i}", f"dlb-h{i}", f"dlb-n{i}", f"{SUBNET}.{10 + i}")
            _ip("netns", "add", node.ns)
            state.nodes.append(node)
            _save(state)
            _ip("link", "add", node.host_if, "type", "veth", "peer", "name", node.ns_if, "netns", node.ns)
            _ip("link", "set", node.host_if, "master", BRIDGE, "up")
            _ip("-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", node.ns_if)
            _ip("-n", node.ns, "link", "set", node.ns_if, "up")
            _ip("-n", node.ns, "link", "set", "lo", "up")
            _shape(node.ns_if, node.ns, state)  # node -> bridge
            _shape(node.host_if, None, state)  # bridge -> node
        return state
    except BaseException:
        down()
        raise


def _ours() -> list[str]:
    """Namespaces and links with our prefix (leftovers of a crash included)."""
    found = []
    out = _ip("netns", "list", check=False).stdout
    found += [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX_NS)]
    links = _ip("-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith("dlb-"):
                found.append(name)
    return found


def down() -> list[str]:
    """Remove the cluster (what the state file lists, then anything else with our prefix)."""
    removed: list[str] = []
    if shutil.which("ip") is None:
        state_path().unlink(missing_ok=True)
        return removed
    state = load_state()
    names = [n.ns for n in state.nodes] if state else []
    for name in [*names, *_ours()]:
        if name.startswith(PREFIX_NS):
            if _ip("netns", "del", name, check=False).returncode == 0:
                removed.append(name)
        elif _ip("link", "del", name, check=False).returncode == 0:
            removed.append(name)
    state_path().unlink(missing_ok=True)
    return list(dict.fromkeys(removed))


def cell_nodes(state: ClusterState, workers: int) -> list[NodeInfo]:
    if workers > len(state.nodes):
        raise ClusterError(f"{workers} workers need {workers} namespaces; the cluster has {len(state.nodes)} "
                           f"(dlbench cluster down; dlbench cluster up --nodes {workers})")
    return state.nodes[:workers]
