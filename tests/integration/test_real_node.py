"""The real kubelet node of the session cluster: real containers (busybox built here), their logs, a CPU limit
in the pod's cgroup, a ClusterIP Service through kube-proxy, ErrImageNeverPull for an image never imported,
and ``cluster down`` leaving nothing behind; two real nodes whose pods reach each other's Services.

Timing figures (node start, pod start with the image cached) are printed, never asserted.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.realnode import (
    BUSYBOX_IMAGE,
    CNI_BRIDGE,
    NODE_NAME,
    NODE_TYPE_LABEL,
    POD_CIDR,
    RealNode,
    _our_cni_results,
    _shims_of,
    containerd_address,
    iptables_cleanup_commands,
    list_images,
    mounts_under,
    node_ip,
    real_node_placement,
    shim_socket,
)

NS = "real-node-test"


@pytest.fixture(scope="module")
def real(real_node_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster with its real node (tests/conftest.py ``real_node_cluster``)."""
    cluster = real_node_cluster
    core = client.CoreV1Api(cluster.api_client())
    try:
        core.create_namespace({"metadata": {"name": NS}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield cluster


def _pod(name: str, image: str, command: list[str], policy: str = "IfNotPresent",
         labels: dict[str, str] | None = None, ports: list[dict[str, Any]] | None = None,
         cpu: str = "500m") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "imagePullPolicy": policy, "command": command,
                                 "resources": {"limits": {"cpu": cpu, "memory": "64Mi"}}}
    if ports:
        container["ports"] = ports
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1, **real_node_placement()}}


def _running(core: client.CoreV1Api, name: str) -> Any:
    pod = core.read_namespaced_pod(name, NS)
    return pod if pod.status.phase == "Running" else None


def _delete(core: client.CoreV1Api, *names: str) -> None:
    for name in names:
        try:
            core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_node_is_ready_labelled_tainted_and_sized_below_the_machine(real: LocalCluster) -> None:
    node = client.CoreV1Api(real.api_client()).read_node(NODE_NAME)
    assert node.metadata.labels[NODE_TYPE_LABEL] == "real"
    assert "kwok.x-k8s.io/node" not in (node.metadata.annotations or {})
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [(NODE_TYPE_LABEL, "NoSchedule")]
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == [node_ip()]
    cpu_m = int(node.status.allocatable["cpu"].rstrip("m")) if node.status.allocatable["cpu"].endswith("m") \
        else int(node.status.allocatable["cpu"]) * 1000
    assert 0 < cpu_m < (os.cpu_count() or 1) * 1000
    assert int(node.status.capacity["cpu"]) == os.cpu_count()
    assert BUSYBOX_IMAGE in list_images(real.workdir)
    pids = real.real_node_status()["processes"]
    real.up(nodes=2)  # idempotent: the node's processes are left alone
    assert real.real_node_status()["processes"] == pids and all(pids.values())


def test_pod_runs_on_the_real_node_with_its_cpu_limit_and_its_logs_are_served(real: LocalCluster) -> None:
    core = client.CoreV1Api(real.api_client())
    name = f"hello-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    core.create_namespaced_pod(NS, _pod(name, BUSYBOX_IMAGE, ["sh", "-c", "echo hello from $(hostname); "
                                                                          "exec sleep 3600"]))
    try:
        pod = wait_for(lambda: _running(core, name), 120, f"pod {name} Running")
        print(f"\npod start (image cached, create -> Running): {time.monotonic() - started:.1f} s "
              f"(shared 2-core machine, load {os.getloadavg()[0]:.2f})")
        assert pod.spec.node_name == NODE_NAME
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_CIDR)
        logs = wait_for(lambda: core.read_namespaced_pod_log(name, NS), 60, f"logs of {name}")
        assert logs.strip() == f"hello from {name}"
        # limits.cpu 500m -> CFS quota 50 ms per 100 ms period in the pod's cgroup (v1, cgroupfs driver).
        quota = list(Path("/sys/fs/cgroup/cpu").glob(f"kubepods*/**/pod{pod.metadata.uid}/cpu.cfs_quota_us"))
        if quota:
            assert quota[0].read_text().strip() == "50000"
        else:
            v2 = list(Path("/sys/fs/cgroup").glob(f"kubepods*/**/pod{pod.metadata.uid}/cpu.max"))
            assert v2 and v2[0].read_text().split()[0] == "50000"
    finally:
        _delete(core, name)


def test_a_clusterip_service_reaches_a_real_pod_through_kube_proxy(real: LocalCluster) -> None:
    core = client.CoreV1Api(real.api_client())
    name = f"web-{uuid.uuid4().hex[:6]}"
    script = f"mkdir -p /www && echo served-by-{name} > /www/index.html && exec httpd -f -p 8080 -h /www"
    core.create_namespaced_pod(NS, _pod(name, BUSYBOX_IMAGE, ["sh", "-c", script],
                                        ports=[{"name": "http", "containerPort": 8080}]))
    core.create_namespaced_service(NS, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                                        "spec": {"selector": {"app": name},
                                                 "ports": [{"port": 80, "targetPort": "http"}]}})
    try:
        wait_for(lambda: _running(core, name), 120, f"pod {name} Running")
        ip = core.read_namespaced_service(name, NS).spec.cluster_ip

        def fetch() -> str | None:
            try:
                with urllib.request.urlopen(f"http://{ip}/index.html", timeout=2) as r:
                    return r.read().decode().strip()
            except OSError:
                return None  # endpoints or kube-proxy's rules not there yet

        assert wait_for(fetch, 90, f"an answer from Service {name} at {ip}:80") == f"served-by-{name}"
    finally:
        core.delete_namespaced_service(name, NS)
        _delete(core, name)


def test_an_image_never_imported_gives_err_image_never_pull(real: LocalCluster) -> None:
    core = client.CoreV1Api(real.api_client())
    name = f"noimg-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(NS, _pod(name, "docker.io/modalscale/not-imported:0", ["true"], policy="Never"))
    try:
        def waiting_reason() -> str | None:
            for cs in core.read_namespaced_pod(name, NS).status.container_statuses or []:
                if cs.state.waiting and cs.state.waiting.reason not in (None, "ContainerCreating"):
                    return str(cs.state.waiting.reason)
            return None

        assert wait_for(waiting_reason, 90, f"a waiting reason on {name}") == "ErrImageNeverPull"
    finally:
        _delete(core, name)


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    import json
    import urllib.parse

    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as r:
        return list(json.loads(r.read())["data"]["result"])


def test_prometheus_discovers_inferenceservice_pods_through_the_apiserver_like_the_podmonitor(
        real: LocalCluster, tmp_path: Path) -> None:
    """kubernetes_sd_configs (role pod) against the local apiserver: the pod with the PodMonitor's labels and a
    ``metrics`` port is scraped with ``namespace`` and ``inferenceservice`` labels; a pod without them is not."""
    from modalscale.devenv.prometheus import PodDiscovery, PrometheusProcess

    core = client.CoreV1Api(real.api_client())
    owned = {"app.kubernetes.io/managed-by": "modalscale-operator", "app.kubernetes.io/part-of": "modalscale"}
    script = "mkdir -p /www && echo 'demo_requests_total 7' > /www/metrics && exec httpd -f -p 8002 -h /www"
    port = [{"name": "metrics", "containerPort": 8002}]
    pods = {"disc-yes": {**owned, "modalscale.io/inferenceservice": "disc-demo", "app": "disc-yes"},
            "disc-no": {**owned, "app": "disc-no"}}
    for name, labels in pods.items():
        core.create_namespaced_pod(NS, _pod(name, BUSYBOX_IMAGE, ["sh", "-c", script], labels=labels, ports=port))
    prom = PrometheusProcess(tmp_path / "prom", scrape_interval_s=1.0,
                             discovery=PodDiscovery.for_cluster(real, namespaces=(NS,)))
    try:
        for name in pods:
            wait_for(lambda name=name: _running(core, name), 120, f"pod {name} Running")
        prom.start()
        series = wait_for(lambda: _query(prom.url, "demo_requests_total"), 90, "the discovered pod's series")
        assert len(series) == 1
        labels = series[0]["metric"]
        assert (labels["namespace"], labels["inferenceservice"], labels["pod"]) == (NS, "disc-demo", "disc-yes")
        assert series[0]["value"][1] == "7"
        up = _query(prom.url, 'up{job="inferenceservice-pods"}')
        assert [(u["metric"]["pod"], u["value"][1]) for u in up] == [("disc-yes", "1")]
    finally:
        prom.stop()
        _delete(core, *pods)


# ---------------------------------------------------------------------------------------------- cluster down
CLEAN = {"processes": [], "mounts": [], "netns": [], "chains": [], "veths": [], "bridge": False,
         "socket": False, "log_links": [], "cni_results": 0, "runc_state": [], "cgroups": [],
         "node_netns": [], "node_links": [], "node_routes": [], "node_cgroups": [], "node_dirs": []}
"""What :func:`_left_behind` finds after ``cluster down``."""


def _left_behind(workdir: Path) -> dict[str, Any]:
    """Everything a real node (node 0, or any other of :mod:`modalscale.devenv.nodelayout`) could leave on the
    machine, by kind (empty lists when clean)."""
    from modalscale.devenv.nodelayout import MAX_REAL_NODES

    extra = [RealNode(workdir, index=i) for i in range(1, MAX_REAL_NODES)]
    addresses = [str(containerd_address(workdir)), *(str(n.address) for n in extra)]
    procs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmd or any(a in cmd for a in addresses):
            procs.append(cmd.replace("\0", " ")[:200])
    netns = sorted(p.name for p in Path("/var/run/netns").glob("cni-*")) if Path("/var/run/netns").is_dir() else []
    chains = []
    for save in ("iptables-save", "ip6tables-save"):
        if shutil.which(save):
            dump = subprocess.run([save], capture_output=True, text=True, check=False).stdout
            chains += [c[-1] for c in iptables_cleanup_commands(dump) if c[2] == "-X"]
    veths = [p.name for p in Path("/sys/class/net").iterdir()
             if p.name.startswith("veth") and (p / "brport").exists()]
    kubelet_root = RealNode(workdir).kubelet_root
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=False).stdout
    cgroup_mounts = [Path(d) for d in Path("/sys/fs/cgroup").iterdir() if d.is_dir()] + [Path("/sys/fs/cgroup")]
    return {"processes": procs, "mounts": mounts_under([workdir, kubelet_root]), "netns": netns, "chains": chains,
            "veths": veths, "bridge": Path(f"/sys/class/net/{CNI_BRIDGE}").exists(),
            "socket": containerd_address(workdir).parent.exists() or kubelet_root.exists(),
            "log_links": [p.name for p in Path("/var/log/containers").glob("*.log")
                          if os.readlink(p).startswith(str(workdir))] if Path("/var/log/containers").is_dir() else [],
            "cni_results": len(_our_cni_results()),
            "runc_state": [p.name for p in RealNode(workdir).runc_root.glob("*/*")],
            "cgroups": [str(p) for p in [Path("/sys/fs/cgroup/kubepods"), *Path("/sys/fs/cgroup").glob("*/kubepods")]
                        if p.exists()],
            # Nodes 1.. : their network namespaces, the machine's end of their veths, the routes to their pods,
            # their cgroup roots, containerd sockets and kubelet roots (their mounts and iptables chains live in
            # their own namespaces, which go with the last process in them: "processes" and "node_netns").
            "node_netns": [str(n.layout.netns_path) for n in extra if n.layout.netns_path
                           and (n.layout.netns_path.exists() or mounts_under([n.layout.netns_path]))],
            "node_links": [n.layout.veth_host for n in extra if Path(f"/sys/class/net/{n.layout.veth_host}").exists()],
            "node_routes": [line for line in routes.splitlines()
                            if any(line.startswith(n.layout.pod_cidr + " ") for n in extra)],
            "node_cgroups": [str(m / str(n.layout.cgroup_root).lstrip("/")) for n in extra for m in cgroup_mounts
                             if (m / str(n.layout.cgroup_root).lstrip("/")).exists()],
            "node_dirs": [str(p) for n in extra for p in (n.address.parent, n.kubelet_root.parent) if p.exists()]}


def test_cluster_down_leaves_no_container_mount_netns_veth_bridge_chain_or_process(
        real: LocalCluster, tmp_path: Path) -> None:
    """A private cluster takes the machine's real node (the session's is stopped, then started again), runs a
    pod and a Service, and ``down`` removes everything."""
    real.stop_real_node()
    private = LocalCluster(tmp_path / "private", log=lambda m: print(m, flush=True))
    try:
        try:
            started = time.monotonic()
            private.up(nodes=1, real_node=True)
            print(f"\nreal node start with a fresh control plane: {time.monotonic() - started:.1f} s")
            assert private.has_real_node
            core = client.CoreV1Api(private.api_client())
            core.create_namespace({"metadata": {"name": NS}})
            core.create_namespaced_pod(NS, _pod("leftover", BUSYBOX_IMAGE, ["sleep", "3600"],
                                                ports=[{"name": "http", "containerPort": 8080}]))
            core.create_namespaced_service(NS, {"apiVersion": "v1", "kind": "Service",
                                                "metadata": {"name": "leftover"},
                                                "spec": {"selector": {"app": "leftover"}, "ports": [{"port": 80}]}})
            wait_for(lambda: _running(core, "leftover"), 120, "pod leftover Running")
            during = _left_behind(private.workdir)
            # The check can see each kind: while the pod runs, every one of them is there.
            assert during["processes"] and during["mounts"] and during["netns"] and during["veths"], during
            assert during["bridge"] and during["socket"], during
            assert during["log_links"] and during["cni_results"] and during["runc_state"], during
            assert during["cgroups"], during
            assert any(c.startswith("KUBE-") for c in during["chains"]), during
            assert any(c.startswith("CNI-") for c in during["chains"]), during
            ctr = ["ctr", "--address", str(containerd_address(private.workdir)), "-n", "k8s.io"]
            assert subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True).stdout.split()
        finally:
            stopped = private.down()
        assert {"containerd", "kubelet", "kube-proxy", "kube-apiserver", "etcd"} <= set(stopped)
        after = _left_behind(private.workdir)
        assert after == CLEAN
        assert not Path("/var/lib/kubelet/device-plugins/kubelet.sock").exists()
        assert not RealNode(private.workdir).any_running()
    finally:
        # The session cluster gets its real node back for the tests after this one.
        real.up(nodes=2, real_node=True)
    assert real.has_real_node


def test_a_crashed_node_is_cleaned_up_by_the_next_cluster_that_takes_the_machine(
        real: LocalCluster, tmp_path: Path) -> None:
    """Cluster A's containerd, kubelet and kube-proxy are SIGKILLed with a pod running (its shim, netns, veth and
    mounts stay); cluster B then takes the machine's real node, runs a pod, and after both ``down`` nothing of
    either is left."""
    import signal

    real.stop_real_node()
    a = LocalCluster(tmp_path / "a", log=lambda m: print(m, flush=True))
    b = LocalCluster(tmp_path / "b", log=lambda m: print(m, flush=True))
    try:
        try:
            a.up(nodes=0, real_node=True)
            core_a = client.CoreV1Api(a.api_client())
            core_a.create_namespace({"metadata": {"name": NS}})
            core_a.create_namespaced_pod(NS, _pod("crashed", BUSYBOX_IMAGE, ["sleep", "3600"]))
            wait_for(lambda: _running(core_a, "crashed"), 120, "pod crashed Running on A")
            sockets = [shim_socket(containerd_address(a.workdir), ns, sid)
                       for _pid, ns, sid in _shims_of(containerd_address(a.workdir))]
            assert sockets and all(p.exists() for p in sockets)  # where containerd 1.6 puts them
            for pid in a.real_node_status()["processes"].values():
                os.kill(int(pid), signal.SIGKILL)
            wait_for(lambda: not RealNode(a.workdir).any_running(), 30, "A's node processes gone")
            def shims() -> list[str]:
                return [p for p in _left_behind(a.workdir)["processes"] if "containerd-shim" in p]

            assert shims(), "the crashed node's shim keeps running"

            b.up(nodes=0, real_node=True)
            assert b.has_real_node, b.real_node_status()
            assert shims() == []  # B removed A's shim
            assert not any(p.exists() for p in sockets)
            core_b = client.CoreV1Api(b.api_client())
            core_b.create_namespace({"metadata": {"name": NS}})
            core_b.create_namespaced_pod(NS, _pod("after", BUSYBOX_IMAGE, ["sleep", "3600"]))
            wait_for(lambda: _running(core_b, "after"), 120, "pod after Running on B")
        finally:
            b.down()
            a.down()
        assert _left_behind(a.workdir) == CLEAN
        assert _left_behind(b.workdir) == CLEAN
    finally:
        real.up(nodes=2, real_node=True)
    assert real.has_real_node


def _in_namespaces(namespaces: set[str]) -> list[int]:
    """PIDs of the processes in any of ``namespaces`` (``readlink /proc/<pid>/ns/<kind>`` values)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for kind in ("mnt", "net"):
            try:
                if os.readlink(entry / "ns" / kind) in namespaces:
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return found


def test_two_real_nodes_serve_each_others_pods_through_services_and_down_leaves_nothing(
        real: LocalCluster, tmp_path: Path) -> None:
    """``--real-nodes 2`` (node 1 Spot, priced as an L4): a pod on each node fetches, through a ClusterIP Service, a
    page served by a pod on the other node (node 0 -> node 1 through the machine's kube-proxy, node 1 -> node 0
    through node 1's own); node 1's pods have its pod CIDR and its own cgroup root; ``down`` leaves nothing of
    either node."""
    from modalscale.api.capacity import CAPACITY_TYPE_LABEL, SPOT_TOLERATION

    real.stop_real_node()
    two = LocalCluster(tmp_path / "two", log=lambda m: print(m, flush=True))
    names = ["real-node-0", "real-node-1"]
    node_ns: set[str] = set()
    try:
        try:
            started = time.monotonic()
            two.up(nodes=0, real_node=True, real_nodes=2,
                   real_node_labels={1: {CAPACITY_TYPE_LABEL: "spot", "nvidia.com/gpu.product": "nvidia-l4"}})
            print(f"\ntwo real nodes Ready with a fresh control plane: {time.monotonic() - started:.1f} s")
            assert two.has_real_node and two.real_node_names == names
            core = client.CoreV1Api(two.api_client())
            n1 = core.read_node("real-node-1")
            assert n1.metadata.labels[CAPACITY_TYPE_LABEL] == "spot"
            assert n1.metadata.labels["nvidia.com/gpu.product"] == "nvidia-l4"
            assert {(t.key, t.value) for t in n1.spec.taints} == {(NODE_TYPE_LABEL, "real"),
                                                                   (CAPACITY_TYPE_LABEL, "spot")}
            assert [a.address for a in n1.status.addresses if a.type == "InternalIP"] == ["10.87.1.2"]
            n0 = core.read_node("real-node-0")
            assert CAPACITY_TYPE_LABEL not in n0.metadata.labels
            core.create_namespace({"metadata": {"name": NS}})
            script = "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"
            ips = {}
            for i, node in enumerate(names):
                # 200m: two pods on each node fit its share of a 2-core machine (750m: node_reserve).
                pod = _pod(f"web-{i}", BUSYBOX_IMAGE, ["sh", "-c", script],
                           ports=[{"name": "http", "containerPort": 8080}], cpu="200m")
                pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
                pod["spec"]["tolerations"].append(dict(SPOT_TOLERATION))
                core.create_namespaced_pod(NS, pod)
                svc = core.create_namespaced_service(NS, {
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"web-{i}"},
                    "spec": {"selector": {"app": f"web-{i}"}, "ports": [{"port": 80, "targetPort": "http"}]}})
                ips[i] = svc.spec.cluster_ip
            for i, node in enumerate(names):  # the client on node i fetches the Service of the other node's pod
                # busybox-static's wget segfaults on these machines (on the host too); its nc works.
                fetch = (f"until printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ips[1 - i]} 80 "
                         "| grep served-by; do sleep 1; done; exec sleep 3600")
                pod = _pod(f"client-{i}", BUSYBOX_IMAGE, ["sh", "-c", fetch], cpu="200m")
                pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
                pod["spec"]["tolerations"].append(dict(SPOT_TOLERATION))
                core.create_namespaced_pod(NS, pod)
            for i in range(2):
                web = wait_for(lambda i=i: _running(core, f"web-{i}"), 120, f"pod web-{i} Running")
                assert web.spec.node_name == names[i]
                cidr = "10.88.0.0/16" if i == 0 else "10.89.0.0/16"
                assert ipaddress.ip_address(web.status.pod_ip) in ipaddress.ip_network(cidr)
            for i in range(2):
                # The client retries until an answer: a try before kube-proxy has the Service's endpoints is
                # refused, and nc's error lands in the same log (it failed a run once), so wait for the answer.
                # Its log cannot be read while the container is being created (400 BadRequest; it failed a
                # clean-clone run at 1e6a6d9 under load): that is "not yet" too.
                def answered(i: int = i) -> list[str] | None:
                    try:
                        lines = core.read_namespaced_pod_log(f"client-{i}", NS).splitlines()
                    except ApiException as exc:  # "container ... is waiting to start: ContainerCreating"
                        if exc.status == 400 and "waiting to start" in str(exc.body):
                            return None
                        raise
                    return [line for line in lines if line.startswith("served-by")] or None

                served = wait_for(answered, 120, f"client-{i}'s answer")
                assert served == [f"served-by-web-{1 - i}"], (i, served)
            print(f"both cross-node Service answers {time.monotonic() - started:.1f} s after up began")
            uid1 = core.read_namespaced_pod("web-1", NS).metadata.uid
            root1 = RealNode(two.workdir, index=1).layout.cgroup_root
            assert list(Path("/sys/fs/cgroup/cpu").glob(f"{str(root1).lstrip('/')}/kubepods*/**/pod{uid1}")), root1
            during = _left_behind(two.workdir)
            assert during["node_netns"] and during["node_links"] and during["node_routes"], during
            assert during["node_cgroups"] and during["node_dirs"] and during["processes"], during
            # Node 1's mounts (rootfs overlays, volumes, pods' netns, the device-plugin dir) are in its own mount
            # namespace, invisible here: after down no process may be left in it or in its network namespace.
            pid1 = two.real_node_status()["nodes"]["real-node-1"]["containerd"]
            node_ns = {os.readlink(f"/proc/{pid1}/ns/{k}") for k in ("mnt", "net")}
            assert not node_ns & {os.readlink(f"/proc/self/ns/{k}") for k in ("mnt", "net")}
            assert len(_in_namespaces(node_ns)) >= 4  # containerd, kubelet, kube-proxy, the shims and containers
        finally:
            stopped = two.down()
        assert stopped.count("kubelet") == 2 and stopped.count("containerd") == 2
        assert _left_behind(two.workdir) == CLEAN
        assert _in_namespaces(node_ns) == []
        assert not RealNode(two.workdir, index=1).any_running()
    finally:
        real.up(nodes=2, real_node=True)
    assert real.has_real_node


def test_up_again_keeps_relabels_and_shrinks_the_real_nodes_images_reach_each_and_a_failed_node_is_known(
        real: LocalCluster, tmp_path: Path) -> None:
    """Two real nodes (node 1 Spot, priced as an L4), then ``up`` again: with no real-node argument both nodes stay
    recorded and untouched; with no labels node 1 loses its Spot and GPU labels and its Spot taint; with one node
    node 1 goes (processes, Node object, namespace) and node 0 gets the whole share back. Each node's allocatable
    is its share of the machine; an imported image is in each node's containerd. Last, node 1 cannot start (a
    file where its state dir goes): ``up`` fails naming it, node 0 keeps running and is recorded, and ``down`` leaves
    nothing."""
    from kubernetes.utils import parse_quantity

    from modalscale.api.capacity import CAPACITY_TYPE_LABEL
    from modalscale.devenv.cluster import ClusterError
    from modalscale.devenv.images import BuiltImage, import_into_cluster
    from modalscale.devenv.realnode import (
        GPU_PRODUCT_LABEL,
        _memory_bytes,
        ensure_node_images,
        node_addresses,
        node_reserve,
    )

    real.stop_real_node()
    c = LocalCluster(tmp_path / "again", log=lambda m: print(m, flush=True))
    names = ["real-node-0", "real-node-1"]
    one = node_reserve(os.cpu_count() or 1, _memory_bytes())
    pool_m = (os.cpu_count() or 1) * 1000 - int(one["kubeReserved"]["cpu"][:-1])
    try:
        try:
            c.up(nodes=0, real_node=True, real_nodes=2,
                 real_node_labels={1: {CAPACITY_TYPE_LABEL: "spot", GPU_PRODUCT_LABEL: "nvidia-l4"}})
            core = client.CoreV1Api(c.api_client())

            def cpu_m(node: str) -> int:
                return int(parse_quantity(core.read_node(node).status.allocatable["cpu"]) * 1000)

            # Each node its share: together no more than the one node's pool (they used to report it each).
            assert [cpu_m(n) for n in names] == [pool_m // 2] * 2
            mem = [parse_quantity(core.read_node(n).status.allocatable["memory"]) for n in names]
            assert sum(mem) <= _memory_bytes() - parse_quantity(one["kubeReserved"]["memory"]), mem

            # An image reaches every node's containerd (node 1 used to have only pause and busybox).
            tar = ensure_node_images()[BUSYBOX_IMAGE]
            image = BuiltImage(name="import-test", ref="modalscale/import-test:1",
                               full_ref="docker.io/modalscale/import-test:1", archive=str(tar), size_bytes=0,
                               unpacked_bytes=0, input_hash="", build_s=0.0, cached=True)
            import_into_cluster(image, c.workdir, log=lambda m: print(m, flush=True))
            addresses = node_addresses(c.workdir)
            assert addresses == [containerd_address(c.workdir), RealNode(c.workdir, index=1).address]
            assert all(image.full_ref in list_images(c.workdir, a) for a in addresses)

            # `up` again without real-node arguments: both nodes stay, recorded, untouched, still labelled.
            before = c.real_node_status()
            c.up(nodes=0)
            assert c.real_node_names == names and c.real_node_status() == before and c.has_real_node
            assert core.read_node("real-node-1").metadata.labels[CAPACITY_TYPE_LABEL] == "spot"

            # Labels no longer asked for go, with the Spot taint.
            c.up(nodes=0, real_nodes=2, real_node_labels={})
            n1 = core.read_node("real-node-1")
            assert CAPACITY_TYPE_LABEL not in n1.metadata.labels and GPU_PRODUCT_LABEL not in n1.metadata.labels
            assert [(t.key, t.value) for t in n1.spec.taints] == [(NODE_TYPE_LABEL, "real")]
            assert c.has_real_node

            # One node: node 1 goes, node 0's kubelet restarts with the whole pool.
            c.up(nodes=0, real_nodes=1)
            assert c.real_node_names == ["real-node-0"] and c.has_real_node
            with pytest.raises(ApiException) as gone:
                core.read_node("real-node-1")
            assert gone.value.status == 404
            assert not RealNode(c.workdir, index=1).any_running()
            left = _left_behind(c.workdir)
            assert {k: left[k] for k in ("node_netns", "node_links", "node_routes", "node_cgroups", "node_dirs")} \
                == {k: [] for k in ("node_netns", "node_links", "node_routes", "node_cgroups", "node_dirs")}, left
            wait_for(lambda: cpu_m("real-node-0") == pool_m or None, 60, "node 0's allocatable back to the pool")

            # Node 1 fails to start (a file where its containerd state dir goes, which its own cleanup leaves):
            # `up` names it; node 0 runs and every node stays recorded for `down`.
            shutil.rmtree(c.workdir / "node-1" / "containerd")
            (c.workdir / "node-1" / "containerd").write_text("not a directory")
            with pytest.raises(ClusterError, match="real-node-1 did not start: NotADirectoryError"):
                c.up(nodes=0, real_nodes=2)
            assert c.real_node_names == names and c.real_node_count == 2
            st = c.real_node_status()
            assert all(st["processes"].values()) and not any(st["nodes"]["real-node-1"].values()), st
            assert not c.has_real_node
        finally:
            stopped = c.down()
        assert "kubelet" in stopped
        assert _left_behind(c.workdir) == CLEAN
    finally:
        real.up(nodes=2, real_node=True)
    assert real.has_real_node
