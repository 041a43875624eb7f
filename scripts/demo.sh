#!/usr/bin/env bash
# Run the modalscale demo end to end (local control plane + real Triton + Prometheus), after setting up .venv.
# Extra arguments go to `modalscale demo` (e.g. --duration 180, --trace PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
ensure_system_packages
prebuild_go_binaries
ensure_python_env
exec modalscale demo "$@"
