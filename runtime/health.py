"""The runtime pod's readiness and liveness check: Triton's own answer plus its Python-backend stubs.

Triton (the ``nvidia-pytriton`` 0.7.0 wheel here) keeps answering 200 on ``/v2/models/<name>/ready`` and
``/v2/health/*`` after a Python-backend stub dies (SIGKILL, e.g. the kernel's OOM killer): every request routed to
that model instance then fails with ``Stub process '<model>_0_0' is not healthy.``, the stub is never restarted and
never reaped, so it stays a zombie (state ``Z``) child of ``tritonserver``. (Triton's later releases make the model
ready endpoint see a crashed stub: triton-inference-server/server#8552.) So the pod runs this check as its exec
probes: not ready (the Service stops sending to it) and not live (the kubelet restarts the container) while a stub
of a visible ``tritonserver`` is a zombie.

Standard library only and cheap (one ``/proc`` scan, one local HTTP request on a bare socket; about 40 ms of CPU
a run, a third of it Python's own start): it runs inside the replica's own CPU quota every few seconds.

Usage (exit 0 healthy, 1 not, the reason on stdout, which the kubelet puts in the probe's event)::

    python3 -m modalscale.runtime.health --http-port 8000 --model multimodal   # readiness
    python3 -m modalscale.runtime.health --http-port 8000                      # liveness (/v2/health/live)
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import NamedTuple

SERVER_COMM = "tritonserver"
STUB_COMM_PREFIX = "triton_python"  # comm is cut at 15 characters: "triton_python_b"


class Proc(NamedTuple):
    """One ``/proc/<pid>/stat`` line: pid, comm (at most 15 characters), state letter and parent pid."""

    pid: int
    comm: str
    state: str
    ppid: int


def parse_stat(text: str) -> Proc:
    """Parse ``/proc/<pid>/stat`` (``pid (comm) state ppid ...``; comm may hold spaces and parentheses).

    Raises:
        ValueError: Not a stat line.
    """
    head, sep, rest = text.rpartition(")")
    pid, open_paren, comm = head.partition(" (")
    fields = rest.split()
    if not sep or not open_paren or len(fields) < 2:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    return Proc(int(pid), comm, fields[0], int(fields[1]))


def processes(proc_root: str = "/proc") -> list[Proc]:
    """Every process visible in ``proc_root`` (in a container: only the container's own, by its PID namespace)."""
    out = []
    for name in os.listdir(proc_root):
        if name.isdigit():
            try:
                with open(f"{proc_root}/{name}/stat") as fh:
                    out.append(parse_stat(fh.read()))
            except (OSError, ValueError):  # exited meanwhile
                continue
    return out


def dead_stubs(procs: list[Proc], server_pid: int | None = None) -> list[Proc]:
    """Python-backend stubs that died under a running ``tritonserver`` (zombie children it never reaped).

    Args:
        procs: The visible processes (:func:`processes`).
        server_pid: Only this server's stubs; None: the stubs of every visible ``tritonserver`` (a pod sees one).
    Returns:
        The dead stubs, by pid.
    """
    servers = {p.pid for p in procs if p.comm == SERVER_COMM and p.state != "Z"}
    if server_pid is not None:
        servers &= {server_pid}
    return sorted((p for p in procs if p.ppid in servers and p.comm.startswith(STUB_COMM_PREFIX) and p.state == "Z"),
                  key=lambda p: p.pid)


def http_status(port: int, path: str, timeout_s: float = 3.0) -> int | str:
    """Status code of ``GET http://127.0.0.1:<port><path>``, or why there is none.

    A bare HTTP/1.0 request on a socket: ``http.client`` alone would double the check's start-up CPU (it imports
    the ``email`` package), and the check runs in the replica's quota every few seconds (so do ``pathlib`` and
    ``dataclasses``, left out too).
    """
    try:
        # socket() + connect(), not create_connection(): its getaddrinfo imports the idna codec.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(("127.0.0.1", port))
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head and len(head) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return f"not an HTTP answer: {head[:80]!r}"


def check(http_port: int, model: str | None, procs: list[Proc], server_pid: int | None = None) -> str | None:
    """None when healthy, else why not.

    Healthy: no stub of the server is dead (:func:`dead_stubs`) and Triton answers 200 on
    ``/v2/models/<model>/ready`` (``model`` given: readiness) or ``/v2/health/live`` (liveness).
    """
    dead = dead_stubs(procs, server_pid)
    if dead:
        return (f"{len(dead)} Python-backend stub(s) of tritonserver died (pid {', '.join(str(p.pid) for p in dead)};"
                " Triton neither restarts nor reports them): restart the container")
    path = f"/v2/models/{model}/ready" if model else "/v2/health/live"
    status = http_status(http_port, path)
    return None if status == 200 else f"GET {path} on port {http_port}: {status}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http-port", type=int, default=8000, help="Triton's HTTP port")
    ap.add_argument("--model", help="readiness: this model's ready endpoint; without: liveness (/v2/health/live)")
    ap.add_argument("--server-pid", type=int, help="only this tritonserver's stubs (default: every visible one)")
    args = ap.parse_args(argv)
    problem = check(args.http_port, args.model, processes(), args.server_pid)
    print(problem or "ok")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
