#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: create .venv, install the package with its test extras,
# build (or reuse from ~/.cache/modalscale) the control-plane binaries, run ruff and mypy, then pytest on tests/.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
ensure_venv
modalscale cluster build >/dev/null
# Lint and type checks first (rules and packages in pyproject.toml: [tool.ruff], [tool.mypy]).
ruff check .
mypy
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when nothing was collected: that is a failure here, never a silent pass.
exit $rc
