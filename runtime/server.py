"""Run the real NVIDIA ``tritonserver`` shipped in the ``nvidia-pytriton`` wheel with our model repository.

What the Python backend needs here (found by trying, documented in ``docs/runtime-internals.md``):

* a backend directory holding ``libtriton_python.so``, ``triton_python_backend_utils.py`` and the
  ``triton_python_backend_stub`` built for the running Python (``python_backend_stubs/3.11/`` of the wheel);
  :func:`prepare_backend_directory` copies them once into ``~/.cache/modalscale/triton/<key>/backends/python``;
* ``LD_LIBRARY_PATH`` containing ``nvidia_pytriton.libs`` (the copied backend loses its ``$ORIGIN`` RPATH);
* the stub runs the model with the system ``libpython3.11`` (not the venv), so ``PYTHONPATH`` must list the
  directory that holds the ``modalscale`` package and the venv's ``site-packages`` (torch, PIL,
  transformers); the stub inherits tritonserver's environment. ``HF_HUB_OFFLINE=1`` keeps transformers
  from reaching for the hub.

Process hygiene: ``tritonserver`` runs in its own session (a terminal's Ctrl-C reaches only the launcher, which
drains first), so it is also started with ``PR_SET_PDEATHSIG`` = SIGKILL: it dies when the thread that
started it dies, whether the launcher exits, is SIGKILLed or its process group is killed. What it leaves then
(its Python-backend stubs, the backend's ``/dev/shm`` region, the launcher's temporary files) is removed by a
small reaper process (:mod:`modalscale.runtime.reaper`) started right after the server. Temporary files (the
generated repository of ``runtime serve``, the server log) are named ``<prefix><launcher pid>-*`` and removed on a
normal stop; what a launcher killed before its reaper started (a few milliseconds) left behind is removed by the
next :meth:`TritonProcess.start` (:func:`remove_stale_temp_files`).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from modalscale.runtime.drain import DrainResult, drain_url
from modalscale.runtime.reaper import shared_memory_files
from modalscale.runtime.repo_config import RuntimeConfig, build_repository, server_arguments

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "modalscale" / "triton"
"""Where the prepared backend directory lives (one sub-directory per wheel + Python version)."""

SUMMARY_LATENCIES_ARG = "--metrics-config=summary_latencies=true"
"""Enables Triton's latency summaries (``nv_inference_request_summary_us{model,version,quantile}``, quantiles 0.5,
0.9, 0.95, 0.99 and 0.999 over a sliding window, seen on Triton 2.51); the operator's pods pass the same argument.
Triton exports no request summary for a model with its response cache enabled."""


TEMP_REPOSITORY_PREFIX = "modalscale-repo-"
"""Prefix of the temporary model repository ``runtime serve`` generates, followed by ``<launcher pid>-``."""
TEMP_LOG_PREFIX = "tritonserver-"
"""Prefix of the temporary server log of :class:`TritonProcess`, followed by ``<launcher pid>-``."""

_PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): signal delivered to this process when its parent thread dies."""


class TritonNotFound(RuntimeError):
    """The ``nvidia-pytriton`` wheel (and so ``tritonserver``) is not installed: install ``modalscale[runtime]``."""


class TritonStartError(RuntimeError):
    """``tritonserver`` exited or did not become ready before the deadline; the message ends with its log tail."""


@dataclass(frozen=True)
class TritonDistribution:
    """Paths inside the installed ``nvidia-pytriton`` wheel."""

    root: Path
    """``.../site-packages/pytriton/tritonserver``."""
    libs: Path
    """``.../site-packages/nvidia_pytriton.libs`` (bundled shared libraries)."""

    @property
    def binary(self) -> Path:
        """The ``tritonserver`` executable."""
        return self.root / "bin" / "tritonserver"

    @property
    def caches(self) -> Path:
        """Directory of cache plug-ins (``local/libtritoncache_local.so``)."""
        return self.root / "caches"

    def stub(self, python_version: str) -> Path:
        """The Python-backend stub built for ``python_version`` (``"3.11"``)."""
        return self.root / "python_backend_stubs" / python_version / "triton_python_backend_stub"


def find_distribution() -> TritonDistribution:
    """Locate ``tritonserver`` inside the installed ``nvidia-pytriton`` wheel.

    Raises:
        TritonNotFound: The wheel is not installed.
    """
    try:
        import pytriton  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonNotFound("nvidia-pytriton is not installed; pip install 'modalscale[runtime]'") from exc
    package = Path(pytriton.__file__).resolve().parent
    dist = TritonDistribution(root=package / "tritonserver", libs=package.parent / "nvidia_pytriton.libs")
    if not dist.binary.is_file():
        raise TritonNotFound(f"{dist.binary} is missing; reinstall nvidia-pytriton")
    return dist


def prepare_backend_directory(dist: TritonDistribution, cache_dir: Path = DEFAULT_CACHE_DIR,
                              python_version: str | None = None) -> Path:
    """Create (once, idempotently) a ``--backend-directory`` whose Python backend has the right stub.

    Args:
        dist: The installed wheel.
        cache_dir: Parent directory; a sub-directory keyed by the wheel's binary and the Python version is used.
        python_version: ``"3.11"``-style; default: the running interpreter's.
    Returns:
        The directory to pass as ``--backend-directory`` (it contains ``python/``).
    Raises:
        TritonNotFound: The wheel has no stub for ``python_version``.
    """
    version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist.stub(version)
    if not stub.is_file():
        raise TritonNotFound(f"nvidia-pytriton ships no Python-backend stub for Python {version} ({stub})")
    source = dist.root / "backends" / "python"
    digest = hashlib.sha256()
    for path in (stub, source / "libtriton_python.so", source / "triton_python_backend_utils.py"):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    target = cache_dir / f"py{version}-{digest.hexdigest()[:12]}" / "backends"
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache_dir))
    python_dir = staging / "backends" / "python"
    python_dir.mkdir(parents=True)
    shutil.copy2(source / "libtriton_python.so", python_dir)
    shutil.copy2(source / "triton_python_backend_utils.py", python_dir)
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        (staging / "backends").rename(target)  # atomic; a concurrent preparer may win the race
    except OSError:
        if not (target / "python" / "triton_python_backend_stub").is_file():
            raise
    shutil.rmtree(staging, ignore_errors=True)
    return target


def stub_python_home(stub: Path) -> str | None:
    """The prefix of the ``libpython`` the Python-backend stub is linked against (``/usr`` for Debian's).

    The stub embeds that library in an isolated configuration (environment variables such as ``PYTHONHOME``
    are ignored) and derives its prefix from the first ``python3`` on ``PATH``. When that is a virtualenv of
    another CPython build (e.g. ``.venv/bin`` of a pyenv Python, which ``scripts/test.sh`` puts first on
    ``PATH``), it loads that build's stdlib and extension modules, which fail against the embedded library
    (``_ssl``: undefined symbol ``_PyModule_Add``). So ``<prefix>/bin`` goes first on the server's ``PATH``.

    Returns:
        The prefix holding ``lib/python3.X/os.py`` for the linked library, or None when ``ldd`` cannot tell.
    """
    try:
        out = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, check=False, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"libpython(3\.\d+)\S* => (\S+)", out)
    if not match:
        return None
    version, library = match.group(1), Path(match.group(2)).resolve()
    for parent in library.parents:
        if (parent / "lib" / f"python{version}" / "os.py").is_file():
            return str(parent)
    return None


def stub_environment(dist: TritonDistribution, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for ``tritonserver`` so that its Python-backend stub imports modalscale and torch.

    Args:
        dist: The installed wheel.
        base: Starting environment; default ``os.environ``.
    Returns:
        A copy of ``base`` with ``LD_LIBRARY_PATH`` (bundled libs), ``PYTHONPATH`` (the directory holding
        ``modalscale`` and this interpreter's ``purelib``/``platlib``) and ``HF_HUB_OFFLINE=1`` set.
    """
    import modalscale

    env = dict(os.environ if base is None else base)
    modalscale_parent = str(Path(modalscale.__file__).resolve().parent.parent)
    paths = [modalscale_parent, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    libs = [str(dist.libs)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(libs))
    home = stub_python_home(dist.stub(f"{sys.version_info.major}.{sys.version_info.minor}"))
    if home:  # the stub's own python3 first, whatever virtualenv is active
        env["PATH"] = os.pathsep.join(dict.fromkeys([str(Path(home) / "bin")] + env.get("PATH", "").split(os.pathsep)))
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def write_repository(files: Mapping[str, str | bytes], directory: Path) -> Path:
    """Write ``build_repository`` output below ``directory`` (created); returns ``directory``."""
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return directory


RECENT_PORTS_KEPT = 512
"""How many ports :func:`free_port` remembers having handed out in this process (and never hands out again)."""
_recent_ports: collections.deque[int] = collections.deque(maxlen=RECENT_PORTS_KEPT)
_ports_lock = threading.Lock()


PORT_RANGE_ENV = "MODALSCALE_PORT_RANGE"
"""``<low>-<high>`` (inclusive): :func:`free_port` hands out ports only from this range. scripts/test.sh gives each
of the suite's lanes (pytest processes side by side) its own range below the kernel's ephemeral range, so two
processes never pick the same port between one's release and its server's bind."""


def port_range(value: str) -> tuple[int, int] | None:
    """Parse :data:`PORT_RANGE_ENV`'s value: ``(low, high)``, or None when empty.

    Raises:
        ValueError: Not ``<low>-<high>`` with 1024 <= low <= high <= 65535 (the message names the variable).
    """
    if not value.strip():
        return None
    low_s, sep, high_s = value.strip().partition("-")
    try:
        low, high = int(low_s), int(high_s)
    except ValueError:
        low, high = 0, -1
    if not sep or not 1024 <= low <= high <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={value!r}: expected '<low>-<high>' with 1024 <= low <= high <= 65535, "
                         "e.g. 20000-24999; or leave it unset")
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host``, bound then released, and never one this process was handed in its last
    :data:`RECENT_PORTS_KEPT` calls; from :data:`PORT_RANGE_ENV`'s range when that is set, else the kernel's pick.

    Why the memory: a port is released before its user binds it, and the kernel may hand the same ephemeral port
    to the next ``bind(0)``. Two ports picked one after the other for one server (etcd's peer port and the
    apiserver's, seen in a test run: both 46287, and the apiserver never started) then collide. Every local server
    this project starts (control plane, real node, operator, Prometheus, tritonserver) takes its ports here.

    Raises:
        OSError: No port could be bound, or only recently handed-out ones after 100 tries.
        ValueError: :data:`PORT_RANGE_ENV` is malformed.
    """
    bounds = port_range(os.environ.get(PORT_RANGE_ENV, ""))
    rng = random.SystemRandom()
    with _ports_lock:
        for _ in range(100):
            wanted = rng.randint(*bounds) if bounds else 0
            if wanted in _recent_ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, wanted))
                except OSError:
                    if bounds:
                        continue
                    raise
                port = int(sock.getsockname()[1])
            if port not in _recent_ports:
                _recent_ports.append(port)
                return port
    where = f" in {PORT_RANGE_ENV}'s range {bounds[0]}-{bounds[1]}" if bounds else ""
    raise OSError(f"no free TCP port on {host}{where} that this process had not just handed out (100 tries)")


def temp_name_prefix(prefix: str, pid: int | None = None) -> str:
    """``<prefix><pid>-``: the start of a temporary file name owned by process ``pid`` (default: this one)."""
    return f"{prefix}{os.getpid() if pid is None else pid}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temp_files(directory: Path | None = None) -> list[Path]:
    """Remove temporary repositories and server logs whose owning launcher no longer runs.

    A launcher killed with SIGKILL cannot clean up; its ``modalscale-repo-<pid>-*`` directories and
    ``tritonserver-<pid>-*.log`` files stay in the temp folder. This removes those of this user whose ``<pid>``
    is not a running process (a reused pid keeps its files until that process ends too).

    Args:
        directory: The temp folder; default :func:`tempfile.gettempdir`.
    Returns:
        The paths removed.
    """
    folder = Path(directory or tempfile.gettempdir())
    pattern = re.compile(rf"^(?:{re.escape(TEMP_REPOSITORY_PREFIX)}|{re.escape(TEMP_LOG_PREFIX)})(\d+)-")
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = pattern.match(path.name)
        if not match or int(match.group(1)) == os.getpid() or _pid_alive(int(match.group(1))):
            continue
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def _die_with_parent_hook() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive SIGKILL when the thread that forks it dies.

    ``prctl`` is resolved here, in the parent, so the child only calls a function pointer between ``fork`` and
    ``exec``. If the parent died before ``prctl`` took effect, the child kills itself.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


@dataclass
class TritonProcess:
    """One ``tritonserver`` child process serving a model repository on loopback (or ``host``).

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``stop`` sends SIGTERM, on which Triton
    stops accepting new requests and finishes those in flight (up to ``--exit-timeout-secs``), then SIGKILL
    after ``stop_timeout_s``.
    """

    model_repository: Path
    """Directory with ``<model>/config.pbtxt`` and ``<model>/1/model.py``."""
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str = "127.0.0.1"
    """Address the three endpoints bind to."""
    extra_args: Sequence[str] = ()
    """Further ``tritonserver`` arguments (e.g. from :func:`server_arguments`)."""
    log_path: Path | None = None
    """Where stdout/stderr of the server go; default: a temporary file ``tritonserver-<pid>-*.log``, removed by
    :meth:`stop` (a given path is kept)."""
    inherit_output: bool = False
    """Let the server write to this process's stdout/stderr instead of a log file (``log_path`` is ignored and
    :meth:`log_tail` is empty)."""
    exit_timeout_s: int = 30
    """``--exit-timeout-secs``: how long Triton drains in-flight requests after SIGTERM."""
    stop_timeout_s: float = 45.0
    """How long :meth:`stop` waits after SIGTERM before SIGKILL."""
    temp_paths: Sequence[Path] = ()
    """Temporary files or directories of the caller (e.g. a generated repository) that the reaper removes if this
    process dies without stopping the server (the caller removes them after a normal :meth:`stop`)."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _reaper: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _shm: list[str] = field(default_factory=list, init=False, repr=False)
    _log_file: object | None = field(default=None, init=False, repr=False)
    _owns_log: bool = field(default=False, init=False, repr=False)

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint (tritonclient style, no scheme)."""
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """Full URL of the Prometheus endpoint."""
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, else None."""
        return self._proc.pid if self._proc else None

    def command(self, dist: TritonDistribution, backend_directory: Path) -> list[str]:
        """The full ``tritonserver`` command line.

        Like the operator's pods (``operator/isvc/objects.py``), every local server exports Triton's latency
        quantiles (``nv_inference_request_summary_us{quantile=...}``, ``--metrics-config=summary_latencies=true``),
        which the autoscaler reads as the observed p95, whatever the model repository.
        """
        return [
            str(dist.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_directory}",
            f"--cache-directory={dist.caches}",
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true", "--allow-cpu-metrics=true", "--allow-gpu-metrics=false",
            SUMMARY_LATENCIES_ARG,
            f"--exit-timeout-secs={self.exit_timeout_s}",
            "--disable-auto-complete-config",
            "--strict-readiness=true",
            *self.extra_args,
        ]

    def start(self, ready_timeout_s: float = 180.0) -> TritonProcess:
        """Start the server and wait until ``/v2/health/ready`` answers 200.

        The server is killed (SIGKILL) when the calling thread exits, so call this from a thread that lives as
        long as the server should (the main thread in ``runtime serve``, tests and benchmarks). Temporary files
        left by launchers that were killed are removed first (:func:`remove_stale_temp_files`).

        Raises:
            TritonStartError: The process exited or was not ready within ``ready_timeout_s`` seconds (it is
                then stopped); the message carries the log tail.
            TritonNotFound: The wheel is missing.
        """
        dist = find_distribution()
        backends = prepare_backend_directory(dist)
        remove_stale_temp_files()
        if self.inherit_output:
            output: dict[str, object] = {}
        else:
            if self.log_path is None:
                fd, name = tempfile.mkstemp(prefix=temp_name_prefix(TEMP_LOG_PREFIX), suffix=".log")
                os.close(fd)
                self.log_path, self._owns_log = Path(name), True
            self._log_file = open(self.log_path, "ab")  # closed in stop()
            output = {"stdout": self._log_file, "stderr": subprocess.STDOUT}
        # Own session: a terminal's SIGINT reaches only the launcher (which drains first); PDEATHSIG: the server
        # dies with the thread that started it (its stubs follow their parent).
        self._proc = subprocess.Popen(  # fixed binary, our arguments
            self.command(dist, backends), env=stub_environment(dist), start_new_session=True,
            preexec_fn=_die_with_parent_hook(), **output)  # type: ignore[call-overload]
        self._start_reaper()
        try:
            self.wait_ready(ready_timeout_s)
        except TritonStartError:
            self.stop()
            raise
        self._shm = shared_memory_files(self._proc.pid)
        return self

    def _kill_leftovers(self, pgid: int) -> None:
        """After the server exited: SIGKILL what is left of its process group and unlink its ``/dev/shm`` files.

        Triton leaves its Python-backend stubs running when it exits before they finish unloading (seen with
        ``--exit-timeout-secs=5`` on a loaded machine: orphaned stubs spinning at 100 % CPU, and their shared
        memory left in /dev/shm). The group id is the server's pid (its own session), which no other group can
        take while a member lives.
        """
        from modalscale.runtime.reaper import group_members

        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        for path in self._shm:
            Path(path).unlink(missing_ok=True)
        self._shm = []

    def _start_reaper(self) -> None:
        """Start :mod:`modalscale.runtime.reaper` for the server just started, in its own session."""
        assert self._proc is not None
        remove = [str(p) for p in self.temp_paths]
        if self._owns_log and self.log_path is not None:
            remove.append(str(self.log_path))
        self._reaper = subprocess.Popen(  # our module, our arguments
            [sys.executable, "-m", "modalscale.runtime.reaper", "--launcher", str(os.getpid()),
             "--server", str(self._proc.pid), "--remove", *remove],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout_s: float) -> None:
        """Poll ``/v2/health/ready`` until 200, the process exits, or ``timeout_s`` passes.

        Raises:
            TritonStartError: Exited or timed out.
        """
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.http_url}/v2/health/ready"
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self._proc is None or self._proc.poll() is not None:
                    code = None if self._proc is None else self._proc.returncode
                    raise TritonStartError(f"tritonserver exited with code {code}\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TritonStartError(f"tritonserver not ready after {timeout_s} s\n{self.log_tail()}")
                time.sleep(0.2)

    def drain(self, timeout_s: float | None = None, quiet_s: float = 1.0) -> DrainResult | None:
        """Wait until no request is in flight (see :mod:`modalscale.runtime.drain`), at most ``timeout_s``
        seconds (default ``exit_timeout_s``). Returns None when the server is not running."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return drain_url(self.metrics_url, self.exit_timeout_s if timeout_s is None else timeout_s, quiet_s)

    def stop(self, drain: bool = True) -> int | None:
        """Drain (unless ``drain`` is False), SIGTERM (Triton finishes queued requests and unloads), then SIGKILL
        of its process group after ``stop_timeout_s``.

        Returns:
            The exit code, or None if it was not running.
        """
        if drain:
            self.drain()
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                self._shm = sorted(set(self._shm) | set(shared_memory_files(proc.pid)))
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            code = proc.returncode
            self._kill_leftovers(proc.pid)
        reaper, self._reaper = self._reaper, None
        if reaper is not None:  # it exits within a poll interval of the server's exit
            try:
                reaper.wait(30)
            except subprocess.TimeoutExpired:
                reaper.kill()
                reaper.wait()
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        if self._owns_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._owns_log = None, False
        return code

    def terminate(self) -> None:
        """Send SIGTERM without waiting (safe inside a signal handler); Triton then drains and exits."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        """Block until the server exits; returns its exit code."""
        if self._proc is None:
            raise RuntimeError("tritonserver is not running")
        return self._proc.wait()

    def log_tail(self, max_chars: int = 6000) -> str:
        """The last ``max_chars`` characters of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-max_chars:]

    def __enter__(self) -> TritonProcess:
        return self.start() if self._proc is None else self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def serve_config(cfg: RuntimeConfig, repository_dir: Path, **kwargs: object) -> Iterator[TritonProcess]:
    """Write the repository of ``cfg`` into ``repository_dir`` and run a server on it for the ``with`` body.

    Args:
        cfg: The runtime config.
        repository_dir: Target directory (created; existing files of the same names are overwritten).
        **kwargs: Passed to :class:`TritonProcess` (ports, host, log_path ...).
    """
    write_repository(build_repository(cfg), repository_dir)
    extra = list(server_arguments(cfg)) + list(kwargs.pop("extra_args", ()))  # type: ignore[call-overload]
    server = TritonProcess(model_repository=repository_dir, extra_args=extra, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
