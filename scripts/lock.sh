#!/usr/bin/env bash
# Moves constraints.txt (the versions .venv and the images install) to what PyPI resolves for pyproject.toml as of
# a date: scripts/lock.sh 2026-12-04T21:40:00Z. Keeps the file's header; run the whole suite after.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: scripts/lock.sh <UTC date, e.g. 2026-12-04T21:40:00Z>" >&2; exit 2; }
source scripts/env.sh
ensure_python_env
tmp=$(mktemp)
.venv/bin/uv pip compile pyproject.toml --extra test --extra runtime --extra openvino --extra demo \
  --python-version 3.11 --exclude-newer "$1" --no-header --no-annotate -q -o "$tmp"
{ grep '^#' constraints.txt; cat "$tmp"; } > constraints.txt.new && mv constraints.txt.new constraints.txt
rm -f "$tmp"
echo "constraints.txt: $(grep -c '==' constraints.txt) pins as of $1"
