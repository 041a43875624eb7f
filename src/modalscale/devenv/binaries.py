"""Build and cache the local control-plane binaries from the Go module proxy.

kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (and, for the real node, kubelet and
kube-proxy) are built from ``k8s.io/kubernetes`` through
a wrapper module that pins every staging module (``k8s.io/api``, ``k8s.io/apiserver``, ...) to the matching
``v0.MINOR.PATCH`` tag with ``replace`` directives, read from that version's own ``go.mod``: ``go install
k8s.io/kubernetes/cmd/...@vX`` is refused because of its replace directives (the same pattern as
kubernetes-sigs/scheduler-plugins). etcd's server module has replace directives too (etcd-io/etcd#18501), so it
is also built as a dependency of a wrapper module. KWOK and helm install with plain ``go install pkg@version``.

Binaries are cached per version under ``$MODALSCALE_CACHE_DIR`` (default ``~/.cache/modalscale``), outside the
repository; a fresh machine pays one cold build (minutes), later calls return at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
"""Pinned Kubernetes release (apiserver, controller-manager, scheduler, kubectl)."""
ETCD_VERSION = "v3.6.16"
"""Pinned etcd server release."""
KWOK_VERSION = "v0.7.0"
"""Pinned KWOK release (fake kubelets); v0.7 falls back to its built-in default stages."""
HELM_VERSION = "v3.19.5"
"""Pinned helm release."""
HELM_BUILD = "ldflags1"
"""Cache key of how helm is built, part of its cache folder ``bin/helm-<version>-<build>``: change it whenever
:func:`helm_ldflags` changes, so a helm cached by an older recipe is rebuilt (``helm-v3.19.5`` without the
version ldflags reported Kubernetes v1.20.0 to ``helm template``)."""
PROMETHEUS_VERSION = "v0.314.0"
"""Pinned Prometheus 3.14.0 (Go module versions are v0.3MM.P): built only for pod discovery through
``kubernetes_sd_configs``, which Debian's prometheus package leaves out (its client-go is not packaged). Its
client-go (v0.35.3) matches the control plane's minor. Debian's 2.42 keeps serving the static-target mode."""
PROMETHEUS_BUILD_TAGS = "remove_all_sd,enable_kubernetes_sd"
"""Prometheus's own build tags: no service discovery but Kubernetes (no cloud SDKs to download and compile)."""

K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
"""Control-plane commands of ``k8s.io/kubernetes``, cached together in ``bin/kubernetes-<version>``."""
NODE_COMMANDS = ("kubelet", "kube-proxy")
"""Commands of the real node (modalscale.devenv.realnode), built from the same wrapper module into
``bin/kubernetes-node-<version>``: a KWOK-only machine never pays for them, and adding them does not rebuild a
cached control plane."""

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A Go build or download failed; the message holds the command and the tail of its output."""


def cache_dir() -> Path:
    """Root of modalscale's caches: ``$MODALSCALE_CACHE_DIR`` or ``~/.cache/modalscale``."""
    env = os.environ.get("MODALSCALE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "modalscale"


@dataclass(frozen=True)
class NodeBinaries:
    """Absolute paths of the real node's binaries."""

    kubelet: Path
    kube_proxy: Path


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the control-plane binaries (KWOK, needed only for fake nodes, is :func:`ensure_kwok`)."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-mod=mod")
    return env


def _run(cmd: list[str], cwd: Path, log: Log, env: dict[str, str] | None = None) -> str:
    """Run one build command; the command and its output tail are in the BuildError when it fails (a person
    following a set-up sees ``Building ...``, the heartbeat and ``Built ... in N s``, not raw ``go`` lines)."""
    proc = subprocess.run(cmd, cwd=cwd, env=env or _go_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"command failed with exit code {proc.returncode}: {' '.join(cmd)}\n{tail}")
    return proc.stdout


PREBUILD_LOG = "prebuild.log"
"""Log of :mod:`modalscale.devenv.prebuild` under :func:`cache_dir` (written by ``scripts/demo.sh``)."""

HEARTBEAT_S = 60.0
"""How often a long build says it is still running (a cold Kubernetes build takes 8-13 min on 2 cores)."""


@contextlib.contextmanager
def heartbeat(what: str, log: Log, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Log ``... still <what> (N min so far)`` every ``every_s`` seconds while the block runs, so that a person
    watching a cold set-up sees progress instead of minutes of silence (the commands themselves are logged only
    in a failure's message)."""
    stop = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not stop.wait(every_s):
            log(f"... still {what} ({(time.monotonic() - started) / 60:.0f} min so far)")

    thread = threading.Thread(target=tick, name="build-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1.0)


@contextlib.contextmanager
def build_lock(root: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Serialise builds under ``root`` between processes (two test sessions, the demo and the tests, or the demo
    and its own background Go build, :mod:`modalscale.devenv.prebuild`): an exclusive ``flock`` on
    ``root/.build.lock``, released when the block ends or the process dies.

    Args:
        waiting: Called once, before blocking, when another process holds the lock (so that a person following
            a set-up learns why nothing happens).
    """
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _require_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the `go` command is not on PATH: install Go >= 1.24 to build the control plane")
    return go


def kubernetes_wrapper_gomod(version: str, upstream_gomod: str) -> str:
    """Return the text of a wrapper ``go.mod`` that builds ``k8s.io/kubernetes`` at ``version``.

    Args:
        version: A release tag such as ``v1.35.4``.
        upstream_gomod: The text of ``k8s.io/kubernetes``'s own ``go.mod`` at that tag; its
            ``k8s.io/x => ./staging/...`` lines name the staging modules to pin.
    Returns:
        The ``go.mod`` text; every staging module is replaced by its published ``v0.MINOR.PATCH`` tag.
    Raises:
        ValueError: ``version`` is not ``v1.MINOR.PATCH`` or the upstream file names no staging module.
    """
    m = re.fullmatch(r"v1\.(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"kubernetes version must look like v1.35.4, got {version!r}")
    staging_tag = f"v0.{m.group(1)}.{m.group(2)}"
    go_line = re.search(r"^go (\S+)", upstream_gomod, re.M)
    godebug = re.search(r"^godebug .*$", upstream_gomod, re.M)
    staged = re.findall(r"^\s*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/", upstream_gomod, re.M)
    if not staged:
        raise ValueError("the upstream go.mod names no staging module (k8s.io/x => ./staging/...)")
    lines = ["module local.test/k8s-bin", "", f"go {go_line.group(1) if go_line else '1.24'}", ""]
    if godebug:
        lines += [godebug.group(0), ""]
    lines += [f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{mod} => {mod} {staging_tag}" for mod in staged]
    lines += [")", ""]
    return "\n".join(lines)


def kubernetes_tools_go() -> str:
    """The ``tools.go`` of the wrapper module: it imports every command of :data:`K8S_COMMANDS` and
    :data:`NODE_COMMANDS`, so ``go mod tidy`` gives one ``go.sum`` for both builds that share the directory."""
    return ("//go:build tools\n\npackage tools\n\nimport (\n"
            + "".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"\n' for c in K8S_COMMANDS + NODE_COMMANDS)
            + ")\n")


ETCD_WRAPPER_GOMOD = """module local.test/etcd-bin

go 1.25.0

require go.etcd.io/etcd/server/v3 {version}
"""


def _build_kubernetes(version: str, out: Path, log: Log, commands: tuple[str, ...] = K8S_COMMANDS) -> None:
    go = _require_go()
    work = cache_dir() / "build" / f"k8s-{version}"
    work.mkdir(parents=True, exist_ok=True)
    info = json.loads(_run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], work, log))
    gomod = kubernetes_wrapper_gomod(version, Path(info["GoMod"]).read_text())
    (work / "go.mod").write_text(gomod)
    (work / "tools.go").write_text(kubernetes_tools_go())
    _run([go, "mod", "tidy"], work, log)
    minor = version.split(".")[1]
    ldflags = ["-s", "-w"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={stamp}",
        ]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        [go, "build", "-trimpath", "-ldflags", " ".join(ldflags), "-o", str(tmp) + "/"]
        + [f"k8s.io/kubernetes/cmd/{c}" for c in commands],
        work,
        log,
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def prometheus_wrapper_gomod(version: str, upstream_gomod: str) -> str:
    """Return the text of a wrapper ``go.mod`` that builds ``github.com/prometheus/prometheus`` at ``version``.

    ``go install ...@version`` refuses a module with ``replace`` directives, so the wrapper requires it and
    copies its replaces (single-line and block form) verbatim.

    Raises:
        ValueError: ``version`` is not a ``v0.MINOR.PATCH`` module version.
    """
    if not re.fullmatch(r"v0\.\d+\.\d+", version):
        raise ValueError(f"prometheus module version must look like v0.314.0, got {version!r}")
    go_line = re.search(r"^go (\S+)", upstream_gomod, re.M)
    replaces = re.findall(r"^replace (\S+ .*=>.*)$", upstream_gomod, re.M)
    for block in re.findall(r"^replace \(\n(.*?)^\)", upstream_gomod, re.M | re.S):
        replaces += [line.strip() for line in block.splitlines() if "=>" in line]
    lines = ["module local.test/prometheus-bin", "", f"go {go_line.group(1) if go_line else '1.25.0'}", "",
             f"require github.com/prometheus/prometheus {version}", ""]
    lines += [f"replace {r}" for r in replaces]
    return "\n".join(lines) + "\n"


def _build_prometheus(version: str, out: Path, log: Log) -> None:
    go = _require_go()
    work = cache_dir() / "build" / f"prometheus-{version}"
    work.mkdir(parents=True, exist_ok=True)
    info = json.loads(_run([go, "mod", "download", "-json", f"github.com/prometheus/prometheus@{version}"], work, log))
    (work / "go.mod").write_text(prometheus_wrapper_gomod(version, Path(info["GoMod"]).read_text()))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # No `go mod tidy`: it would resolve every build tag (all the cloud SDKs); -mod=mod adds what the tagged
    # build needs.
    pkg = "github.com/prometheus/common/version"
    _run([go, "build", "-mod=mod", "-trimpath", "-tags", PROMETHEUS_BUILD_TAGS,
          "-ldflags", f"-s -w -X {pkg}.Version=3.{version.split('.')[1][1:]}.{version.split('.')[2]}",
          "-o", str(tmp / "prometheus"), "github.com/prometheus/prometheus/cmd/prometheus"], work, log)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _build_etcd(version: str, out: Path, log: Log) -> None:
    go = _require_go()
    work = cache_dir() / "build" / f"etcd-{version}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(ETCD_WRAPPER_GOMOD.format(version=version))
    (work / "tools.go").write_text('//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n')
    _run([go, "mod", "tidy"], work, log)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp / "etcd"), "go.etcd.io/etcd/server/v3"],
         work, log)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _go_install(package: str, version: str, out: Path, log: Log) -> None:
    go = _require_go()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = _go_env()
    env["GOBIN"] = str(tmp)
    env.pop("GOFLAGS", None)
    _run([go, "install", f"{package}@{version}"], tmp, log, env=env)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _ensure(name: str, version: str, files: tuple[str, ...], build: Callable[[Path], None], log: Log) -> Path:
    out = cache_dir() / "bin" / f"{name}-{version}"
    if all((out / f).is_file() for f in files):
        return out
    waited = time.monotonic()

    def waiting() -> None:
        log(f"Waiting for another process's build to finish before {name} {version} (the demo builds the Go "
            f"binaries in the background while .venv installs: {cache_dir() / PREBUILD_LOG})")

    with build_lock(cache_dir(), waiting):
        if all((out / f).is_file() for f in files):
            if time.monotonic() - waited > 1.0:
                log(f"{name} {version} built by the other process ({time.monotonic() - waited:.0f} s waited)")
            return out
        log(f"Building {name} {version} from the Go module proxy (one cold build; cached in {out})")
        started = time.monotonic()
        with heartbeat(f"building {name} {version}", log):
            build(out)
        log(f"Built {name} {version} in {time.monotonic() - started:.0f} s")
    return out


def ensure_binaries(log: Log = print) -> Binaries:
    """Return the control-plane binaries, building any that are not cached yet.

    Raises:
        BuildError: ``go`` is missing or a build failed (the message holds the command and its output).
    """
    k8s = _ensure("kubernetes", KUBERNETES_VERSION, K8S_COMMANDS,
                  lambda out: _build_kubernetes(KUBERNETES_VERSION, out, log), log)
    etcd = _ensure("etcd", ETCD_VERSION, ("etcd",), lambda out: _build_etcd(ETCD_VERSION, out, log), log)
    return Binaries(
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kubectl=k8s / "kubectl",
        etcd=etcd / "etcd",
    )


def ensure_kwok(log: Log = print) -> Path:
    """Return the pinned ``kwok`` controller, building it if not cached (about 2 minutes cold on 2 cores).

    Only a cluster with fake nodes runs it (:meth:`modalscale.devenv.cluster.LocalCluster.ensure_gpu_nodes`): the
    demo on a real node never builds it.

    Raises:
        BuildError: ``go`` is missing or the build failed.
    """
    out = _ensure("kwok", KWOK_VERSION, ("kwok",),
                  lambda o: _go_install("sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION, o, log), log)
    return out / "kwok"


def ensure_node_binaries(log: Log = print) -> NodeBinaries:
    """Return kubelet and kube-proxy (same pinned :data:`KUBERNETES_VERSION`), building them if not cached.

    The first build takes about 6 minutes on 2 cores with a warm Go cache (the control plane's).

    Raises:
        BuildError: ``go`` is missing or the build failed.
    """
    out = _ensure("kubernetes-node", KUBERNETES_VERSION, NODE_COMMANDS,
                  lambda o: _build_kubernetes(KUBERNETES_VERSION, o, log, NODE_COMMANDS), log)
    return NodeBinaries(kubelet=out / "kubelet", kube_proxy=out / "kube-proxy")


def ensure_prometheus(log: Log = print) -> Path:
    """Return the pinned Prometheus with Kubernetes service discovery, building it if not cached (minutes).

    Raises:
        BuildError: ``go`` is missing or the build failed.
    """
    out = _ensure("prometheus", PROMETHEUS_VERSION, ("prometheus",),
                  lambda o: _build_prometheus(PROMETHEUS_VERSION, o, log), log)
    return out / "prometheus"


def helm_ldflags(version: str, helm_gomod: str) -> str:
    """The ``-ldflags`` helm's own Makefile gives its release builds, for ``helm.sh/helm/v3`` at ``version``.

    Without them ``helm version`` prints ``v3.19`` with an empty ``GitCommit``, and ``helm template`` (no cluster)
    assumes Kubernetes v1.20.0, below the chart's ``kubeVersion: >=1.28.0-0``. As helm's Makefile does
    (``K8S_MODULES_VER`` from ``go list -m k8s.io/client-go``): the default Kubernetes version is
    ``1.<minor of helm's k8s.io/client-go v0.<minor>.x>``, set in ``pkg/chartutil`` and ``pkg/lint/rules``.
    ``gitCommit`` stays empty: the Go module proxy's zip of a release carries no commit; ``gitTreeState`` is
    ``clean`` (the zip is the release's tree).

    Args:
        version: helm's release tag, e.g. ``v3.19.5``.
        helm_gomod: The text of helm's own ``go.mod`` at that tag.
    Returns:
        The ``-ldflags`` value (one string).
    Raises:
        ValueError: ``version`` is not ``v3.MINOR.PATCH``, or the go.mod requires no ``k8s.io/client-go v0.N.x``.
    """
    if not re.fullmatch(r"v3\.\d+\.\d+", version):
        raise ValueError(f"helm version must look like v3.19.5, got {version!r}")
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/client-go\s+v0\.(\d+)\.\d+", helm_gomod, re.MULTILINE)
    if m is None:
        raise ValueError("helm's go.mod requires no k8s.io/client-go v0.MINOR.PATCH; cannot set its default "
                         "Kubernetes version")
    flags = ["-s", "-w",
             f"-X helm.sh/helm/v3/internal/version.version={version}",
             "-X helm.sh/helm/v3/internal/version.gitTreeState=clean"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={m.group(1)}"]
    return " ".join(flags)


def _build_helm(version: str, out: Path, log: Log) -> None:
    go = _require_go()
    work = cache_dir() / "build" / f"helm-{version}"
    work.mkdir(parents=True, exist_ok=True)
    info = json.loads(_run([go, "mod", "download", "-json", f"helm.sh/helm/v3@{version}"], work, log))
    ldflags = helm_ldflags(version, Path(info["GoMod"]).read_text())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = _go_env()
    env["GOBIN"] = str(tmp)
    env.pop("GOFLAGS", None)
    _run([go, "install", "-trimpath", "-ldflags", ldflags, f"helm.sh/helm/v3/cmd/helm@{version}"], tmp, log, env=env)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def ensure_helm(log: Log = print) -> Path:
    """Return the path of the pinned ``helm`` binary, building it with helm's release ldflags if needed.

    Cached in ``bin/helm-<HELM_VERSION>-<HELM_BUILD>``. ``helm version`` then prints the pinned version and
    ``helm template`` without a cluster assumes the Kubernetes minor helm was built against (see
    :func:`helm_ldflags`).

    Raises:
        BuildError: ``go`` is missing or the build failed.
    """
    out = _ensure("helm", f"{HELM_VERSION}-{HELM_BUILD}", ("helm",),
                  lambda o: _build_helm(HELM_VERSION, o, log), log)
    return out / "helm"


def tool_dirs() -> list[Path]:
    """The cached folders that hold the commands README's examples run by name: ``kubectl`` (the control plane's)
    and ``helm``, in that order; they may not exist before the first build. ``scripts/env.sh`` and ``modalscale
    cluster env`` put them on ``PATH``."""
    root = cache_dir() / "bin"
    return [root / f"kubernetes-{KUBERNETES_VERSION}", root / f"helm-{HELM_VERSION}-{HELM_BUILD}"]
