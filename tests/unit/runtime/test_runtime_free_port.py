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


def test_ports_come_from_the_configured_range_and_stay_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    # below every lane's range of scripts/test.sh (20000-29999), so a lane's servers never see these binds
    monkeypatch.setenv(server.PORT_RANGE_ENV, "15000-15063")
    ports = [server.free_port() for _ in range(40)]
    assert all(15000 <= p <= 15063 for p in ports), ports
    assert len(set(ports)) == len(ports)


def test_a_range_whose_only_port_is_taken_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(server, "_recent_ports", type(server._recent_ports)(maxlen=8))
        monkeypatch.setenv(server.PORT_RANGE_ENV, f"{taken}-{taken}")
        with pytest.raises(OSError, match=f"range {taken}-{taken}"):
            server.free_port()


@pytest.mark.parametrize("value", ["20000", "a-b", "30000-20000", "80-90", "20000-70000", "-"])
def test_a_malformed_range_names_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=server.PORT_RANGE_ENV):
        server.port_range(value)


def test_an_empty_range_means_the_kernels_pick() -> None:
    assert server.port_range("") is None
    assert server.port_range(" 20000-20001 ") == (20000, 20001)
