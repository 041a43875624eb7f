# Sourced by scripts/test.sh and scripts/demo.sh: a project virtualenv with everything installed.
# Installs only when pyproject.toml changed since the last install (a stamp in .venv).
EXTRAS=${MODALSCALE_EXTRAS:-test,runtime,demo}
ensure_system_packages() {
  # Go builds the control plane; Debian's prometheus is the real metrics server the tests and the demo start.
  command -v go >/dev/null || { echo "Go >= 1.24 is required to build the control plane" >&2; return 1; }
  if ! command -v prometheus >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
      echo "Installing Debian's prometheus package" >&2
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
    else
      echo "Prometheus is required: sudo apt-get install prometheus" >&2; return 1
    fi
  fi
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
