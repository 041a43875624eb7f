# Sourced by scripts/test.sh and scripts/demo.sh: a project virtualenv with everything installed.
# Installs only when pyproject.toml or constraints.txt changed since the last install (a stamp in .venv).
EXTRAS=${MODALSCALE_EXTRAS:-test,runtime,openvino,demo}
UV_VERSION=0.13.9
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
  ensure_node_packages
}
# Debian packages of the real kubelet node (modalscale.devenv.realnode): containerd (CRI), runc, the CNI plugins,
# iptables (kube-proxy, CNI masquerade), iproute2, and umoci + busybox-static for the locally built pause image.
# Without them `modalscale cluster up` runs KWOK-only and says which piece is missing.
NODE_PACKAGES="containerd runc containernetworking-plugins iptables iproute2 umoci busybox-static"
# `modalscale images build` (src/modalscale/devenv/images.py): debootstrap makes the Debian base rootfs, buildah
# builds the Dockerfiles without a daemon (umoci is above).
IMAGE_PACKAGES="debootstrap buildah"
ensure_node_packages() {
  local missing="" pkg
  for pkg in $NODE_PACKAGES $IMAGE_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing="$missing $pkg"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "Installing Debian packages for the real node:$missing" >&2
    # policy-rc.d 101: the packages must not start a system containerd; the cluster runs its own.
    local policy=/usr/sbin/policy-rc.d created=""
    [ -e "$policy" ] || { printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1; }
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing >/dev/null
    local rc=$?
    [ -n "$created" ] && rm -f "$policy"
    [ $rc = 0 ] || { echo "Installing$missing failed; the cluster will run KWOK-only" >&2; return 0; }
  else
    echo "Not root: the real kubelet node needs$missing (sudo apt-get install$missing);" \
         "without them \`modalscale cluster up\` runs KWOK-only" >&2
  fi
}
# The control plane's Go builds (minutes, CPU-bound) in the background with the machine's own Python (the module
# needs only the standard library), so that on a fresh machine they overlap .venv's install (downloads) instead of
# following it; the demo's own builds wait on the same lock and find them cached (src/modalscale/devenv/prebuild.py).
prebuild_go_binaries() {
  command -v go >/dev/null || return 0
  local py log
  py=$(command -v python3.11 || command -v python3)
  log="${MODALSCALE_CACHE_DIR:-$HOME/.cache/modalscale}/prebuild.log"
  mkdir -p "$(dirname "$log")"
  (PYTHONPATH="$PWD/src" "$py" -m modalscale.devenv.prebuild 2>&1 | tee "$log" || true) &
}
ensure_venv() {
  ensure_system_packages
  ensure_python_env
}
# The .venv alone (no Go, no Debian packages): what `scripts/test.sh --fast` needs for tests/unit.
ensure_python_env() {
  local py
  py=$(command -v python3.11 || command -v python3)
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local stamp
  stamp=".venv/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)-$EXTRAS"
  if [ ! -f "$stamp" ]; then
    # uv (PyPI) installs the same versions pip resolves (checked with `pip freeze` side by side, 4 Dec 2026), from its
    # own cache by hard links: 12 s for a fresh clone's .venv on a warm machine, where pip unpacked every wheel again
    # (113 s: torch, openvino, ...). A cold machine downloads once into ~/.cache/uv.
    .venv/bin/python -m pip install -q --upgrade pip "uv==$UV_VERSION"
    # -c constraints.txt: the versions CI ran green, not what PyPI has today (a new release changed a clean
    # clone's .venv and rebuilt the runtime image's dependency layer once, ci49).
    .venv/bin/uv pip install --python .venv/bin/python -q -c constraints.txt -e ".[$EXTRAS]"
    rm -f .venv/.installed-*
    touch "$stamp"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
  export VIRTUAL_ENV="$PWD/.venv"
  use_bytecode_cache
  use_cached_tools
}
# One bytecode cache for every Python process started from here, inside .venv (not beside the sources, not in
# site-packages: images and wheels built from the tree stay as they were). uv installs without bytecode, and with
# PYTHONDONTWRITEBYTECODE=1 in the environment (the CI machines set it) every process compiled scikit-learn, SciPy,
# torch, the Kubernetes client ... from source again: importing the suite's heavy packages took 12.6 s of user CPU
# in a fresh interpreter, 7.7 s with the cache (shared 2-core machine), and tests/unit alone starts dozens of them.
use_bytecode_cache() {
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
}
# The pinned kubectl and helm that `modalscale cluster build` caches (src/modalscale/devenv/binaries.py), on PATH,
# so README's `kubectl ...` and `helm ...` lines run as written. Elsewhere: eval "$(modalscale cluster env)".
use_cached_tools() {
  local line
  line=$(.venv/bin/modalscale cluster env 2>/dev/null | grep '^export PATH=') && eval "$line"
  return 0
}
