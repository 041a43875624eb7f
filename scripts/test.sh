#!/usr/bin/env bash
# Run the test suite from a fresh clone: create .venv, install the package with its test extras, run ruff and mypy,
# then pytest.
#   scripts/test.sh          the whole suite (README's and CI's command): also builds (or reuses from
#                            ~/.cache/modalscale) the control-plane binaries, then runs pytest on tests/.
#   scripts/test.sh --fast   the inner loop: tests/unit only (pure logic, no cluster, no network), and no Go
#                            builds or Debian packages, which tests/unit does not use.
# Other arguments go to pytest, e.g. `scripts/test.sh tests/unit -x` or `scripts/test.sh --fast -k budget`.
# Every run prints the 20 slowest tests (--durations=20 in pyproject's addopts), per lane.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
fast=""
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
# The whole suite runs as three lanes side by side (tests/conftest.py LANES: the tests on the real node, the other
# operator tests, the rest; PLACED moves a few modules to even them out), each a pytest process with its own session
# cluster and its own port range, its lines prefixed with the lane's name: most of the suite's time is waiting on
# clusters, pods and the operator's loops, not computing. Any argument that does not start with '-' (a path, a test
# id, or an option's value such as -k's), --fast, or MODALSCALE_TEST_LANES=0 runs one pytest process instead.
lanes=1
for arg in "$@"; do
  case "$arg" in -*) ;; *) lanes="" ;; esac
done
if [ -n "$fast" ] || [ "${MODALSCALE_TEST_LANES:-1}" = "0" ]; then lanes=""; fi
logdir=$(mktemp -d "${TMPDIR:-/tmp}/modalscale-lanes.XXXXXX")
if [ -n "$fast" ]; then
  ensure_python_env
else
  ensure_venv
  # The container images (modalscale images build: a cache hit in seconds, ~10 minutes cold) are built in the
  # background beside the Go builds, and the realnode lane waits for them before its pytest starts: built inside
  # the first real-node test, they counted against that test's timeout (900 s), which a cold build overran.
  # Lanes only, as root with buildah (what the real node needs); elsewhere the real-node tests skip and say why.
  if [ -n "$lanes" ] && [ "$(id -u)" = 0 ] && command -v buildah >/dev/null; then
    (
      modalscale images build >"$logdir/images.log" 2>&1 &
      build=$!
      trap 'kill -TERM $build 2>/dev/null' TERM
      rc=0
      wait $build || rc=$?
      echo $rc >"$logdir/images.rc"
    ) &
    echo $! >"$logdir/images.pid"
  fi
  modalscale cluster build >/dev/null
fi
# Lint and type checks first (rules and packages in pyproject.toml: [tool.ruff], [tool.mypy]). mypy keeps its cache
# beside the other caches, not in the clone: it checks each file's hash, so a fresh clone of unchanged code is
# checked in ~2 s instead of ~45 s.
ruff check .
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${MODALSCALE_CACHE_DIR:-$HOME/.cache/modalscale}/mypy}" mypy
# Stopped (SIGTERM, e.g. CI's time limit, or Ctrl-C): each pytest process gets SIGTERM, which tests/_signals.py
# turns into an interrupt that tears its session cluster down, and this script waits for that before it exits.
stop_pytest() {
  trap - INT TERM
  echo "stopped: terminating pytest (its fixtures tear the clusters down)" >&2
  for f in "$logdir"/*.pid; do [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
  wait
  rm -rf "$logdir"
  exit 143
}
trap stop_pytest INT TERM
# pytest in the background with its pid recorded, so that the trap can reach it (a foreground child would not see
# the signal, and bash runs a trap only once its foreground child has exited).
run_pytest() {  # NAME ARGS...: run pytest, record its pid under NAME, return its exit status
  local name=$1
  shift
  if [ "$name" = realnode ] && [ -e "$logdir/images.pid" ]; then
    # Only a cold build (base, wheels or dependency layers to make: up to ~10 min) is waited for here. A warm one
    # builds only the code layers (~2 min): the lane starts its cluster meanwhile, and its first test's
    # build_images waits for the build lock, well inside the test's time limit.
    if python -c 'import sys; from modalscale.devenv.images import dependencies_cached as c; sys.exit(0 if c() else 1)' \
      2>/dev/null; then
      echo "images: dependency layers cached: the tests start while the background build makes the code layers"
    else
      wait_for_images
    fi
  fi
  python -m pytest "$@" &
  echo $! >"$logdir/$name.pid"
  wait $!
}
wait_for_images() {  # the background image build's log, once it has ended (its outcome: the tests using images say)
  while [ ! -e "$logdir/images.rc" ] && kill -0 "$(cat "$logdir/images.pid")" 2>/dev/null; do sleep 2; done
  sed 's/^/images: /' "$logdir/images.log"
  echo "images: modalscale images build exited $(cat "$logdir/images.rc" 2>/dev/null || echo '(no status)')"
}
set +e
if [ -n "$fast" ]; then
  run_pytest fast tests/unit "$@"
  rc=$?
elif [ -z "$lanes" ]; then
  run_pytest all "$@"
  rc=$?
else
  declare -A ranges=([realnode]=20000-23999 [operator]=24000-26999 [rest]=27000-29999)
  pids=()
  for lane in realnode operator rest; do
    (
      MODALSCALE_TEST_LANE=$lane MODALSCALE_PORT_RANGE=${ranges[$lane]} run_pytest "$lane" "$@" 2>&1
      echo $? >"$logdir/$lane.rc"
    ) | sed -u "s/^/[$lane] /" | tee "$logdir/$lane.log" &
    pids+=($!)
  done
  wait "${pids[@]}"
  rc=0
  # Each lane's outcome again at the very end, where a reader of only the output's tail (CI's) sees it: its
  # failed and erroring tests and its summary line, however the lanes' lines interleaved above.
  echo "=== outcome per lane ==="
  if [ -e "$logdir/images.pid" ]; then
    tail -n 3 "$logdir/images.log" | sed 's/^/images: /'
    echo "images: modalscale images build exited $(cat "$logdir/images.rc" 2>/dev/null || echo '(no status)')"
  fi
  for lane in realnode operator rest; do
    sed -n '/slowest 15 modules/,/ in all [0-9]* modules$/p' "$logdir/$lane.log"
    grep -E '^\[[a-z]+\] (FAILED|ERROR) |^\[[a-z]+\] =+ .*(passed|failed|error|no tests ran).* =+$' \
      "$logdir/$lane.log" | cut -c1-400 || echo "[$lane] (no summary line: pytest did not finish)"
  done
  for lane in realnode operator rest; do
    lane_rc=$(cat "$logdir/$lane.rc" 2>/dev/null || echo 1)
    echo "lane $lane: pytest exit $lane_rc"
    [ "$lane_rc" = 0 ] || rc=1
  done
fi
trap - INT TERM
rm -rf "$logdir"
set -e
# pytest exits 5 when nothing was collected: that is a failure here, never a silent pass.
exit $rc
