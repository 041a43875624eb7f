"""modalscale.runtime.health's pure parts: /proc/<pid>/stat lines and which stubs count as dead."""

from __future__ import annotations

import pytest

from modalscale.runtime.health import Proc, dead_stubs, parse_stat, processes


def test_parse_stat_takes_comm_with_spaces_and_parentheses() -> None:
    assert parse_stat("42 (triton_python_b) Z 7 42 1 0 -1") == Proc(42, "triton_python_b", "Z", 7)
    assert parse_stat("9 (a (b) c) S 1 9 9 0") == Proc(9, "a (b) c", "S", 1)
    with pytest.raises(ValueError, match="stat"):
        parse_stat("garbage")


def test_only_zombie_stubs_of_a_running_server_are_dead() -> None:
    procs = [Proc(1, "tritonserver", "S", 0), Proc(2, "triton_python_b", "S", 1), Proc(3, "triton_python_b", "Z", 1),
             Proc(4, "python3", "Z", 1),  # not a stub
             Proc(10, "tritonserver", "S", 0), Proc(11, "triton_python_b", "Z", 10),
             Proc(20, "tritonserver", "Z", 0), Proc(21, "triton_python_b", "Z", 20),  # its server is gone too
             Proc(30, "bash", "S", 0), Proc(31, "triton_python_b", "Z", 30)]  # not under a tritonserver
    assert [p.pid for p in dead_stubs(procs)] == [3, 11]
    assert [p.pid for p in dead_stubs(procs, server_pid=10)] == [11]
    assert dead_stubs(procs[:2]) == []  # a living stub


def test_processes_reads_this_process() -> None:
    import os

    me = [p for p in processes("/proc") if p.pid == os.getpid()]
    assert len(me) == 1 and me[0].ppid == os.getppid() and me[0].state in "RS"
