#!/usr/bin/env bash
# Run the modalscale demo end to end (local control plane + real Triton + Prometheus), after setting up .venv.
# Extra arguments go to `modalscale demo` (e.g. --duration 180, --trace PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
ensure_system_packages
# Fail in a second, not after 15 minutes of builds, where the disk cannot hold what a first run writes.
PYTHONPATH="$PWD/src" "$(command -v python3.11 || command -v python3)" -m modalscale.devenv.diskcheck
prebuild_go_binaries
ensure_python_env
exec modalscale demo "$@"
