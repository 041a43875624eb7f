"""What the gateway tests on real kubelet nodes share: an InferenceService of the CPU runtime on the real node(s)
behind its gateway (:class:`Env`), a steady request load through its Service (:class:`Load`) and the images and
operator they need (:func:`images_imported`, :func:`start_operator`). Used by ``test_gateway_real_node`` (the session
cluster's one real node) and ``test_chaos_nodes`` (a cluster of two real nodes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from modalscale.devenv.kube import wait_for
from modalscale.devenv.realnode import real_node_placement
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION, get

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
MODEL = EXAMPLE["spec"]["model"]["name"]
GATEWAY_CPU = "100m"
"""Each gateway pod's CPU request: 2 of them beside 2 replicas of 500m fit the node's 1500m allocatable
(the CRD default, 500m, would leave room for one replica only)."""
MAX_BODY_BYTES = 1 << 20
SUCCESS = "nv_inference_request_success"
FAILURE = "nv_inference_request_failure"


class Env:
    """A namespace of a cluster with real nodes, its API handles and the operator watching it."""

    def __init__(self, api: Any, ns: str, op: Any) -> None:
        self.api, self.ns, self.op = api, ns, op
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def pods(self, selector: str) -> list[Any]:
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items
                if p.metadata.deletion_timestamp is None]

    def ready_pods(self, selector: str) -> list[Any]:
        return [p for p in self.pods(selector) if ready(p)]

    def describe(self, name: str) -> str:
        lines = []
        for p in self.core.list_namespaced_pod(self.ns).items:
            waiting = [(s.state.waiting.reason if s.state.waiting else None) for s in p.status.container_statuses or []]
            lines.append(f"{p.metadata.name} {p.status.phase} ready={ready(p)} node={p.spec.node_name} "
                         f"waiting={waiting}")
            if p.metadata.labels.get("modalscale.io/gateway") and p.status.container_statuses:
                try:
                    lines.append(self.core.read_namespaced_pod_log(p.metadata.name, self.ns, tail_lines=20))
                except ApiException as exc:
                    lines.append(f"(no log: {exc.reason})")
        try:
            status = get(self.api, self.ns, name).get("status")
        except ApiException:
            status = None
        return "\n".join(lines) + f"\nstatus: {str(status)[:1500]}\noperator:\n{self.op.log()[-2000:]}"

    def create(self, name: str, scaling: dict[str, Any], cpu: str = "500m", labels: dict[str, str] | None = None,
               node: str | None = None, priority: int | None = None, gateway_cpu: str = GATEWAY_CPU,
               **gateway: Any) -> None:
        """Create InferenceService ``name`` of the CPU runtime on the real nodes (``node``: on that one only, by
        its hostname label), with ``labels``, ``spec.priority``, gateway pods of ``gateway_cpu`` and ``spec.gateway``
        fields ``gateway``."""
        body = yaml.safe_load(yaml.safe_dump(EXAMPLE))
        body["metadata"] = {"name": name, **({"labels": labels} if labels else {})}
        body["spec"]["resources"]["cpu"] = cpu
        body["spec"]["placement"] = real_node_placement()
        if node is not None:
            body["spec"]["placement"]["nodeSelector"]["kubernetes.io/hostname"] = node
        if priority is not None:
            body["spec"]["priority"] = priority
        body["spec"]["scaling"] = scaling
        body["spec"]["gateway"] = {"enabled": True, "resources": {"cpu": gateway_cpu}, **gateway}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def wait(self, what: Callable[[], Any], timeout_s: float, message: str, name: str) -> float:
        started = time.monotonic()
        try:
            wait_for(what, timeout_s, message, interval_s=0.5)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.describe(name)}") from None
        return time.monotonic() - started

    def wait_serving(self, name: str, replicas: int, timeout_s: float = 420) -> float:
        """Wait for ``replicas`` Ready runtime pods, 2 Ready gateway pods and Service ``name`` on the gateway."""

        def serving() -> bool:
            try:
                svc = self.core.read_namespaced_service(name, self.ns)
            except ApiException as exc:
                if exc.status == 404:  # the operator has not created it yet
                    return False
                raise
            return (len(self.ready_pods(f"modalscale.io/inferenceservice={name}")) == replicas
                    and len(self.ready_pods(f"modalscale.io/gateway={name}")) == 2
                    and svc.spec.selector == {"modalscale.io/gateway": name})

        return self.wait(serving, timeout_s, f"{replicas} Ready replicas, 2 Ready gateway pods, Service on them",
                         name)

    def url(self, name: str) -> str:
        return f"{self.core.read_namespaced_service(name, self.ns).spec.cluster_ip}:8000"

    def counters(self, name: str) -> dict[str, tuple[float, float]]:
        """Each Ready replica's own (success, failure) request counts for the model, by pod name."""
        from modalscale.runtime.client import scrape_metrics

        out = {}
        for p in self.ready_pods(f"modalscale.io/inferenceservice={name}"):
            m = scrape_metrics(f"http://{p.status.pod_ip}:8002/metrics")
            out[p.metadata.name] = (sum(v for k, v in m.items() if k.startswith(SUCCESS + "{")
                                        and f'model="{MODEL}"' in k),
                                    sum(v for k, v in m.items() if k.startswith(FAILURE + "{")
                                        and f'model="{MODEL}"' in k))
        return out

    def remove(self, name: str) -> None:
        """Delete the InferenceService and its pods at once (the node's CPU is needed by the next test)."""
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

        def gone() -> bool:
            pods = self.core.list_namespaced_pod(self.ns).items
            for p in pods:
                try:
                    self.core.delete_namespaced_pod(p.metadata.name, self.ns, grace_period_seconds=0)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            return not pods

        wait_for(gone, 180, f"the pods of {name} gone", interval_s=1)


def ready(p: Any) -> bool:
    """The pod's Ready condition is True."""
    return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def distinct_images(n: int) -> list[bytes]:
    """``n`` different small JPEGs (one photo at ``n`` widths), so no two requests share an image: the gateway's
    image-cache affinity (consistent hashing with bounded loads) sends requests carrying the same image to the same
    replica while it is under the load bound, which at 2 requests in flight is 2, so a one-image workload would
    (rightly) stay on one replica."""
    from modalscale.runtime.workload import photo_at

    return [photo_at("coffee", 160 + i, 120) for i in range(n)]


class Load:
    """``connections`` threads sending requests through ``url`` until stopped, each on one keep-alive connection
    (a new client after a failure); answers and failures are counted with the time they happened.

    A refused connection (kube-proxy still sends new connections to a killed gateway pod's address until the
    kubelet has marked it NotReady and the endpoints changed; a request on a refused connection never left) is
    counted in ``refused``, not ``failed``, and the thread goes on after 0.2 s with a new client and its next
    request, as a client that retries refused connects would. tritonclient's HTTP client reconnects by itself when
    its kept-alive connection is reset, so a request in flight on a killed gateway can show up as a refusal too.

    ``failed`` holds ``(when it failed, why, when it was sent)``; ``timeout_s`` is each request's client-side limit
    (a request in flight on a lost node gets no answer and no reset: it fails by this timeout)."""

    def __init__(self, url: str, connections: int = 2, timeout_s: float = 300) -> None:
        self.url, self.images, self.timeout_s = url, distinct_images(40), timeout_s
        self.answered: list[float] = []
        self.failed: list[tuple[float, str, float]] = []
        self.refused: list[float] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(connections)]

    def _run(self, k: int) -> None:
        from modalscale.runtime.client import MultimodalClient

        i = k
        while not self._stop.is_set():
            with MultimodalClient(self.url, model_name=MODEL, timeout_s=self.timeout_s) as c:
                while not self._stop.is_set():
                    i += 1
                    sent = time.monotonic()
                    try:
                        c.infer(images=[self.images[i % len(self.images)]], text="coffee in a cup")
                        self.answered.append(time.monotonic())
                    except ConnectionRefusedError:
                        self.refused.append(time.monotonic())
                        time.sleep(0.2)
                        break
                    except Exception as exc:  # counted; the caller asserts on them
                        self.failed.append((time.monotonic(), f"{type(exc).__name__}: {exc}"[:300], sent))
                        break

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=300)

    def answers_since(self, t: float) -> int:
        return sum(1 for a in self.answered if a >= t)

    def failed_since(self, t: float) -> list[tuple[float, str, float]]:
        return [f for f in self.failed if f[0] >= t]

    def refused_since(self, t: float) -> list[float]:
        return [r for r in self.refused if r >= t]


def images_imported(workdir: Path) -> float:
    """Build both images from this tree (cached when unchanged) and import them into every real node of the
    cluster at ``workdir``; returns the seconds it took."""
    from modalscale.devenv.images import build_images, import_into_cluster

    started = time.monotonic()
    for b in build_images(log=lambda m: print(m, flush=True), repo=REPO):
        import_into_cluster(b, workdir, log=lambda m: print(m, flush=True))
    return time.monotonic() - started


def start_operator(kubeconfig: Path, ns: str, log_path: Path, **extra_env: str) -> Any:
    """A healthy ``modalscale operator`` process watching only namespace ``ns`` (its gateway pods get the default
    image, the operator image); the caller stops it."""
    from modalscale.devenv.operator_process import OperatorProcess

    op = OperatorProcess(kubeconfig, log_path, {"MODALSCALE_NAMESPACES": ns, "MODALSCALE_STANDALONE": "true",
                                                **extra_env})
    try:
        op.wait_healthy()
    except BaseException:
        op.stop()
        raise
    return op
