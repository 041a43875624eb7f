# Sourced by scripts/test.sh and scripts/demo.sh: a project virtualenv with everything installed.
# Installs only when pyproject.toml changed since the last install (a stamp in .venv).
EXTRAS=${MODALSCALE_EXTRAS:-test,runtime}
ensure_system_packages() {
  # Debian packages the tests start for real (none needed yet beyond Go, which the machine has).
  command -v go >/dev/null || { echo "Go is required to build the control plane (apt-get install golang-go)" >&2; return 1; }
}
ensure_venv() {
  ensure_system_packages
  local py
  py=$(command -v python3.11 || command -v python3)
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local stamp
  stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-$EXTRAS"
  if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
    rm -f .venv/.installed-*
    touch "$stamp"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
  export VIRTUAL_ENV="$PWD/.venv"
}
