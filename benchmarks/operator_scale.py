"""Benchmark (not a test): N InferenceServices on M fake GPU nodes against the real local control plane.

Prints: time until all are Ready, reconcile duration p50/p99 (from the operator's own histogram), API writes per
object (the operator's counter) during creation and during an idle minute, and the operator's peak RSS.

Usage: .venv/bin/python benchmarks/operator_scale.py [--services 500] [--nodes 50] [--idle-s 60]
The baseline printed beside it is the same run's first-service latency (one object alone), for a ratio.

``--startup [--rounds 3]`` measures instead what a newcomer waits for, on a small control plane with only ``crds/``
installed: time from starting ``modalscale operator`` to the first reconcile of an InferenceService that already
exists, peering on (the default) against a standalone operator run side by side in alternating rounds (plus a second
standalone column, the A/A row), and the operator's idle RSS. It also times importing the operator's modules in a
fresh interpreter, against the same import with torch imported first (what the operator paid before it stopped
importing torch). With ``--rss-services N`` (default 100) it then reads the idle RSS of a standalone operator with N
Fixed InferenceServices (the service-time model's stack never loaded) and with N Predictive ones whose
``costModelRef`` names a real artifact (every one ``CostModelLoaded=True``: scikit-learn, SciPy and skops loaded).

``--import-breakdown`` prints the RSS each library adds on import, each in a fresh interpreter (the dev venv's
versions), and what importing the operator's modules costs without and with the service-time model decoded.

Every cluster here is KWOK-only (``real_node=False``): the machine's one real kubelet node is never taken.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.provenance import code_version

REPO = Path(__file__).resolve().parents[1]
RESYNC_S = 30.0
"""The operator's resync interval in the N-service run before the child caches, s (``--resync-s`` overrides it)."""


def isvc(name: str, service_time_model: str | None = None) -> dict[str, Any]:
    """A one-GPU InferenceService; Fixed at 1 replica, or Predictive with ``costModelRef`` ``service_time_model``."""
    body: dict[str, Any] = {
        "apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": name},
        "spec": {"resources": {"cpu": "100m", "memory": "256Mi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                 "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2},
                 # The direct Service, as the figures in docs/benchmarks.md were measured (the gateway, on by
                 # default since issue 19, adds 7 objects per service).
                 "gateway": {"enabled": False}}}
    if service_time_model:
        body["spec"]["model"] = {"costModelRef": {"name": service_time_model}}
        body["spec"]["scaling"] = {"mode": "Predictive", "minReplicas": 1, "maxReplicas": 2}
    return body


def ready_count(custom: client.CustomObjectsApi, ns: str) -> int:
    items = custom.list_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices")["items"]
    return sum(1 for o in items for c in (o.get("status") or {}).get("conditions") or []
               if c["type"] == "Ready" and c["status"] == "True")


def reconciled_count(custom: client.CustomObjectsApi, ns: str) -> int:
    items = custom.list_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices")["items"]
    return sum(1 for o in items if (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"])


def reconcile_buckets(op: OperatorProcess) -> list[tuple[float, float]]:
    """The operator's InferenceService reconcile-duration histogram: cumulative ``(le seconds, count)``, sorted."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    buckets: list[tuple[float, float]] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "modalscale_reconcile_duration_seconds_bucket" and s.labels.get("kind") == "InferenceService":
                buckets.append((float(s.labels["le"]), s.value))
    return sorted(buckets)


def bucket_quantile(buckets: list[tuple[float, float]], q: float,
                    since: list[tuple[float, float]] | None = None) -> float:
    """Upper bound of the bucket that holds quantile ``q`` (of the reconciles after ``since``, when given), s."""
    before = dict(since or [])
    counts = [(le, count - before.get(le, 0.0)) for le, count in buckets]
    total = counts[-1][1] if counts else 0
    for le, count in counts:
        if total and count >= q * total:
            return le
    return float("nan")


def over(buckets: list[tuple[float, float]], le_s: float) -> float:
    """Observations above the bucket bound ``le_s`` (one of the histogram's bounds), from cumulative buckets."""
    counts = dict(buckets)
    return buckets[-1][1] - counts[le_s] if buckets else 0.0


def apiserver_requests(api: Any) -> dict[str, float]:
    """kube-apiserver's ``apiserver_request_total`` summed by verb (``GET``, ``LIST``, ``WATCH``, ``POST``, ...),
    every client together, read from its ``/metrics``. In these KWOK-only clusters the controllers read through their
    informers (one LIST and WATCH per kind), so GETs and LISTs beyond those are the operator's."""
    from prometheus_client.parser import text_string_to_metric_families

    method, url, headers, _body, _post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers)
    resp.read()
    totals: dict[str, float] = {}
    for fam in text_string_to_metric_families(resp.data.decode()):
        for s in fam.samples:
            if s.name == "apiserver_request_total":
                verb = s.labels.get("verb", "")
                totals[verb] = totals.get(verb, 0.0) + s.value
    return totals


def reads(before: dict[str, float], after: dict[str, float]) -> float:
    """GET and LIST requests between two :func:`apiserver_requests` readings."""
    return sum(after.get(v, 0.0) - before.get(v, 0.0) for v in ("GET", "LIST"))


def cpu_s(pid: int) -> float:
    """CPU time (user + system) the process has used, s (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def current_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


IMPORT_PROBE = """
import resource, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "with-torch":
    import torch
import kopf
import modalscale.cli
modalscale.cli.build_parser(["operator"])
from modalscale.operator import handlers
from modalscale.operator.autoscale import handlers as autoscale_handlers
from modalscale.operator.budget import handlers as budget_handlers
from modalscale.operator.settings import Settings
handlers.register(kopf.OperatorRegistry(), Settings())
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "torch" in sys.modules)
"""


BREAKDOWN_PROBE = """
import importlib, json, sys
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
before = rss_mb()
if sys.argv[1] == "operator" or sys.argv[1] == "operator+model":
    import base64
    import kopf
    import modalscale.cli
    modalscale.cli.build_parser(["operator"])
    from prometheus_client import start_http_server
    from modalscale.operator.handlers import register
    from modalscale.operator.deps import build_deps
    from modalscale.operator.settings import Settings
    register(kopf.OperatorRegistry(), Settings())
    build_deps(Settings())
    if sys.argv[1] == "operator+model":
        from modalscale.operator.autoscale.model import decode_service_time_model
        cm = {"binaryData": {"model.skops": base64.b64encode(open(sys.argv[2], "rb").read()).decode()}}
        assert decode_service_time_model(cm, "cm", "model.skops")[1].loaded
elif sys.argv[1] != "python":
    for name in sys.argv[1].split("+"):
        importlib.import_module(name)
heavy = ("sklearn", "scipy", "skops", "pandas", "torch", "numpy")
print(json.dumps({"before": before, "after": rss_mb(),
                  "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(heavy))}))
"""

BREAKDOWN_LIBRARIES = ("numpy", "scipy.special", "sklearn", "skops.io", "pandas", "kopf", "kubernetes", "aiohttp",
                       "pydantic", "httpx", "requests", "prometheus_client",
                       "prometheus_api_client.prometheus_connect", "yaml", "modalscale.autoscaler.policy",
                       "modalscale.autoscaler.regressor")


def service_time_model_artifact(path: Path) -> Path:
    """A small additive service-time model artifact (what ``modalscale profile`` writes), at ``path``."""
    from modalscale.autoscaler.features import features_from_mapping
    from modalscale.autoscaler.profile_data import generate_profile
    from modalscale.autoscaler.regressor import ServiceTimeRegressor, dumps_model

    profile = generate_profile(300, random_state=3)
    model = ServiceTimeRegressor(kind="additive").fit(features_from_mapping(profile), profile["service_ms"])
    path.write_bytes(dumps_model(model))
    return path


def import_breakdown(rounds: int) -> None:
    """RSS added by importing each library alone, and by the operator's modules, each in a fresh interpreter."""
    import importlib.util
    import json

    with tempfile.TemporaryDirectory(prefix="opimports-") as tmp:
        artifact = service_time_model_artifact(Path(tmp) / "model.skops")
        kubeconfig = Path(tmp) / "kubeconfig"  # build_deps reads one; nothing connects to it
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODALSCALE_")}
        env["KUBECONFIG"] = str(kubeconfig)
        print(f"RSS added by importing (fresh interpreter each, median of {rounds}; a library's figure includes "
              "what it imports, so the rows overlap):")
        for what in ("python", *BREAKDOWN_LIBRARIES, "operator", "operator+model"):
            top = what.split("+")[0].split(".")[0]
            if what not in ("python", "operator", "operator+model") and importlib.util.find_spec(top) is None:
                print(f"  {what:42s} not installed")
                continue
            deltas, totals, heavy = [], [], []
            for _ in range(rounds):
                out = subprocess.run([sys.executable, "-c", BREAKDOWN_PROBE, what, str(artifact)], capture_output=True,
                                     text=True, check=True, cwd=REPO, env=env).stdout
                result = json.loads(out.strip().splitlines()[-1])
                deltas.append(result["after"] - result["before"])
                totals.append(result["after"])
                heavy = result["heavy"]
            print(f"  {what:42s} +{statistics.median(deltas):6.1f} MB  (process {statistics.median(totals):6.1f} MB; "
                  f"heavy libraries loaded: {', '.join(heavy) or 'none'})")


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def import_rounds(rounds: int) -> None:
    """Import time and peak RSS of the operator's modules in a fresh interpreter, with and without torch."""
    runs: dict[str, list[tuple[float, float]]] = {"without-torch": [], "with-torch": [], "without-torch (A/A)": []}
    for _ in range(rounds):
        for label in runs:
            out = subprocess.run([sys.executable, "-c", IMPORT_PROBE, label.split()[0]], capture_output=True,
                                 text=True, check=True, cwd=REPO).stdout.split()
            runs[label].append((float(out[0]), float(out[1])))
            assert out[2] == str(label.startswith("with-")), f"torch imported: {out[2]} for {label}"
    print("import of the operator's modules (fresh interpreter; what `modalscale operator` loads):")
    base_s = statistics.median(t for t, _ in runs["without-torch"])
    base_mb = statistics.median(m for _, m in runs["without-torch"])
    for label, vals in runs.items():
        s_, mb = [t for t, _ in vals], [m for _, m in vals]
        print(f"  {label:22s} time s {spread(s_)}  peak RSS MB {spread(mb)}  ratio to without-torch: "
              f"time {statistics.median(s_) / base_s:.2f}x, RSS {statistics.median(mb) / base_mb:.2f}x")


def services_rss(cluster: LocalCluster, api: Any, tmp: Path, n: int, idle_s: float) -> None:
    """Idle RSS of a standalone operator with ``n`` Fixed services, then (a fresh operator) ``n`` Predictive ones
    whose service-time model is loaded. Each operator watches only its own namespace."""
    import base64
    import math

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    artifact = service_time_model_artifact(tmp / "model.skops")

    def items(ns: str) -> list[dict[str, Any]]:
        return list(custom.list_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices")["items"])

    def reconciled(ns: str) -> bool:
        objs = items(ns)
        return len(objs) == n and all((o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
                                      for o in objs)

    def models_loaded(ns: str) -> bool:
        objs = items(ns)
        return len(objs) == n and all(any(c["type"] == "CostModelLoaded" and c["status"] == "True"
                                          for c in (o.get("status") or {}).get("conditions") or []) for o in objs)

    print(f"idle RSS of a standalone operator with {n} InferenceServices ({idle_s:.0f} s after the last was done; "
          f"{math.ceil(2 * n / 16)} extra KWOK nodes):")
    for label, ns, predictive in ((f"{n} Fixed (no service-time model)", "rss-fixed", False),
                                  (f"{n} Predictive, model loaded", "rss-predictive", True)):
        core.create_namespace({"metadata": {"name": ns}})
        if predictive:
            core.create_namespaced_config_map(ns, {"metadata": {"name": "service-time"}, "binaryData": {
                "model.skops": base64.b64encode(artifact.read_bytes()).decode()}})
        for i in range(n):
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices",
                                                   isvc(f"svc-{i:04d}", "service-time" if predictive else None))
        op = OperatorProcess(cluster.kubeconfig, tmp / f"operator-{ns}.log",
                             {"MODALSCALE_STANDALONE": "true", "MODALSCALE_NAMESPACES": ns}, resync_s=30.0)
        try:
            t0 = time.monotonic()
            wait_for(lambda: reconciled(ns), 900, f"{n} services reconciled in {ns}", 1.0)
            if predictive:
                wait_for(lambda: models_loaded(ns), 900, f"CostModelLoaded=True on {n} services in {ns}", 1.0)
            done_s = time.monotonic() - t0
            time.sleep(idle_s)
            maps = Path(f"/proc/{op.proc.pid}/maps").read_text()
            native = [m for m in ("sklearn", "scipy") if f"/{m}/" in maps] or ["none"]
            print(f"  {label:36s} RSS {current_rss_mb(op.proc.pid):.0f} MB, peak {rss_mb(op.proc.pid):.0f} MB "
                  f"(done after {done_s:.1f} s; native libraries of sklearn/scipy mapped: {', '.join(native)})")
        finally:
            op.stop()


def startup_rounds(rounds: int, idle_s: float, rss_services: int = 0) -> None:
    """Time from process start to the first reconcile, peering on against standalone, and idle RSS.

    "peering after SIGKILL" starts right after a peering operator was killed (its record left in the peering
    object, alive for one lifetime): with random priorities that start waited up to 30 s whenever the dead one had
    drawn the higher number.
    """
    standalone = {"MODALSCALE_STANDALONE": "true"}
    variants: dict[str, tuple[dict[str, str], bool]] = {
        "standalone": (standalone, False), "peering": ({}, False), "peering after SIGKILL": ({}, True),
        "standalone (A/A)": (standalone, False)}
    first_s: dict[str, list[float]] = {k: [] for k in variants}
    idle_mb: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory(prefix="opstart-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", log=lambda _m: None)
        try:
            cluster.up(nodes=1, gpus_per_node=16, gpu_type="nvidia-l4", real_node=False)
            api = cluster.api_client()
            install_crds(api, REPO / "crds")  # crds/ only, as a newcomer applies it (kopf's peering CRDs included)
            custom = client.CustomObjectsApi(api)

            def reconciled(name: str) -> bool:
                obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", "default", "inferenceservices",
                                                          name)
                return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]

            def create(name: str) -> None:
                custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "default", "inferenceservices",
                                                       isvc(name))

            for r in range(rounds):
                for v, (label, (env, after_kill)) in enumerate(variants.items()):
                    name = f"first-{r}-{v}"
                    if after_kill:
                        create(f"{name}-pre")
                        pre = OperatorProcess(cluster.kubeconfig, Path(tmp) / f"operator-{name}-pre.log", env,
                                              resync_s=30.0)
                        wait_for(lambda: reconciled(f"{name}-pre"), 300, "the predecessor's reconcile", 0.05)
                        pre.kill()
                    create(name)
                    t0 = time.monotonic()
                    op = OperatorProcess(cluster.kubeconfig, Path(tmp) / f"operator-{name}.log", env, resync_s=30.0)
                    try:
                        wait_for(lambda: reconciled(name), 300, f"first reconcile of {name} ({label})", 0.05)
                        first_s[label].append(time.monotonic() - t0)
                        time.sleep(idle_s)
                        idle_mb[label].append(current_rss_mb(op.proc.pid))
                    finally:
                        op.stop()
            print("time from starting `modalscale operator` to the first reconcile (1 InferenceService already there):")
            base = statistics.median(first_s["standalone"])
            for label in variants:
                print(f"  {label:22s} s {spread(first_s[label])}  ratio to standalone "
                      f"{statistics.median(first_s[label]) / base:.2f}x;  idle RSS after {idle_s:.0f} s: MB "
                      f"{spread(idle_mb[label])}")
            if rss_services:
                import math

                cluster.ensure_gpu_nodes(math.ceil(2 * rss_services / 16), gpus_per_node=16, gpu_type="nvidia-l4",
                                         prefix="rss-node-")
                services_rss(cluster, api, Path(tmp), rss_services, idle_s)
        finally:
            cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--keep-log", type=Path, default=None, help="copy the operator's log there at the end")
    ap.add_argument("--resync-s", type=float, default=RESYNC_S,
                    help="the operator's MODALSCALE_RESYNC_INTERVAL_SECONDS in the N-service run")
    ap.add_argument("--startup", action="store_true",
                    help="measure time to first reconcile and idle RSS instead of the N-service run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each variant in --startup mode")
    ap.add_argument("--startup-idle-s", type=float, default=10.0,
                    help="--startup mode: seconds after the first reconcile before the idle RSS is read")
    ap.add_argument("--rss-services", type=int, default=100,
                    help="--startup mode: then the idle RSS with this many Fixed, and as many Predictive services "
                         "with a loaded service-time model (0: skip)")
    ap.add_argument("--import-breakdown", action="store_true",
                    help="print the RSS each library adds on import (fresh interpreter each) and stop")
    args = ap.parse_args()
    print(f"git {code_version()}; load average before: {os.getloadavg()} on {os.cpu_count()} CPUs (shared with other "
          "work: compare the columns of one run, not absolute figures)")
    if args.import_breakdown:
        import_breakdown(args.rounds)
        print(f"load average after: {os.getloadavg()}")
        return
    if args.startup:
        import_rounds(args.rounds)
        startup_rounds(args.rounds, args.startup_idle_s, args.rss_services)
        print(f"load average after: {os.getloadavg()}")
        return
    with tempfile.TemporaryDirectory(prefix="opscale-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", log=lambda _m: None)
        op = None
        try:
            cluster.up(nodes=args.nodes, gpus_per_node=16, gpu_type="nvidia-l4", real_node=False)
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            resync_s = args.resync_s
            op = OperatorProcess(cluster.kubeconfig, Path(tmp) / "operator.log", resync_s=resync_s)
            op.wait_healthy()
            custom = client.CustomObjectsApi(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})

            t0 = time.monotonic()
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "bench", "inferenceservices",
                                                   isvc("single"))
            wait_for(lambda: ready_count(custom, "bench") == 1, 120, "the single service Ready", 0.05)
            single_s = time.monotonic() - t0

            writes0 = op.metric("modalscale_api_writes_total")
            requests0, cpu0, ok0 = apiserver_requests(api), cpu_s(op.proc.pid), op.metric(
                "modalscale_reconciles_total", kind="InferenceService")
            t0 = time.monotonic()
            for i in range(args.services):
                custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "bench", "inferenceservices",
                                                       isvc(f"svc-{i:04d}"))
            created_s = time.monotonic() - t0
            wait_for(lambda: reconciled_count(custom, "bench") == args.services + 1, 3600, "all reconciled", 1.0)
            all_reconciled_s = time.monotonic() - t0
            wait_for(lambda: ready_count(custom, "bench") == args.services + 1, 3600, "all Ready", 1.0)
            all_ready_s = time.monotonic() - t0
            writes1 = op.metric("modalscale_api_writes_total")
            buckets1 = reconcile_buckets(op)
            requests1, cpu1, ok1 = apiserver_requests(api), cpu_s(op.proc.pid), op.metric(
                "modalscale_reconciles_total", kind="InferenceService")
            time.sleep(args.idle_s)
            writes2 = op.metric("modalscale_api_writes_total")
            buckets2 = reconcile_buckets(op)
            requests2, cpu2 = apiserver_requests(api), cpu_s(op.proc.pid)
            idle_reconciles = buckets2[-1][1] - buckets1[-1][1]
            print(f"services={args.services} nodes={args.nodes} (KWOK, 16 GPUs each)")
            print(f"baseline: one service alone Ready in {single_s:.2f} s")
            print(f"created {args.services} objects in {created_s:.1f} s; all reconciled once (observedGeneration) "
                  f"after {all_reconciled_s:.1f} s; all Ready after {all_ready_s:.1f} s "
                  f"({all_ready_s / args.services:.3f} s per service, {all_ready_s / single_s:.1f}x the single one)")
            print("reconcile duration (histogram bucket bounds), whole run: "
                  f"p50 <= {bucket_quantile(buckets2, 0.5)} s, p99 <= {bucket_quantile(buckets2, 0.99)} s; "
                  f"idle {args.idle_s:.0f} s only (resync timer): p50 <= {bucket_quantile(buckets2, 0.5, buckets1)} s, "
                  f"p99 <= {bucket_quantile(buckets2, 0.99, buckets1)} s, "
                  f"{idle_reconciles / args.idle_s:.1f} reconciles/s against the "
                  f"{(args.services + 1) / resync_s:.1f}/s a {resync_s:.0f} s resync of every service asks for")
            print(f"reconciles over 1 s, whole run: {over(buckets2, 1.0):.0f} of {buckets2[-1][1]:.0f} "
                  f"({100 * over(buckets2, 1.0) / max(buckets2[-1][1], 1):.2f} %; p99 < 1 s needs under 1 %), "
                  f"over 2.5 s: {over(buckets2, 2.5):.0f}")
            print(f"API writes per object while creating: {(writes1 - writes0) / args.services:.2f}; "
                  f"during {args.idle_s:.0f} s idle: {writes2 - writes1:.0f} in total")
            burst_reconciles = ok1 - ok0
            print(f"API reads (GET+LIST at the apiserver, all clients) per object while creating: "
                  f"{reads(requests0, requests1) / args.services:.2f}; idle: "
                  f"{reads(requests1, requests2) / args.idle_s:.1f}/s "
                  f"({reads(requests1, requests2) / max(idle_reconciles, 1):.2f} per reconcile)")
            idle_cpu = (cpu2 - cpu1) / args.idle_s
            per_reconcile_ms = 1000 * (cpu1 - cpu0) / max(burst_reconciles, 1)
            capacity = 1000 / per_reconcile_ms  # one core: the GIL runs one reconcile's Python at a time
            demand = (args.services + 1) / resync_s
            print(f"operator CPU: {per_reconcile_ms:.1f} ms per reconcile in the creation burst "
                  f"({burst_reconciles:.0f} reconciles) -> capacity ~{capacity:.1f} reconciles/s of one core; "
                  f"the {resync_s:.0f} s resync of {args.services + 1} services asks {demand:.1f}/s: headroom "
                  f"{capacity / demand:.1f}x; idle: {idle_cpu:.3f} of a core (headroom {1 / max(idle_cpu, 1e-9):.1f}x)")
            reconciles = op.metric("modalscale_reconciles_total", kind="InferenceService")
            reconciled_ok = op.metric("modalscale_reconciles_total", kind="InferenceService", result="ok")
            print(f"operator peak RSS: {rss_mb(op.proc.pid):.0f} MB, RSS now {current_rss_mb(op.proc.pid):.0f} MB; "
                  f"reconciles: {reconciles:.0f} ({reconciles - reconciled_ok:.0f} refused)")
            print(f"load average after: {os.getloadavg()}")
        finally:
            if op:
                op.stop()
                if args.keep_log:
                    import shutil

                    shutil.copy(op.log_path, args.keep_log)
            cluster.down()


if __name__ == "__main__":
    main()
