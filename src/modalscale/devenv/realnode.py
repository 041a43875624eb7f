"""A real kubelet node in the local cluster: containerd (CRI) + runc + a CNI bridge, kubelet and kube-proxy.

The settings come from a node that ran real pods on these machines (``restrict_oom_score_adj = true`` because
the machine lacks ``CAP_SYS_RESOURCE``; ``failCgroupV1: false`` and ``cgroupDriver: cgroupfs`` on a cgroup v1
host; images referred to by their full ``docker.io/...`` name because CRI normalizes names; an explicit ``--node-ip``
so that the apiserver reaches the kubelet for logs. That address is the machine's primary IPv4 address, not
127.0.0.1: kubelet v1.35 refuses a loopback node IP ("nodeIP can't be loopback address") and then publishes no
address at all).

Layout:

- state under the cluster's work dir, ``<workdir>/node/``: configs, containerd's state dir, CNI's IPAM data;
  PIDs in ``<workdir>/pids/{containerd,kubelet,kube-proxy}.pid``. What holds unix sockets lives on a short path
  named by a hash of the work dir, because a socket path has at most 107 bytes and work dirs (pytest's among
  them) can be longer: containerd's socket in ``/run/modalscale/<hash>/`` (:func:`containerd_address`) and the
  kubelet's root dir in ``/var/lib/modalscale/<hash>/kubelet`` (:func:`kubelet_root_dir`; on disk, not ``/run``,
  because pods' emptyDir volumes live there).
- containerd's *root* (content store, snapshots, image metadata) is machine-wide,
  ``<cache>/node/containerd-root`` (node ``i``'s ``containerd-root-<i>``: two containerds cannot share one):
  imported images survive ``cluster down``/``up`` (the cached-image case).
- one cluster with real nodes per machine: node 0's ``cni0`` bridge and ``KUBE-``/``CNI-`` iptables chains are
  global. The owner is recorded in ``/run/modalscale/real-node.json`` (under a ``flock``); a second cluster while
  the owner's node runs gets KWOK only, with a message naming the owner.
- several nodes (``cluster up --real-nodes N``): node ``i >= 1`` runs beside node 0 in network and mount
  namespaces of its own, with every path, socket, address, pod CIDR and cgroup root its own
  (:mod:`modalscale.devenv.nodelayout`); node 0 stops them before itself.

Nothing is pulled: images are imported into containerd's ``k8s.io`` namespace with :func:`import_image`;
the node's own pause and busybox images are built here from Debian's busybox-static with ``umoci``
(:func:`ensure_node_images`). Pods opt in to the node with :func:`real_node_placement` (the node is tainted so
that pods written for the KWOK nodes never land on it by chance).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from modalscale.api.capacity import CAPACITY_TYPE_LABEL, SPOT_LABEL_VALUE, SPOT_TAINT
from modalscale.devenv.binaries import Log, NodeBinaries, cache_dir, ensure_node_binaries
from modalscale.devenv.nodelayout import (
    CNI_BRIDGE,
    KUBELET_DEVICE_PLUGIN_DIR,
    KUBELET_STATE_DIR,
    LOCK_DIR,
    MAX_REAL_NODES,
    NodeLayout,
    check_real_node_count,
    node_layout,
    node_routes,
    workdir_digest,
)
from modalscale.devenv.nodelayout import (
    POD_CIDR as POD_CIDR,  # re-exported: node 0's pod CIDR
)
from modalscale.runtime.server import free_port

NODE_NAME = "real-node-0"
"""Name of the real node (kubelet ``--hostname-override``); node ``i`` of several is ``real-node-<i>``."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The GPU product label the cost model prices a node by (same key as the KWOK GPU nodes')."""
NODE_TYPE_LABEL = "modalscale.io/node-type"
"""Label key on the real node (value ``real``); the taint has the same key."""
NODE_TYPE_REAL = "real"
REAL_NODE_TAINT = {"key": NODE_TYPE_LABEL, "value": NODE_TYPE_REAL, "effect": "NoSchedule"}
"""Taint of the real node: only pods that tolerate it run there (pods written for KWOK never land on it)."""
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy")
"""Processes of the real node, in start order."""
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
K8S_NAMESPACE = "k8s.io"
"""containerd namespace that the CRI plugin (and so the kubelet) uses."""
PAUSE_IMAGE = "docker.io/modalscale/pause:1"
"""Sandbox image: a busybox-static rootfs whose entrypoint sleeps forever (built here, never pulled)."""
BUSYBOX_IMAGE = "docker.io/modalscale/busybox:1"
"""A busybox-static image with every applet (sh, httpd, wget ...), for tests and debugging."""
IMAGE_RECIPE_VERSION = "1"
"""Bumped when the pause/busybox build below changes (part of their cache key)."""
CHAIN_PREFIXES = ("KUBE-", "CNI-")
"""iptables chains created by kube-proxy, the kubelet and the CNI plugins; all removed at stop."""


class RealNodeError(RuntimeError):
    """The real node could not start, an image could not be imported, or the node is not running."""


# ---------------------------------------------------------------------------------------------- pure parts
def normalize_image_ref(ref: str) -> str:
    """The fully qualified name CRI looks an image up by (``busybox`` -> ``docker.io/library/busybox:latest``).

    Same rule as the docker reference library: a first path component without ``.`` or ``:`` (and not
    ``localhost``) is a Docker Hub path; one component gets ``library/``; no tag or digest gets ``:latest``.

    Raises:
        ValueError: ``ref`` is empty or has whitespace or upper-case repository characters.
    """
    if not ref or any(c.isspace() for c in ref):
        raise ValueError(f"image reference {ref!r} is empty or has whitespace")
    name, sep, digest = ref.partition("@")
    parts = name.split("/")
    if len(parts) == 1 or not ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if len(parts) == 1:
            parts = ["library", *parts]
        parts = ["docker.io", *parts]
    last = parts[-1]
    repo_path = "/".join(parts[1:-1] + [last.split(":")[0]])
    if repo_path != repo_path.lower():
        raise ValueError(f"image reference {ref!r}: repository names must be lower case")
    if not sep and ":" not in last:
        parts[-1] = last + ":latest"
    return "/".join(parts) + (f"@{digest}" if sep else "")


def node_reserve(cpus: int, memory_bytes: int, nodes: int = 1) -> dict[str, dict[str, str]]:
    """``kubeReserved``/``systemReserved`` of each real node's kubelet: what the control plane, the host and the
    machine's other real nodes keep, so that each node's allocatable is its honest share of the machine.

    The control plane (etcd, apiserver, controller-manager, scheduler, KWOK, the operator and Prometheus when
    they run as processes) gets a quarter of the CPUs, at least 500m, and a quarter of the memory, at least
    2 GiB (``kubeReserved``); the host keeps 512 MiB more (``systemReserved``). At least 500m CPU and 1 GiB stay
    for pods. With ``nodes`` > 1 the real nodes share what is left: each one's ``systemReserved`` also holds the
    other ``nodes - 1`` nodes' shares (rounded down to whole millicores and MiB), so the nodes' allocatables add
    up to no more than the machine once, while each still reports the whole machine as its capacity (cAdvisor's).
    ``nodes`` = 1 gives exactly the one-node reserve.

    Args:
        cpus: Logical CPUs of the machine.
        memory_bytes: Physical memory, bytes.
        nodes: Real nodes running on the machine (``cluster up --real-nodes``), 1..8.
    Returns:
        ``{"kubeReserved": {"cpu": "<m>m", "memory": "<Mi>Mi"}, "systemReserved": {"memory": "<Mi>Mi"}}``, and
        ``"cpu": "<m>m"`` in ``systemReserved`` when ``nodes`` > 1.
    Raises:
        ValueError: Fewer than 1 CPU or less than 2 GiB of memory, or ``nodes`` out of 1..8.
    """
    if cpus < 1 or memory_bytes < 2 * 2**30:
        raise ValueError(f"a real node needs >= 1 CPU and >= 2 GiB, got {cpus} CPUs and {memory_bytes} bytes")
    check_real_node_count(nodes)
    total_m = cpus * 1000
    cpu_m = min(max(500, total_m // 4), max(0, total_m - 500))
    mem_mi = memory_bytes // 2**20
    system_mi = 512
    kube_mi = min(max(2048, mem_mi // 4), max(0, mem_mi - system_mi - 1024))
    reserve = {"kubeReserved": {"cpu": f"{cpu_m}m", "memory": f"{kube_mi}Mi"},
               "systemReserved": {"memory": f"{system_mi}Mi"}}
    if nodes > 1:
        pool_m, pool_mi = total_m - cpu_m, mem_mi - system_mi - kube_mi
        others_m, others_mi = pool_m - pool_m // nodes, pool_mi - pool_mi // nodes
        reserve["systemReserved"] = {"cpu": f"{others_m}m", "memory": f"{system_mi + others_mi}Mi"}
    return reserve


def real_node_placement() -> dict[str, Any]:
    """Pod-spec fields that put a pod on the real node: ``nodeSelector`` and the toleration of its taint."""
    return {"nodeSelector": {NODE_TYPE_LABEL: NODE_TYPE_REAL},
            "tolerations": [{"key": NODE_TYPE_LABEL, "operator": "Equal", "value": NODE_TYPE_REAL,
                             "effect": "NoSchedule"}]}


def iptables_cleanup_commands(save_output: str, prefixes: tuple[str, ...] = CHAIN_PREFIXES) -> list[list[str]]:
    """Arguments of ``iptables`` calls that remove every chain named ``prefix...`` and every rule using one.

    Args:
        save_output: The text of ``iptables-save`` (all tables).
        prefixes: Chain-name prefixes to remove.
    Returns:
        ``-D`` of the rules in other chains that jump to such a chain, then ``-F`` and ``-X`` of each chain, each
        as ``["-t", table, ...]``; ``[]`` when nothing matches.
    """
    deletes: list[list[str]] = []
    flushes: list[list[str]] = []
    removes: list[list[str]] = []
    table = ""
    for line in save_output.splitlines():
        line = line.strip()
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chain = line[1:].split()[0]
            if chain.startswith(prefixes):
                flushes.append(["-t", table, "-F", chain])
                removes.append(["-t", table, "-X", chain])
        elif line.startswith("-A "):
            parts = line.split()
            chain = parts[1]
            if chain.startswith(prefixes):
                continue  # goes with the chain's flush
            if any(p.startswith(prefixes) for p in parts[2:]):
                deletes.append(["-t", table, "-D", chain, *_unquote_rule(line[len("-A " + chain):].strip())])
    return deletes + flushes + removes


def _unquote_rule(spec: str) -> list[str]:
    import shlex

    return shlex.split(spec)


def missing_pieces(is_root: bool, which: dict[str, str | None], cni_plugins: dict[str, bool],
                   cgroup_controllers: set[str], busybox_static: bool) -> list[str]:
    """What this machine lacks for a real node (``[]`` when nothing): pure, for the message and its test.

    Args:
        is_root: The process runs as uid 0.
        which: Command name -> its path or None (containerd, ctr, runc, iptables, iptables-save, ip, umoci).
        cni_plugins: CNI plugin name -> present in ``/usr/lib/cni``.
        cgroup_controllers: Mounted cgroup controllers (v1 hierarchies or v2 ``cgroup.controllers``).
        busybox_static: ``/bin/busybox`` exists and is statically linked.
    """
    missing = []
    if not is_root:
        missing.append("root (the kubelet, containerd and CNI need uid 0)")
    packages = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables",
                "iptables-save": "iptables", "ip": "iproute2", "umoci": "umoci"}
    for cmd, pkg in packages.items():
        if not which.get(cmd):
            missing.append(f"`{cmd}` (Debian package {pkg})")
    absent = [p for p, ok in cni_plugins.items() if not ok]
    if absent:
        missing.append(f"CNI plugins {', '.join(absent)} in {CNI_BIN_DIR} (Debian package containernetworking-plugins)")
    lacking = [c for c in ("cpu", "cpuacct", "memory", "pids") if c not in cgroup_controllers]
    if "cpuacct" in lacking and "cpu" not in lacking and (Path("/sys/fs/cgroup/cgroup.controllers").exists()):
        lacking.remove("cpuacct")  # cgroup v2 has no cpuacct controller
    if lacking:
        missing.append(f"cgroup controllers {', '.join(lacking)}")
    if not busybox_static:
        missing.append("a static /bin/busybox for the pause image (Debian package busybox-static)")
    return missing


def real_node_plan(wanted: bool | None, env_value: str, missing: list[str]) -> tuple[bool, str | None]:
    """Whether ``cluster up`` starts the real node, and if not, why (pure: the decision and its message).

    Args:
        wanted: ``--real-node`` (True), ``--no-real-node`` (False) or neither (None).
        env_value: ``$MODALSCALE_REAL_NODE`` (``""`` when unset); ``0``/``false``/``no`` turn it off, anything
            else asks for it, when ``wanted`` is None.
        missing: What the machine lacks (:func:`machine_support`).
    Returns:
        ``(True, None)`` to start it, else ``(False, reason)``.
    Raises:
        RealNodeError: The node was asked for (flag or variable) and the machine lacks a piece; the message
            names each piece, how to install them and the KWOK-only option.
    """
    env = env_value.strip().lower()
    asked = wanted if wanted is not None else (None if env == "" else env not in ("0", "false", "no"))
    if asked is False:
        return False, "off (--no-real-node)" if wanted is False else f"off (MODALSCALE_REAL_NODE={env_value})"
    if missing:
        reason = f"this machine lacks {'; '.join(missing)}"
        if asked:
            raise RealNodeError(f"a real node was asked for but {reason}. Install them (scripts/env.sh "
                                "ensure_node_packages, as root) or run KWOK-only with --no-real-node")
        return False, reason
    return True, None


# ---------------------------------------------------------------------------------------------- machine probes
def _cgroup_controllers() -> set[str]:
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    found: set[str] = set()
    if v2.exists():
        found |= set(v2.read_text().split())
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            fields = post.split()
            if fields and fields[0] == "cgroup":
                found |= {o for o in fields[2].split(",") if o in ("cpu", "cpuacct", "memory", "pids", "cpuset")}
    except OSError:
        pass
    return found


def _is_static(path: Path) -> bool:
    try:
        data = path.read_bytes()[:4096]
    except OSError:
        return False
    if data[:4] != b"\x7fELF":
        return False
    # A dynamically linked ELF names its interpreter (PT_INTERP) near the start of the file.
    return b"/lib64/ld-linux" not in data and b"/lib/ld-" not in data and b"ld-linux" not in data


def machine_support() -> list[str]:
    """Missing pieces of this machine for a real node (``[]`` when it can run one)."""
    cmds = ("containerd", "ctr", "runc", "iptables", "iptables-save", "ip", "umoci")
    return missing_pieces(
        is_root=os.geteuid() == 0,
        which={c: shutil.which(c) or (f"/usr/sbin/{c}" if Path(f"/usr/sbin/{c}").exists() else None) for c in cmds},
        cni_plugins={p: (CNI_BIN_DIR / p).is_file() for p in CNI_PLUGINS},
        cgroup_controllers=_cgroup_controllers(),
        busybox_static=_is_static(Path("/bin/busybox")),
    )


def _memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RealNodeError("no MemTotal in /proc/meminfo")


def primary_ipv4(ip_addr_output: str) -> str | None:
    """The first global-scope IPv4 address in ``ip -4 -o addr show scope global`` output (None if none).

    The node's InternalIP and the kubelet's listen address: the apiserver reaches the kubelet there for logs.
    """
    m = re.search(r"\sinet (\d+\.\d+\.\d+\.\d+)/\d+", ip_addr_output)
    return m.group(1) if m else None


def _is_node_link(ip_addr_line: str) -> bool:
    """An ``ip -o addr`` line of a real node's own link: node 0's ``cni0`` bridge or the machine's end of another
    node's veth (``ms<8 hex>v<i>``, 10.87.<i>.1), neither of which is the machine's address."""
    fields = ip_addr_line.split()
    name = fields[1] if len(fields) > 1 else ""
    return name == CNI_BRIDGE or re.fullmatch(r"ms[0-9a-f]{8}v\d+(@\S+)?", name) is not None


def node_ip() -> str:
    """This machine's primary IPv4 address.

    Raises:
        RealNodeError: The machine has no global-scope IPv4 address.
    """
    out = _run([_tool("ip"), "-4", "-o", "addr", "show", "scope", "global"], check=False).stdout
    ip = primary_ipv4("\n".join(line for line in out.splitlines() if not _is_node_link(line)))
    if ip is None:
        raise RealNodeError("this machine has no global IPv4 address for the node (the kubelet refuses 127.0.0.1)")
    return ip


def _tool(name: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if path is None:
        raise RealNodeError(f"`{name}` is not installed (scripts/env.sh ensure_node_packages installs it as root)")
    return path


def _run(cmd: list[str], timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and proc.returncode != 0:
        raise RealNodeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}: "
                            f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


# ---------------------------------------------------------------------------------------------- the machine lock
@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / "real-node.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield LOCK_DIR / "real-node.json"
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner_alive(record: dict[str, Any]) -> bool:
    """The recorded owner's node runs, or the process that recorded it still lives (it may be starting the node:
    between the record and containerd's start nothing of it runs yet). This process never races itself."""
    if RealNode(Path(record["workdir"])).any_running():
        return True
    pid = record.get("pid")
    return (isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid)
            and _start_time(pid) == record.get("pidStart"))


def current_owner() -> str | None:
    """Work dir of the cluster whose real node runs on this machine now (None when none runs)."""
    path = LOCK_DIR / "real-node.json"
    try:
        record = json.loads(path.read_text())
        owner = record["workdir"]
    except (OSError, ValueError, KeyError):
        return None
    return str(owner) if _owner_alive(record) else None


# ---------------------------------------------------------------------------------------------- images
def containerd_address(workdir: Path | str) -> Path:
    """Socket of the real node's containerd for the cluster rooted at ``workdir``.

    ``/run/modalscale/<hash of workdir>/containerd.sock``: a unix socket path has at most 104 characters with
    containerd's ``.ttrpc`` suffix, and pytest's work dirs are longer than that.
    """
    return LOCK_DIR / _workdir_digest(workdir) / "containerd.sock"


def kubelet_root_dir(workdir: Path | str) -> Path:
    """The kubelet's ``--root-dir`` for the cluster rooted at ``workdir``: ``/var/lib/modalscale/<hash>/kubelet``.

    Not under the work dir: the kubelet binds unix sockets below its root dir (``pod-resources/<10 digits>``,
    then renamed to ``kubelet.sock``; ``plugins_registry/``), and a socket path has at most 107 bytes. Under
    ``/tmp/pytest-of-root/pytest-160/<test name>0/private/node/kubelet`` that limit was passed by one byte and
    kubelet exited with "bind: invalid argument".
    """
    return KUBELET_STATE_DIR / _workdir_digest(workdir) / "kubelet"


def _workdir_digest(workdir: Path | str) -> str:
    return workdir_digest(workdir)


def ctr_command(workdir: Path | str, address: Path | None = None) -> list[str]:
    """``ctr`` in the ``k8s.io`` namespace of node 0's containerd of ``workdir``, or of the one at ``address``."""
    return [_tool("ctr"), "--address", str(address or containerd_address(workdir)), "-n", K8S_NAMESPACE]


def list_images(workdir: Path | str, address: Path | None = None) -> list[str]:
    """Names of the images in the node's ``k8s.io`` namespace (node 0's, or the containerd at ``address``)."""
    out = _run([*ctr_command(workdir, address), "images", "ls", "-q"]).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _replaced_image_ids(workdir: Path, address: Path | None = None) -> list[str]:
    """``sha256:<id>`` refs that point at no named image's manifest any more.

    The CRI plugin names every image it has seen by its ID as well; when an import replaces ``name:tag`` with a new
    build, the old build's ID ref stays and keeps its content and unpacked snapshots alive (seen: 14 refs, 31 GB
    for 4 named images). A container still running an old build keeps its own snapshot regardless."""
    rows = [r.split() for r in _run([*ctr_command(workdir, address), "images", "ls"]).stdout.splitlines()[1:]]
    digests = {r[0]: r[2] for r in rows if len(r) >= 3}
    named = {d for ref, d in digests.items() if not ref.startswith("sha256:")}
    return [ref for ref, d in digests.items() if ref.startswith("sha256:") and d not in named]


def import_image(workdir: Path | str, oci_tar: Path | str, refs: list[str], log: Log = print,
                 address: Path | None = None) -> list[str]:
    """Import one image from an OCI (or docker-save) tar into the running node's containerd, under ``refs``.

    The tar's own names are ignored: it is imported under a unique temporary name (``ctr images import
    --base-name ... --digests``), tagged with the full name of every ref (CRI normalizes ``local/x:1`` to
    ``docker.io/local/x:1`` and finds nothing under the short name), and the temporary and any stray
    ``import-*`` names are removed (the CRI image cache resolves those to ``docker.io/library/...`` and fails).

    Args:
        workdir: The cluster's work dir (or anything with a ``workdir`` attribute, e.g. a ``LocalCluster``).
        oci_tar: The archive.
        refs: Names to give it, e.g. ``["modalscale/operator:0.1.0"]``; each is stored normalized.
        address: The containerd socket of another real node than node 0 (``RealNode(...).address``).
    Returns:
        The normalized names now in containerd.
    Raises:
        RealNodeError: The node's containerd is not running, the import failed, or the tar holds no image or
            more than one.
        ValueError: A ref is not a valid image reference.
    """
    workdir = Path(getattr(workdir, "workdir", workdir))
    full = list(dict.fromkeys(normalize_image_ref(r) for r in refs))
    if not full:
        raise ValueError("import_image needs at least one ref")
    address = address or containerd_address(workdir)
    if not address.exists():
        raise RealNodeError(f"the real node's containerd is not running in {workdir}: run `modalscale cluster up`")
    base = f"docker.io/modalscale-import/{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    ctr = ctr_command(workdir, address)
    _run([*ctr, "images", "import", "--base-name", base, "--digests", str(oci_tar)], timeout_s=1800)
    temp = [n for n in list_images(workdir, address) if n.startswith(base)]
    try:
        targets = {_run([*ctr, "images", "ls", f"name=={n}"]).stdout.split("\n")[1].split()[2]
                   for n in temp}
        if len(targets) != 1:
            raise RealNodeError(f"{oci_tar} holds {len(targets)} images; import_image takes exactly one")
        _run([*ctr, "images", "tag", "--force", temp[0], *full])
    finally:
        stray = (temp + [n for n in list_images(workdir, address) if n.startswith("import-")]
                 + _replaced_image_ids(workdir, address))
        if stray:
            # --sync waits for containerd's garbage collection, which also frees the content and unpacked
            # snapshots of the image this import replaced under the same name: the machine-wide store otherwise
            # kept every imported version (31 GB after one day of rebuilding the ~5 GB runtime image).
            _run([*ctr, "images", "rm", "--sync", *stray], timeout_s=600, check=False)
    into = "" if address == containerd_address(workdir) else f" into the containerd at {address}"
    log(f"Imported {oci_tar} as {', '.join(full)}{into} in {time.monotonic() - started:.1f} s")
    return full


def _busybox_key() -> str:
    h = hashlib.sha256(Path("/bin/busybox").read_bytes())
    h.update(IMAGE_RECIPE_VERSION.encode())
    return h.hexdigest()[:16]


def ensure_node_images(log: Log = print) -> dict[str, Path]:
    """The node's own OCI tars ``{ref: path}`` (pause and busybox), built with umoci from ``/bin/busybox``.

    Cached under ``<cache>/images/node-<hash>/`` keyed by the busybox binary and :data:`IMAGE_RECIPE_VERSION`.

    Raises:
        RealNodeError: umoci or busybox-static is missing, or a umoci step failed.
    """
    out = cache_dir() / "images" / f"node-{_busybox_key()}"
    want = {PAUSE_IMAGE: out / "pause.tar", BUSYBOX_IMAGE: out / "busybox.tar"}
    if all(p.is_file() for p in want.values()):
        return want
    umoci = _tool("umoci")
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    applets = _run(["/bin/busybox", "--list-full"]).stdout.split()
    for ref, tar in want.items():
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            layout, bundle = Path(tmp) / "layout", Path(tmp) / "bundle"
            img = f"{layout}:img"
            _run([umoci, "init", "--layout", str(layout)])
            _run([umoci, "new", "--image", img])
            _run([umoci, "unpack", "--image", img, str(bundle)])
            root = bundle / "rootfs"
            for d in ("bin", "tmp", "etc", "www"):
                (root / d).mkdir(parents=True, exist_ok=True)
            (root / "tmp").chmod(0o1777)
            shutil.copy2("/bin/busybox", root / "bin" / "busybox")
            if ref == PAUSE_IMAGE:
                (root / "bin" / "sleep").symlink_to("busybox")
                config = ["--config.entrypoint", "/bin/sleep", "--config.cmd", "2147483647"]
            else:
                for applet in applets:  # e.g. usr/bin/wget
                    link = root / applet
                    if link.name == "busybox" or link.exists():
                        continue
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to("/bin/busybox")
                (root / "etc" / "passwd").write_text(
                    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
                (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
                config = ["--config.cmd", "/bin/sh", "--config.env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
            _run([umoci, "repack", "--image", img, str(bundle)])
            _run([umoci, "config", "--image", img, *config])
            _run([umoci, "gc", "--layout", str(layout)])
            tmp_tar = tar.with_suffix(".tmp")
            _run(["tar", "cf", str(tmp_tar), "-C", str(layout), "."])
            tmp_tar.rename(tar)
    log(f"Built the node's pause and busybox images in {time.monotonic() - started:.1f} s ({out})")
    return want


# ---------------------------------------------------------------------------------------------- the node
def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it holds that already; True when it wrote."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
        return True
    return False


@dataclass
class NodePorts:
    kubelet: int
    kubelet_healthz: int
    proxy_metrics: int
    proxy_healthz: int
    node_ip: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0") if raw else []


@dataclass(frozen=True)
class NodeCrash:
    """What :meth:`RealNode.crash` did.

    Attributes:
        at: When the first process was killed (UTC): the pods stopped at this instant.
        killed: PIDs killed, by what they were (``kubelet``, ``kube-proxy``, ``containerd``, ``shims``,
            ``containers``).
    """

    at: datetime
    killed: dict[str, list[int]]


class RealNode:
    """Real node ``index`` of the cluster rooted at ``workdir`` (which must already have its kubeconfig and pki).

    Node 0 runs in the machine's network namespace; node ``i >= 1`` in namespaces of its own
    (:mod:`modalscale.devenv.nodelayout`) and starts only while node 0 of the same cluster runs.

    Args:
        workdir: The cluster's work dir.
        log: Progress printer.
        index: Which node, 0 .. :data:`MAX_REAL_NODES` - 1.
        labels: Labels the node gets besides ``modalscale.io/node-type=real`` (:func:`real_node_labels`); with
            ``karpenter.sh/capacity-type=spot`` it also gets the Spot taint, like the KWOK Spot nodes. A
            managed label (:data:`MANAGED_NODE_LABELS`) the Node has and ``labels`` lacks is removed at start.
        nodes: How many real nodes the cluster runs: the node's allocatable is its share (:func:`node_reserve`).
    """

    def __init__(self, workdir: Path | str, log: Log = print, index: int = 0,
                 labels: dict[str, str] | None = None, nodes: int = 1) -> None:
        self.workdir = Path(workdir)
        self.layout: NodeLayout = node_layout(self.workdir, index, cache_dir())
        self.dir = self.layout.node_dir
        self.name = self.layout.name
        self.labels = dict(labels or {})
        check_real_node_count(nodes)
        self.nodes = nodes
        self.log = log
        self._started: dict[str, subprocess.Popen[bytes]] = {}
        self._kubelet_config_changed = False

    # ------------------------------------------------------------------ paths
    @property
    def containerd_root(self) -> Path:
        """containerd's root (content, snapshots, image metadata), in the machine-wide cache: images survive
        ``down``/``up``. One per node index (two containerds cannot share one)."""
        return self.layout.containerd_root

    @property
    def runc_root(self) -> Path:
        """runc's state root for this node's containers (``runc --root``), inside the work dir."""
        return self.layout.runc_root

    @property
    def address(self) -> Path:
        """containerd's socket."""
        return self.layout.address

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's root dir (pods' volumes, its sockets): :func:`kubelet_root_dir`."""
        return self.layout.kubelet_root

    def _pidfile(self, name: str) -> Path:
        return self.layout.pid_dir / f"{name}.pid"

    def _logfile(self, name: str) -> Path:
        return self.layout.log_dir / f"{name}.log"

    # ------------------------------------------------------------------ status
    def pids(self) -> dict[str, int | None]:
        """Running PID per node component (None when not running or not ours)."""
        out: dict[str, int | None] = {}
        for name in NODE_COMPONENTS:
            pf = self._pidfile(name)
            pid = int(pf.read_text()) if pf.exists() else None
            ok = pid is not None and _pid_alive(pid) and self._is_ours(pid, name)
            out[name] = pid if ok else None
        return out

    def any_running(self) -> bool:
        """True when any of containerd, kubelet or kube-proxy of this node runs."""
        return any(self.pids().values())

    def _is_ours(self, pid: int, name: str) -> bool:
        cmd = _cmdline(pid)
        # Every component's command line names a config file in this node's dir (node 1's dir is node-1/, so
        # node 0's "node/" never matches it).
        return bool(cmd) and Path(cmd[0]).name == name and any(f"{self.dir}/" in a for a in cmd)

    # ------------------------------------------------------------------ configs
    def _node_kubeconfig(self, kubeconfig: Path) -> Path:
        """Node 0 uses the admin kubeconfig (127.0.0.1). A node in its own network namespace has its own loopback:
        its copy names the apiserver at the machine's primary IPv4 (in the serving certificate)."""
        if not self.layout.own_netns:
            return kubeconfig
        import yaml

        doc = yaml.safe_load(kubeconfig.read_text())
        for c in doc.get("clusters", []):
            server = c["cluster"]["server"]
            port = server.rsplit(":", 1)[1]
            c["cluster"]["server"] = f"https://{node_ip()}:{port}"
        path = self.dir / "kubeconfig"
        _write_if_changed(path, yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    def _write_configs(self, kubeconfig: Path, ca_crt: Path, ports: NodePorts) -> dict[str, Path]:
        import yaml

        d = self.dir
        lay = self.layout
        for sub in (lay.containerd_state, lay.cni_conf_dir, lay.cni_ipam_dir):
            sub.mkdir(parents=True, exist_ok=True)
        (self.kubelet_root / "pki").mkdir(parents=True, exist_ok=True)
        self.address.parent.mkdir(parents=True, exist_ok=True)
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        runc = _tool("runc")
        containerd_toml = f"""version = 2
root = "{self.containerd_root}"
state = "{lay.containerd_state}"
[grpc]
  address = "{self.address}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The machine lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below ours (every sandbox failed with
  # "can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{lay.cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      Root = "{self.runc_root}"
      SystemdCgroup = false
"""
        _write_if_changed(d / "containerd.toml", containerd_toml)
        conflist = {
            "cniVersion": "0.4.0", "name": "modalscale",
            "plugins": [
                {"type": "bridge", "bridge": lay.bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(lay.cni_ipam_dir),
                          "ranges": [[{"subnet": lay.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        _write_if_changed(lay.cni_conf_dir / "10-modalscale.conflist", json.dumps(conflist, indent=1))
        reserve = node_reserve(os.cpu_count() or 1, _memory_bytes(), self.nodes)
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # Container logs in the work dir (the links in /var/log/containers are removed at stop).
            "podLogsDir": str(lay.pod_logs_dir),
            "failCgroupV1": False, "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.address}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(ca_crt)}},
            "authorization": {"mode": "AlwaysAllow"},
            "staticPodPath": "", "failSwapOn": False,
            "address": ports.node_ip, "port": ports.kubelet, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": ports.kubelet_healthz,
            "clusterDNS": [], "resolvConf": "/etc/resolv.conf",
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "cgroupsPerQOS": True, "enforceNodeAllocatable": ["pods"],
            "localStorageCapacityIsolation": False,
            "registerWithTaints": [REAL_NODE_TAINT, *self._extra_taints()],
            "serializeImagePulls": False,
            "nodeStatusReportFrequency": "10s", "nodeStatusUpdateFrequency": "10s",
            **reserve,
        }
        if lay.cgroup_root:
            # Its own kubepods: a kubelet removes the pod cgroups under its kubepods that it does not know.
            kubelet["cgroupRoot"] = lay.cgroup_root
        # A running kubelet reads its config only at start: :meth:`_start_components` restarts it on a change.
        self._kubelet_config_changed = _write_if_changed(d / "kubelet.yaml", yaml.safe_dump(kubelet, sort_keys=False))
        proxy = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self._node_kubeconfig(kubeconfig))},
            "hostnameOverride": self.name, "mode": "iptables", "clusterCIDR": lay.pod_cidr,
            "metricsBindAddress": f"127.0.0.1:{ports.proxy_metrics}",
            "healthzBindAddress": f"127.0.0.1:{ports.proxy_healthz}",
            # Pod -> Service -> pod on the same bridge: SNAT so that the reply comes back through the host.
            "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
            # 0 = leave the host's conntrack sysctls alone (read-only in a container).
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        # kube-proxy exits when its config file changes: a second `up` must not touch it.
        _write_if_changed(d / "kube-proxy.yaml", yaml.safe_dump(proxy, sort_keys=False))
        return {"containerd": d / "containerd.toml", "kubelet": d / "kubelet.yaml", "kube-proxy": d / "kube-proxy.yaml"}

    def _extra_taints(self) -> list[dict[str, str]]:
        return [dict(SPOT_TAINT)] if self.labels.get(CAPACITY_TYPE_LABEL) == SPOT_LABEL_VALUE else []

    # ------------------------------------------------------------------ start
    def start(self, kubeconfig: Path, ca_crt: Path, api: Any, binaries: NodeBinaries | None = None,
              timeout_s: float = 180.0) -> str | None:
        """Start containerd, import the pause/busybox images, start kubelet and kube-proxy; wait for Ready.

        Idempotent: running components are left alone.

        Args:
            kubeconfig: Admin kubeconfig of the cluster.
            ca_crt: The cluster CA (the kubelet accepts client certificates it signed).
            api: A ``kubernetes.client.ApiClient`` of the cluster.
            binaries: kubelet and kube-proxy; built or taken from the cache when None.
            timeout_s: Deadline for the node to become Ready, seconds.
        Returns:
            None when the node runs; otherwise why not (another cluster owns the machine's real node, or, for a
            node ``i >= 1``, node 0 of this cluster does not run).
        Raises:
            RealNodeError: A component exited or the node was not Ready in time (the message names the log).
            modalscale.devenv.binaries.BuildError: Building kubelet/kube-proxy failed.
        """
        started = time.monotonic()
        # Builds first: the owner record below must not stand for minutes with nothing running yet.
        binaries = binaries or ensure_node_binaries(self.log)
        ensure_node_images(self.log)
        if self.layout.own_netns:
            owner = current_owner()
            if owner != str(self.workdir):
                return (f"{self.name} needs {NODE_NAME} of this cluster running first (the machine's real nodes "
                        f"belong to {owner or 'no cluster'})")
            if not self.any_running():
                self._stop_local(15.0)  # what a crashed run of this node left
        else:
            with _locked() as owner_file:
                try:
                    record = json.loads(owner_file.read_text())
                except (OSError, ValueError):
                    record = {}
                owner = record.get("workdir")
                if owner and owner != str(self.workdir) and _owner_alive(record):
                    return (f"another cluster ({owner}) runs this machine's real node (one per machine: the cni0 "
                            f"bridge and kube-proxy's iptables chains are global)")
                if owner != str(self.workdir) or not self.any_running():
                    # No live owner: whatever global state a crashed node left goes first.
                    if owner and owner != str(self.workdir):
                        for extra in extra_nodes(Path(owner), self.log):
                            extra.stop()
                        RealNode(Path(owner), log=self.log)._stop_local(15.0)
                    _cleanup_global_network(self.log)
                owner_file.write_text(json.dumps({"workdir": str(self.workdir), "pid": os.getpid(),
                                                  "pidStart": _start_time(os.getpid())}))
        self.dir.mkdir(parents=True, exist_ok=True)  # `down` finds the nodes by their dirs (extra_node_indices)
        try:
            if self.layout.own_netns:
                self._setup_network()
                _make_cgroup_root(str(self.layout.cgroup_root))
            self._start_components(kubeconfig, ca_crt, api, binaries, timeout_s)
            self._apply_labels(api)
        except BaseException:
            self.stop()
            raise
        self.log(f"Real node {self.name} Ready in {time.monotonic() - started:.1f} s")
        return None

    def _setup_network(self) -> None:
        """The node's network namespace (bound on :attr:`NodeLayout.netns_path`), its veth to the machine,
        addresses, and the routes of :func:`modalscale.devenv.nodelayout.node_routes` (idempotent: what exists
        stays)."""
        lay = self.layout
        assert lay.netns_path and lay.veth_host and lay.host_ip and lay.node_ip and lay.transit_cidr
        ip = _tool("ip")
        in_node = [_tool("nsenter"), f"--net={lay.netns_path}"]
        prefix = lay.transit_cidr.split("/")[1]
        if not mounts_under([lay.netns_path]):
            lay.netns_path.parent.mkdir(parents=True, exist_ok=True)
            lay.netns_path.touch()
            _run([_tool("unshare"), f"--net={lay.netns_path}", "true"])
        if not Path(f"/sys/class/net/{lay.veth_host}").exists():
            # `netns <path>`: iproute2 opens a name with a "/" as a file.
            _run([ip, "link", "add", lay.veth_host, "type", "veth", "peer", "name", "eth0",
                  "netns", str(lay.netns_path)])
            _run([ip, "addr", "add", f"{lay.host_ip}/{prefix}", "dev", lay.veth_host])
            _run([*in_node, ip, "addr", "add", f"{lay.node_ip}/{prefix}", "dev", "eth0"])
        _run([ip, "link", "set", lay.veth_host, "up"])
        _run([*in_node, ip, "link", "set", "eth0", "up"])
        _run([*in_node, ip, "link", "set", "lo", "up"])
        for r in node_routes(lay):
            _run([*(in_node if r.netns else []), ip, "route", "replace", r.dst, "via", r.via, "dev", r.dev])
        # The node routes between its bridge and eth0 (the CNI bridge plugin sets it too, at the first pod).
        _run([*in_node, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])

    def _wrap(self, name: str, cmd: list[str]) -> list[str]:
        """``cmd`` as run in this node's namespaces: node 0 as is. Node ``i``: containerd in its network
        namespace and a new mount namespace (slave of the machine's: the machine's mounts show, the node's stay
        inside) where the node's device-plugin dir is bound at the kubelet's fixed path; the kubelet joins both of
        containerd's (it mounts the volumes that containerd's runc binds into containers); kube-proxy joins the
        network namespace."""
        lay = self.layout
        if not lay.own_netns:
            return cmd
        nsenter = _tool("nsenter")
        if name == "containerd":
            lay.device_plugin_dir.mkdir(parents=True, exist_ok=True)
            KUBELET_DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
            return [nsenter, f"--net={lay.netns_path}", _tool("unshare"), "--mount", "--propagation", "slave",
                    "/bin/sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                    str(lay.device_plugin_dir), str(KUBELET_DEVICE_PLUGIN_DIR), *cmd]
        if name == "kubelet":
            pid = self.pids()["containerd"]
            if pid is None:
                raise RealNodeError(f"containerd of {self.name} is not running")
            return [nsenter, f"--target={pid}", "--mount", "--net", "--", *cmd]
        return [nsenter, f"--net={lay.netns_path}", "--", *cmd]

    def _start_components(self, kubeconfig: Path, ca_crt: Path, api: Any, binaries: NodeBinaries | None,
                          timeout_s: float) -> None:
        bins = binaries or ensure_node_binaries(self.log)
        images = ensure_node_images(self.log)
        self.layout.pid_dir.mkdir(parents=True, exist_ok=True)
        self.layout.log_dir.mkdir(parents=True, exist_ok=True)
        running = self.pids()
        cfg_path = self.dir / "ports.json"
        if cfg_path.exists() and any(running.values()):
            ports = NodePorts(**json.loads(cfg_path.read_text()))
        else:
            if self.layout.node_ip:  # its own namespace: every port is free there; distinct ones all the same
                ports = NodePorts(free_port(), free_port(), free_port(), free_port(), self.layout.node_ip)
            else:
                ip = node_ip()
                ports = NodePorts(free_port(ip), free_port(), free_port(), free_port(), ip)
            self.dir.mkdir(parents=True, exist_ok=True)
            cfg_path.write_text(json.dumps(ports.__dict__))
        files = self._write_configs(kubeconfig, ca_crt, ports)
        if running["kubelet"] and self._kubelet_config_changed:
            # Its share of the machine (another --real-nodes) or its Spot taint changed; its pods keep running.
            self.log(f"Restarting the kubelet of {self.name}: {files['kubelet']} changed")
            self._kill("kubelet", 15.0)
            running["kubelet"] = None
        if not running["containerd"]:
            self._start("containerd", self._wrap("containerd", [_tool("containerd"), "--config",
                                                                str(files["containerd"])]))
            self._wait(lambda: self.address.exists() and _run([*ctr_command(self.workdir, self.address), "version"],
                                                               check=False).returncode == 0, "containerd", 60)
            # Containers a crashed run left in the shared root would be recovered by CRI: remove them first.
            _remove_containers(self.workdir, self.log, address=self.address)
        have = set(list_images(self.workdir, address=self.address))
        for ref, tar in images.items():
            if ref not in have:
                import_image(self.workdir, tar, [ref], log=self.log, address=self.address)
        labels = ",".join(f"{k}={v}" for k, v in {NODE_TYPE_LABEL: NODE_TYPE_REAL, **self.labels}.items())
        if not running["kubelet"]:
            self._start("kubelet", self._wrap("kubelet", [
                str(bins.kubelet), f"--config={files['kubelet']}", f"--kubeconfig={self._node_kubeconfig(kubeconfig)}",
                f"--hostname-override={self.name}", f"--node-ip={ports.node_ip}",
                f"--node-labels={labels}",
                f"--root-dir={self.kubelet_root}", f"--cert-dir={self.kubelet_root / 'pki'}", "--v=1",
            ]))
        if not running["kube-proxy"]:
            self._start("kube-proxy", self._wrap("kube-proxy", [str(bins.kube_proxy),
                                                                f"--config={files['kube-proxy']}", "--v=1"]))
        since = time.time() - 2.0
        self._wait(lambda: self._node_ready(api, since), "kubelet", timeout_s)

    def _apply_labels(self, api: Any) -> None:
        """The node's managed labels and taints on its Node object, as :func:`node_label_patch` computes them
        (the kubelet sets them only when it registers the Node; one kept in etcd from an earlier ``up`` keeps its
        old ones, and one an earlier ``up`` labelled Spot stays Spot unless they are removed here)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = client.CoreV1Api(api)
        for attempt in range(5):
            node = core.read_node(self.name)
            have = [core.api_client.sanitize_for_serialization(t) for t in node.spec.taints or []]
            body = node_label_patch(node.metadata.labels or {}, have, self.labels, self._extra_taints())
            if body is None:
                return
            # The taints are replaced as a whole: a concurrent write (the kubelet's status) is a conflict, retried.
            body["metadata"]["resourceVersion"] = node.metadata.resource_version
            try:
                core.patch_node(self.name, body)
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == 4:
                    raise

    def _node_ready(self, api: Any, since: float) -> bool:
        """Ready=True posted after ``since`` (epoch s): a Node kept in etcd from an earlier run says Ready too."""
        from kubernetes import client

        try:
            node = client.CoreV1Api(api).read_node(self.name)
        except Exception:  # not registered yet; the deadline reports it
            return False
        return any(c.type == "Ready" and c.status == "True" and c.last_heartbeat_time is not None
                   and c.last_heartbeat_time.timestamp() >= since for c in node.status.conditions or [])

    def _start(self, name: str, cmd: list[str]) -> None:
        self.log(f"Starting {name}" if not self.layout.own_netns else f"Starting {name} of {self.name}")
        logf = open(self._logfile(name), "ab")  # handed to the child
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.dir)
        logf.close()
        self._pidfile(name).write_text(str(proc.pid))
        self._started[name] = proc

    def _wait(self, ready: Any, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for comp, proc in self._started.items():
                if proc.poll() is not None:
                    raise RealNodeError(f"{comp} exited with code {proc.returncode}; see {self._logfile(comp)}:\n"
                                        f"{self._tail(comp)}")
            time.sleep(0.3)
        raise RealNodeError(f"{name} was not ready within {timeout_s:.0f} s; see {self._logfile(name)}:\n"
                            f"{self._tail(name)}")

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self._logfile(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ stop
    def stop(self, timeout_s: float = 15.0) -> list[str]:
        """Stop kubelet, kube-proxy, every container and shim, containerd; remove mounts, network namespaces,
        veths, the ``cni0`` bridge and the ``KUBE-``/``CNI-`` iptables chains. Returns the components stopped.

        Node 0 stops this cluster's other nodes first (they run only beside it); a node ``i >= 1`` stops itself
        and removes its network namespace (its bridge, veths and iptables chains go with it), the machine's end
        of its veth and route, and its cgroup root.

        Safe to call when nothing runs (it still removes what a crashed node of this work dir left).
        """
        if self.layout.own_netns:
            return self._stop_local(timeout_s)
        stopped = []
        for extra in extra_nodes(self.workdir, self.log):
            stopped += extra.stop(timeout_s)
        stopped += self._stop_local(timeout_s)
        owns = False
        with contextlib.suppress(OSError), _locked() as owner_file:
            try:
                owns = json.loads(owner_file.read_text()).get("workdir") == str(self.workdir)
            except (OSError, ValueError):
                owns = False
            if owns:
                _cleanup_global_network(self.log)
                owner_file.unlink(missing_ok=True)
        if owns:
            _remove_kubepods_cgroups()
        return stopped

    def _stop_local(self, timeout_s: float) -> list[str]:
        """Everything of :meth:`stop` but the machine-wide state (bridge, iptables, the owner record)."""
        stopped = []
        for name in ("kubelet", "kube-proxy"):
            if self._kill(name, timeout_s):
                stopped.append(name)
        netns: set[str] = set()
        if self.pids()["containerd"]:
            netns |= _remove_containers(self.workdir, self.log, address=self.address)
        shims = _shims_of(self.address)
        if self._kill("containerd", timeout_s):
            stopped.append("containerd")
        for pid, ns, sid in shims:  # a shim whose task could not be deleted, or one a crashed containerd left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            shim_socket(self.address, ns, sid).unlink(missing_ok=True)
        _kill_runc_containers(self.runc_root, self.log)
        _unmount_under([self.dir, self.kubelet_root, *[Path(p) for p in netns]], self.log)
        for link in Path(CONTAINER_LOG_LINKS).glob("*.log") if Path(CONTAINER_LOG_LINKS).is_dir() else []:
            with contextlib.suppress(OSError):
                if os.readlink(link).startswith(str(self.dir) + "/"):
                    link.unlink()
        for p in netns:
            with contextlib.suppress(OSError):
                Path(p).unlink()
        if self.layout.own_netns:
            self._teardown_network()
            _remove_cgroup_root(str(self.layout.cgroup_root))
        shutil.rmtree(self.address.parent, ignore_errors=True)
        if not mounts_under([self.kubelet_root]):  # never rmtree through a mount that would not go
            shutil.rmtree(self.kubelet_root.parent, ignore_errors=True)
        return stopped

    def crash(self) -> NodeCrash:
        """Lose this node as a power cut would, for chaos tests (issue 21, scenario 2): SIGKILL its kubelet,
        kube-proxy, containerd, every shim of its containerd and every process in its cgroup root (the pods'
        containers), then remove its network namespace and the machine's end of its veth, and make the machine's
        routes to its pod CIDR and veth /30 blackholes (the pods' addresses answer nothing, as a dead machine's:
        no reset, no refusal). Nothing is told to the API server: the Node object and the pods
        stay as they were, and the node lifecycle controller finds the node silent only by its missed lease
        renewals. What is left (runc records, the pods' netns mounts, the cgroup root) goes with :meth:`stop`.

        Only a node in its own network namespace (index >= 1) can crash: node 0 is the machine's.

        Returns:
            :class:`NodeCrash`: when the first process was killed (UTC) and the PIDs killed, by what they were.
        Raises:
            RealNodeError: Node 0, or the node does not run.
        """
        if not self.layout.own_netns:
            raise RealNodeError(f"{self.name} runs in the machine's network namespace: only a node in its own "
                                "can crash")
        components = {name: pid for name, pid in self.pids().items() if pid is not None}
        if "kubelet" not in components:
            raise RealNodeError(f"{self.name} does not run (no kubelet)")
        shims = [pid for pid, _, _ in _shims_of(self.address)]
        at = datetime.now(timezone.utc)
        for name in ("kubelet", "kube-proxy", "containerd"):  # the kubelet first: it posts nothing after this
            if name in components:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(components[name], signal.SIGKILL)
        for pid in shims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        containers = _kill_cgroup(str(self.layout.cgroup_root))
        for name in components:
            self._pidfile(name).unlink(missing_ok=True)
            proc = self._started.pop(name, None)
            if proc is not None:
                proc.wait()
        self._teardown_network()
        # A dead machine's addresses answer nothing: without these the machine would send them along its default
        # route, where a middlebox may answer (seen: every request to the lost pod got an empty non-200 at once).
        for cidr in self._lost_cidrs():
            _run([_tool("ip"), "route", "replace", "blackhole", cidr], check=False)
        self.log(f"Crashed {self.name}: killed {', '.join(components)}, {len(shims)} shims and {len(containers)} "
                 "container processes; removed its network namespace")
        return NodeCrash(at, {**{k: [v] for k, v in components.items()}, "shims": shims, "containers": containers})

    def _lost_cidrs(self) -> list[str]:
        """The machine's routes to this node (its pod CIDR and its veth's /30) that :meth:`crash` blackholes."""
        lay = self.layout
        return [c for c in (lay.pod_cidr, lay.transit_cidr) if c] if lay.own_netns else []

    def _teardown_network(self) -> None:
        """Delete the node's network namespace (its bridge, pod veths, routes and iptables go with it once no
        process holds it), the machine's end of its veth (its route goes with it) and the blackhole routes a
        :meth:`crash` left."""
        lay = self.layout
        ip = shutil.which("ip") or "/usr/sbin/ip"
        for cidr in self._lost_cidrs():
            subprocess.run([ip, "route", "del", "blackhole", cidr], capture_output=True, check=False)
        if lay.netns_path:
            for _ in range(3):
                if not mounts_under([lay.netns_path]):
                    break
                subprocess.run(["umount", str(lay.netns_path)], capture_output=True, check=False)
            if mounts_under([lay.netns_path]):
                self.log(f"could not unmount {lay.netns_path}")
            else:
                lay.netns_path.unlink(missing_ok=True)
        if lay.veth_host and Path(f"/sys/class/net/{lay.veth_host}").exists():
            subprocess.run([ip, "link", "del", str(lay.veth_host)], capture_output=True, check=False)

    def _kill(self, name: str, timeout_s: float) -> bool:
        pf = self._pidfile(name)
        if not pf.exists():
            return False
        pid = int(pf.read_text())
        killed = False
        if _pid_alive(pid) and self._is_ours(pid, name):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                while _pid_alive(pid):
                    time.sleep(0.05)
            killed = True
        pf.unlink(missing_ok=True)
        proc = self._started.pop(name, None)
        if proc is not None:
            proc.poll()
        return killed


def extra_node_indices(workdir: Path | str) -> list[int]:
    """Indices ``i >= 1`` of the nodes this cluster has run (a ``node-<i>`` dir in its work dir), ascending."""
    found = []
    for d in Path(workdir).glob("node-*"):
        suffix = d.name[len("node-"):]
        if d.is_dir() and suffix.isdigit() and 1 <= int(suffix) < MAX_REAL_NODES:
            found.append(int(suffix))
    return sorted(found)


def extra_nodes(workdir: Path | str, log: Log = print) -> list[RealNode]:
    """The nodes ``i >= 1`` this cluster has run, last first (the order to stop them in)."""
    return [RealNode(workdir, log=log, index=i) for i in reversed(extra_node_indices(workdir))]


def node_addresses(workdir: Path | str) -> list[Path]:
    """containerd sockets of the cluster's real nodes that exist now (their containerd runs, or crashed and left
    it): node 0's first, then node 1, 2 ... (an image to run on any node must be imported into each)."""
    workdir = Path(workdir)
    found = [containerd_address(workdir), *(RealNode(workdir, index=i).address for i in extra_node_indices(workdir))]
    return [a for a in found if a.exists()]


def real_node_labels(count: int, spot: list[int], gpu: list[str]) -> dict[int, dict[str, str]]:
    """Per-node labels from ``--spot-real-node I`` and ``--real-node-gpu I=PRODUCT`` (pure).

    Args:
        count: ``--real-nodes``.
        spot: Node indices to mark Spot (``karpenter.sh/capacity-type=spot``; they get the Spot taint too).
        gpu: ``I=PRODUCT`` items: node ``I`` gets ``nvidia.com/gpu.product=PRODUCT`` (priced by the catalog as
            that GPU; the node has no GPU device).
    Returns:
        ``{index: {label: value}}`` for the nodes with any.
    Raises:
        ValueError: An index outside ``0..count-1``, an item without ``=``, or an empty or invalid product (the
            message names the flag).
    """
    out: dict[int, dict[str, str]] = {}

    def check(flag: str, i: int) -> None:
        if not 0 <= i < count:
            raise ValueError(f"{flag} {i}: real nodes are numbered 0..{count - 1} (--real-nodes {count})")

    for i in spot:
        check("--spot-real-node", i)
        out.setdefault(i, {})[CAPACITY_TYPE_LABEL] = SPOT_LABEL_VALUE
    for item in gpu:
        index, sep, product = item.partition("=")
        if not sep or not index.strip().isdigit():
            raise ValueError(f"--real-node-gpu {item!r}: write INDEX=PRODUCT, e.g. 1=nvidia-l4")
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", product):
            raise ValueError(f"--real-node-gpu {item!r}: the product must be a valid label value, e.g. nvidia-l4")
        check("--real-node-gpu", int(index))
        out.setdefault(int(index), {})[GPU_PRODUCT_LABEL] = product
    return out


MANAGED_NODE_LABELS = (CAPACITY_TYPE_LABEL, GPU_PRODUCT_LABEL)
"""Labels of a real node that ``cluster up`` owns (:func:`real_node_labels`): one the node has and the latest
``up`` did not ask for is removed, with the Spot taint when it was ``karpenter.sh/capacity-type``."""


def node_label_patch(have_labels: dict[str, str], have_taints: list[dict[str, Any]], wanted: dict[str, str],
                     wanted_taints: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The patch that gives a real Node exactly the managed labels ``wanted`` and its taints (pure).

    Args:
        have_labels: The Node's labels now.
        have_taints: Its taints now, as dicts (``key``, ``value``, ``effect``; other fields kept as given).
        wanted: Its labels from :func:`real_node_labels` (keys in :data:`MANAGED_NODE_LABELS`).
        wanted_taints: The taints those labels bring (the Spot taint for a Spot node).
    Returns:
        ``{"metadata": {"labels": {...}}, "spec": {"taints": [...]}}`` (a strategic-merge patch: a label set to
        None is removed; ``taints`` is the whole new list, present only when it changes), or None when the
        Node is as wanted. Taints whose key is a managed label and that ``wanted_taints`` lacks are removed; the
        others (the node-type taint, the node controller's) are kept in order.
    """
    def ident(t: dict[str, Any]) -> tuple[Any, str, Any]:
        return t.get("key"), t.get("value") or "", t.get("effect")

    labels: dict[str, str | None] = {k: v for k, v in wanted.items() if have_labels.get(k) != v}
    labels.update({k: None for k in MANAGED_NODE_LABELS if k in have_labels and k not in wanted})
    want = {ident(t) for t in wanted_taints}
    keep = [t for t in have_taints if t.get("key") not in MANAGED_NODE_LABELS or ident(t) in want]
    from modalscale.devenv.cluster import missing_taints

    add = missing_taints(keep, wanted_taints)
    body: dict[str, Any] = {"metadata": {"labels": labels}}
    if add or len(keep) != len(have_taints):
        body["spec"] = {"taints": keep + add}
    return body if labels or "spec" in body else None


def _cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup v1 hierarchy and of cgroup v2 on this machine."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields = post.split()
        if fields and fields[0] in ("cgroup", "cgroup2"):
            found.append(Path(pre.split()[4]))
    return found


def _make_cgroup_root(root: str) -> None:
    """Create the cgroup ``root`` (e.g. ``/modalscale-<hash>-1``) in every hierarchy: the kubelet refuses a
    ``cgroupRoot`` that does not exist. A new cpuset cgroup has no CPUs or memory nodes: copied from its parent."""
    for mount in _cgroup_mounts():
        d = mount / root.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (d / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((d.parent / f).read_text())
        ctl = mount / "cgroup.subtree_control"
        if (mount / "cgroup.controllers").exists() and ctl.exists():  # v2: hand the controllers down
            with contextlib.suppress(OSError):
                (d / "cgroup.subtree_control").write_text(
                    " ".join(f"+{c}" for c in (d / "cgroup.controllers").read_text().split()))


def cgroup_pids(root: str) -> list[int]:
    """PIDs of every process in the cgroup ``root`` or below it, in any hierarchy (ascending, no repeats)."""
    found: set[int] = set()
    for mount in _cgroup_mounts():
        top = mount / root.lstrip("/")
        for procs in top.rglob("cgroup.procs") if top.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in procs.read_text().split()}
    return sorted(found)


def _kill_cgroup(root: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in the cgroup ``root`` (and below) until none is left or ``timeout_s`` passed (a
    process may fork meanwhile); returns the PIDs killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while (pids := [p for p in cgroup_pids(root) if _pid_alive(p)]) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        time.sleep(0.05)
    return killed


def _rmdir_tree(top: Path) -> None:
    """Remove the directory ``top`` and every directory below it, deepest first, with ``rmdir`` only: a cgroup
    goes once it has no process and no child (its control files go with it); one still in use stays."""
    if not top.is_dir():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            d.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def _remove_cgroup_root(root: str) -> None:
    """Remove the (empty, once the node's processes are gone) cgroup ``root`` and everything below it, deepest
    first, in every hierarchy."""
    for mount in _cgroup_mounts():
        _rmdir_tree(mount / root.lstrip("/"))


# ---------------------------------------------------------------------------------------------- cleanup helpers
def _remove_containers(workdir: Path, log: Log, address: Path | None = None) -> set[str]:
    """Kill and delete every task and container in the ``k8s.io`` namespace (of node 0's containerd, or the one
    at ``address``); returns their netns paths."""
    ctr = ctr_command(workdir, address)
    netns: set[str] = set()
    ids = _run([*ctr, "containers", "ls", "-q"], check=False).stdout.split()
    for cid in ids:
        info = _run([*ctr, "containers", "info", cid], check=False).stdout
        with contextlib.suppress(ValueError, KeyError, TypeError):
            for ns in json.loads(info)["Spec"]["linux"]["namespaces"]:
                if ns.get("type") == "network" and ns.get("path", "").startswith(("/var/run/netns/", "/run/netns/")):
                    netns.add(ns["path"])
    for cid in ids:
        _run([*ctr, "tasks", "kill", "-s", "SIGKILL", cid], check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tasks = set(_run([*ctr, "tasks", "ls", "-q"], check=False).stdout.split())
        if not tasks & set(ids):
            break
        for cid in tasks & set(ids):
            _run([*ctr, "tasks", "rm", "-f", cid], check=False)
        time.sleep(0.2)
    for cid in ids:
        _run([*ctr, "containers", "rm", cid], check=False)
    if ids:
        log(f"Removed {len(ids)} container(s) from the real node")
    return netns


def shim_socket(address: Path, namespace: str, shim_id: str) -> Path:
    """Where a containerd 1.6 runc v2 shim listens: ``/run/containerd/s/<sha256(address/namespace/id)>``.

    The shim removes it when it exits cleanly; one killed (or left by a killed containerd) does not.
    Source: containerd v1.6 ``runtime/v2/shim/util_unix.go`` ``SocketAddress``.
    """
    digest = hashlib.sha256(f"{address}/{namespace}/{shim_id}".encode()).hexdigest()
    return Path("/run/containerd/s") / digest


def _shims_of(address: Path) -> list[tuple[int, str, str]]:
    """(pid, namespace, id) of the shims that serve the containerd at ``address``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmd = _cmdline(int(entry.name))
        if cmd and Path(cmd[0]).name.startswith("containerd-shim") and str(address) in cmd:
            args = dict(zip(cmd, cmd[1:]))
            found.append((int(entry.name), args.get("-namespace", K8S_NAMESPACE), args.get("-id", "")))
    return found


def _kill_runc_containers(runc_root: Path, log: Log) -> None:
    """SIGKILL the init process of every container runc still records under ``runc_root`` (its start time must
    match, so a reused PID is left alone), then drop the records."""
    for state in runc_root.glob("*/*/state.json"):
        try:
            info = json.loads(state.read_text())
            pid, start = int(info["init_process_pid"]), int(info["init_process_start"])
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) == start:
                os.kill(pid, signal.SIGKILL)
                log(f"killed container {state.parent.name[:12]} (init pid {pid}) left by a killed shim")
        except (OSError, ValueError, KeyError, IndexError):
            pass
        shutil.rmtree(state.parent, ignore_errors=True)


def _mounts() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, octal-escaped.
        points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]))
    return points


def mounts_under(paths: list[Path]) -> list[str]:
    """Mount points at or under any of ``paths`` (deepest first)."""
    roots = [str(p).rstrip("/") for p in paths]
    found = [m for m in _mounts() if any(m == r or m.startswith(r + "/") for r in roots)]
    return sorted(set(found), key=lambda m: -m.count("/"))


def _unmount_under(paths: list[Path], log: Log) -> None:
    for _ in range(3):
        points = mounts_under(paths)
        if not points:
            return
        for m in points:
            subprocess.run(["umount", "-l", m], capture_output=True, check=False)
    left = mounts_under(paths)
    if left:
        log(f"could not unmount {left}")


CONTAINER_LOG_LINKS = "/var/log/containers"
"""The kubelet links every container's log here (fixed path); the logs themselves are in the work dir."""
CNI_CACHE = Path("/var/lib/cni/results")
"""libcni's result cache (fixed in containerd 1.6's CRI): one file per sandbox and network."""
DEVICE_PLUGIN_DIR = KUBELET_DEVICE_PLUGIN_DIR
"""The kubelet's device-plugin socket directory (fixed path, whatever ``--root-dir`` says)."""


def _our_cni_results() -> list[Path]:
    """Cached CNI results of this node's networks (``modalscale``, CRI's ``cni-loopback``), leaving those of a
    system containerd's live sandboxes (runc state in ``/run/containerd/runc``) alone."""
    if not CNI_CACHE.is_dir():
        return []
    stale = []
    for f in CNI_CACHE.iterdir():
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if info.get("networkName") in ("modalscale", "cni-loopback") and not any(
                (Path("/run/containerd/runc") / ns / str(info.get("containerId"))).exists()
                for ns in (K8S_NAMESPACE, "default")):
            stale.append(f)
    return stale


def _cleanup_global_network(log: Log) -> None:
    """Remove the cni0 bridge, its veths and every KUBE-/CNI- iptables chain (the node's global state), CRI's
    network namespaces, stale CNI results and the kubelet's device-plugin socket."""
    ip = shutil.which("ip") or "/usr/sbin/ip"
    brif = Path(f"/sys/class/net/{CNI_BRIDGE}/brif")
    for veth in sorted(brif.iterdir()) if brif.is_dir() else []:
        subprocess.run([ip, "link", "del", veth.name], capture_output=True, check=False)
    if Path(f"/sys/class/net/{CNI_BRIDGE}").exists():
        subprocess.run([ip, "link", "del", CNI_BRIDGE], capture_output=True, check=False)
    # CRI's network namespaces (bind mounts named cni-<uuid>); only one real node runs per machine.
    for ns in sorted(Path("/var/run/netns").glob("cni-*")) if Path("/var/run/netns").is_dir() else []:
        subprocess.run(["umount", "-l", str(ns)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            ns.unlink()
    for f in _our_cni_results():
        f.unlink(missing_ok=True)
    (DEVICE_PLUGIN_DIR / "kubelet.sock").unlink(missing_ok=True)
    for d in (DEVICE_PLUGIN_DIR, DEVICE_PLUGIN_DIR.parent):
        with contextlib.suppress(OSError):
            d.rmdir()  # only when empty
    for family in ("iptables", "ip6tables"):
        save, tool = shutil.which(f"{family}-save"), shutil.which(family)
        if not save or not tool:
            continue
        dump = subprocess.run([save], capture_output=True, text=True, check=False).stdout
        for args in iptables_cleanup_commands(dump):
            subprocess.run([tool, "-w", *args], capture_output=True, check=False)
        left = [args for args in iptables_cleanup_commands(
            subprocess.run([save], capture_output=True, text=True, check=False).stdout) if "-X" in args]
        if left:
            log(f"{family}: could not remove chains {[a[-1] for a in left]}")


def _remove_kubepods_cgroups() -> None:
    """Remove the kubelet's empty ``kubepods`` cgroups (deepest first) in every v1 hierarchy or v2."""
    base = Path("/sys/fs/cgroup")
    for top in [base / "kubepods", *base.glob("*/kubepods")]:
        _rmdir_tree(top)
