"""``modalscale profile``'s local server log: a path of its own per run, removed after a normal run and kept (and
named) after a failure (user report item 17: two runs wrote one fixed /tmp file)."""

from __future__ import annotations

import pytest

from modalscale import profile_cli


def test_each_run_gets_its_own_log_removed_after_a_normal_run() -> None:
    said: list[str] = []
    with profile_cli.server_log(said.append) as first, profile_cli.server_log(said.append) as second:
        assert first != second and first.parent != second.parent
        first.write_text("tritonserver output\n")
        assert first.parent.name.startswith("modalscale-profile-") and first.name == "tritonserver.log"
    assert not first.parent.exists() and not second.parent.exists() and said == []


def test_a_failed_run_keeps_its_log_and_names_it() -> None:
    said: list[str] = []
    with pytest.raises(RuntimeError), profile_cli.server_log(said.append) as log:
        log.write_text("E1201 model load failed\n")
        raise RuntimeError("tritonserver exited")
    try:
        assert log.read_text() == "E1201 model load failed\n"
        assert said == [f"The local runtime's log is kept in {log}"]
    finally:
        log.unlink()
        log.parent.rmdir()
