"""Measure the link the workers of a scaling cell use: TCP round-trip latency and bandwidth.

``python -m dlbench.distributed.linkprobe serve HOST PORT`` answers one client;
``python -m dlbench.distributed.linkprobe probe HOST PORT NBYTES`` prints JSON
``{"latency_s": ..., "bandwidth_Bps": ...}``: half the median of 200 one-byte round trips, and
``NBYTES`` streamed one way divided by the time until the server acknowledged the last byte.
The scaling model uses these figures (for the loopback, where no rate is configured, and to
check a shaped link delivers its rate). Only addresses of the run's own network are probed.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time

CHUNK = 1 << 20


def serve(host: str, port: int) -> None:
    with socket.create_server((host, port)) as srv:
        srv.settimeout(60)
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:  # ping-pong until the client sends 'B'
                b = conn.recv(1)
                if not b or b == b"B":
                    break
                conn.sendall(b)
            header = _recv_exact(conn, 8)
            remaining = int.from_bytes(header, "big")
            buf = bytearray(CHUNK)
            while remaining:
                n = conn.recv_into(buf, min(CHUNK, remaining))
                if not n:
                    break
                remaining -= n
            conn.sendall(b"k")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("peer closed")
        data += part
    return data


def probe(host: str, port: int, nbytes: int, rounds: int = 200) -> dict[str, float]:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            conn.sendall(b"p")
            _recv_exact(conn, 1)
            rtts.append(time.perf_counter() - t0)
        conn.sendall(b"B")
        conn.sendall(nbytes.to_bytes(8, "big"))
        payload = memoryview(bytes(CHUNK))
        t0 = time.perf_counter()
        left = nbytes
        while left:
            n = min(CHUNK, left)
            conn.sendall(payload[:n])
            left -= n
        _recv_exact(conn, 1)
        seconds = time.perf_counter() - t0
    return {"latency_s": statistics.median(rtts) / 2, "bandwidth_Bps": nbytes / seconds}


def measure(host: str, port: int, nbytes: int, server_prefix: list[str] | None = None,
            client_prefix: list[str] | None = None, timeout_s: float = 120.0) -> dict[str, float] | None:
    """Run a server and a client (each optionally inside a namespace); None if the probe failed."""
    from dlbench.launch.subprocess import thread_env

    env = thread_env(None)
    server = subprocess.Popen([*(server_prefix or []), sys.executable, "-m", "dlbench.distributed.linkprobe", "serve",
                               host, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, env=env)
    try:
        out = subprocess.run([*(client_prefix or []), sys.executable, "-m", "dlbench.distributed.linkprobe", "probe",
                              host, str(port), str(nbytes)], capture_output=True, text=True, timeout=timeout_s,
                             env=env)
        return json.loads(out.stdout) if out.returncode == 0 else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    finally:
        server.kill()
        server.wait()


def main(argv: list[str]) -> int:
    if argv[1] == "serve":
        serve(argv[2], int(argv[3]))
        return 0
    print(json.dumps(probe(argv[2], int(argv[3]), int(argv[4]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
