"""``free_port`` never hands out a port it handed out recently in this process: a port is released before its
user binds it, and the kernel may give the same ephemeral port to the next ``bind(0)`` (seen in a whole-suite run:
the HA test's etcd peer port and apiserver port were both 46287, and its control plane never started)."""

from __future__ import annotations

import socket

import pytest

import modalscale.runtime.server as server


def test_ports_picked_one_after_another_are_distinct() -> None:
    ports = [server.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_a_port_the_kernel_hands_out_twice_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's answers are replayed: 40001, 40001 (again), 40002: the second call gets 40002, not 40001."""
    answers = iter([40001, 40001, 40002])

    class FakeSocket:
        def __init__(self, *_: object) -> None:
            self.port = 0

        def __enter__(self) -> FakeSocket:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(answers)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(server, "_recent_ports", type(server._recent_ports)(maxlen=8))
    monkeypatch.setattr(server.socket, "socket", FakeSocket)
    assert server.free_port() == 40001
    assert server.free_port() == 40002


def test_the_port_is_free_when_handed_out() -> None:
    port = server.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
