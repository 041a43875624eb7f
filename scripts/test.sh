#!/usr/bin/env bash
# Run the test suite from a fresh clone: create .venv, install the package with its test extras, run ruff and mypy,
# then pytest.
#   scripts/test.sh          the whole suite (README's and CI's command): also builds (or reuses from
#                            ~/.cache/modalscale) the control-plane binaries, then runs pytest on tests/.
#   scripts/test.sh --fast   the inner loop: tests/unit only (pure logic, no cluster, no network), and no Go
#                            builds or Debian packages, which tests/unit does not use.
# Other arguments go to pytest, e.g. `scripts/test.sh tests/unit -x` or `scripts/test.sh --fast -k budget`.
# Every run prints the 20 slowest tests (--durations=20 in pyproject's addopts).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
fast=""
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
if [ -n "$fast" ]; then
  ensure_python_env
else
  ensure_venv
  modalscale cluster build >/dev/null
fi
# Lint and type checks first (rules and packages in pyproject.toml: [tool.ruff], [tool.mypy]).
ruff check .
mypy
set +e
if [ -n "$fast" ]; then
  python -m pytest tests/unit "$@"
else
  python -m pytest "$@"
fi
rc=$?
set -e
# pytest exits 5 when nothing was collected: that is a failure here, never a silent pass.
exit $rc
