"""The staged layout (issue 24) on the real kubelet node: real CPU-runtime pods of a one-piece InferenceService and
of a staged one (a front pool and its image-encoder pool, each one replica of 500m: the node's 1500m allocatable)
answer the same image, text and image+text requests with the same embeddings (cosine >= 0.99999 at FP32), the
same modality and the same image classes; every request goes from this process through each service's ClusterIP
Service (kube-proxy), and the staged front reaches its pool at the pool Service's ClusterIP."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from modalscale.devenv.realnode import real_node_placement
from tests.integration.operator.gateway_load import (
    EXAMPLE,
    MODEL,
    Env,
    distinct_images,
    images_imported,
    ready,
    start_operator,
)
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def env(real_node_cluster: Any, api: Any, crds_installed: list[str],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    print(f"images built/found and imported in {images_imported(real_node_cluster.workdir):.1f} s")
    ns = f"stages-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    op = None
    try:
        op = start_operator(real_node_cluster.kubeconfig, ns, tmp_path_factory.mktemp("stages-operator") / "op.log")
        yield Env(api, ns, op)
    finally:
        if op is not None:
            op.stop()
        core.delete_namespace(ns)


def _service(name: str, staged: bool) -> dict[str, Any]:
    body = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    body["metadata"] = {"name": name}
    body["spec"]["resources"]["cpu"] = "500m"
    body["spec"]["placement"] = real_node_placement()
    body["spec"]["scaling"] = {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    body["spec"]["gateway"] = {"enabled": False}
    if staged:
        body["spec"]["stages"] = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 1,
                                                   "resources": {"cpu": "500m",
                                                                 "memory": body["spec"]["resources"]["memory"]}}}
    return body


def test_a_staged_service_on_the_real_node_answers_like_the_one_piece_layout(env: Env) -> None:
    from modalscale.runtime.client import MultimodalClient

    started = time.monotonic()
    images = distinct_images(2)
    requests: list[tuple[list[bytes] | None, str | None]] = [
        ([images[0]], None), (None, "a cup of coffee on a wooden table"),
        ([images[1]], "latte art"), (images, "two cups")]
    answers: dict[str, list[Any]] = {}
    try:
        for name, staged in (("one", False), ("st", True)):
            env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, _service(name, staged))

        def serving() -> bool:
            return (len(env.ready_pods("modalscale.io/inferenceservice=one")) == 1
                    and len(env.ready_pods("modalscale.io/inferenceservice=st")) == 1
                    and len(env.ready_pods("modalscale.io/image-encoder=st")) == 1)

        env.wait(serving, 480, "the one-piece replica, the front and the encoder pod Ready", "st")
        seen_ready, ready_s = time.monotonic(), time.monotonic() - started
        front = env.ready_pods("modalscale.io/inferenceservice=st")[0]
        assert front.metadata.labels.get("modalscale.io/stage") == "front", front.metadata.labels
        for name in ("one", "st"):
            url = f"{env.core.read_namespaced_service(name, env.ns).spec.cluster_ip}:8000"
            # Ready is not yet reachable through the Service (kube-proxy's rules follow the EndpointSlice): refused
            # connects are retried until one request is answered (_first_answer_through), then the four are sent.
            _first_answer_through(url)
            answers[name] = []
            with MultimodalClient(url, model_name=MODEL, timeout_s=120) as c:
                for imgs, text in requests:
                    sent = time.monotonic()
                    try:
                        answers[name].append(c.infer(images=imgs, text=text))
                    except Exception as exc:  # InferenceError (its status), a reset or a timeout alike
                        raise AssertionError(
                            f"{name}: request {len(answers[name])} ({0 if imgs is None else len(imgs)} images, "
                            f"text={text is not None}) failed {time.monotonic() - sent:.2f} s after sending, "
                            f"{time.monotonic() - seen_ready:.2f} s after all pods were seen Ready: "
                            f"{type(exc).__name__}: {exc} [status {getattr(exc, 'status', None)}]\n"
                            f"{_pods_and_logs(env)}") from None
        print(f"\nboth layouts Ready in {ready_s:.1f} s; answered {len(requests)} requests each; "
              f"{time.monotonic() - started:.1f} s in all")
        _assert_same_answers(env, requests, answers)
    finally:
        # The next test needs the node's CPU: both services go, whatever happened above (stop 38's CI: this test
        # failed, left its three pods of 500m, and the next one waited 480 s for CPU). Env.remove waits until no
        # pod of the namespace is left: the other service first, without waiting.
        with contextlib.suppress(ApiException):
            env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, "st")
        env.remove("one")


def _pods_and_logs(env: Env) -> str:
    """Each pod of the namespace (phase, Ready, restarts) and the last lines of its Triton log."""
    lines = []
    for p in env.core.list_namespaced_pod(env.ns).items:
        restarts = [s.restart_count for s in p.status.container_statuses or []]
        lines.append(f"--- {p.metadata.name} {p.status.phase} ready={ready(p)} ip={p.status.pod_ip} "
                     f"restarts={restarts}")
        try:
            lines.append(env.core.read_namespaced_pod_log(p.metadata.name, env.ns, tail_lines=25))
        except ApiException as exc:
            lines.append(f"(no log: {exc.reason})")
    return "\n".join(lines)


def _assert_same_answers(env: Env, requests: list[tuple[list[bytes] | None, str | None]],
                         answers: dict[str, list[Any]]) -> None:
    """The staged service answered each request like the one-piece one, and its image calls went to the pool."""
    for (imgs, text), a, b in zip(requests, answers["one"], answers["st"], strict=True):
        cosine = float(np.dot(a.embedding, b.embedding) / (np.linalg.norm(a.embedding) * np.linalg.norm(b.embedding)))
        print(f"  images={0 if imgs is None else len(imgs)} text={text is not None}: {a.modality} cosine {cosine:.7f}")
        assert (a.modality, a.image_classes.tolist()) == (b.modality, b.image_classes.tolist())
        assert cosine >= 0.99999, (a.modality, cosine)
    # The pool's own counter says the image requests went through it (3 of the 4 carry images).
    from modalscale.runtime.client import scrape_metrics

    pool = env.ready_pods("modalscale.io/image-encoder=st")[0]
    m = scrape_metrics(f"http://{pool.status.pod_ip}:8002/metrics")
    served = sum(v for k, v in m.items() if k.startswith("nv_inference_request_success{")
                 and 'model="image_encoder"' in k)
    assert served >= 3, {k: v for k, v in m.items() if "image_encoder" in k}


def _pool_successes(env: Env, name: str) -> dict[str, float]:
    """Each Ready encoder pod's own count of answered image calls, by pod name."""
    from modalscale.runtime.client import scrape_metrics

    out = {}
    for p in env.ready_pods(f"modalscale.io/image-encoder={name}"):
        m = scrape_metrics(f"http://{p.status.pod_ip}:8002/metrics")
        out[p.metadata.name] = sum(v for k, v in m.items() if k.startswith("nv_inference_request_success{")
                                   and 'model="image_encoder"' in k)
    return out


def _first_answer_through(url: str, timeout_s: float = 60) -> int:
    """Send one image+text request through ``url`` until it is answered; returns the refused connects before the
    answer.

    A refused connect and an error answer are both tried again after 0.2 s: a Service whose pods just became Ready
    can still be routed by kube-proxy's previous rules for a while (ci76's first answer was an HTTP 404 with no body;
    which server sent it is not known: a Triton that does not have the model names it in a JSON body). What came
    before the answer is printed; nothing like it is allowed after it (the callers' later requests fail the test at
    once).
    """
    from modalscale.runtime.client import InferenceError, MultimodalClient
    from modalscale.runtime.workload import photo_at

    refused, errors, started = 0, [], time.monotonic()
    while True:
        try:
            with MultimodalClient(url, model_name=MODEL, timeout_s=120) as c:
                c.infer(images=[photo_at("coffee", 160, 120)], text="coffee in a cup")
            if errors:
                print(f"\n{url}: answered {time.monotonic() - started:.1f} s after the first try; before it "
                      f"{refused} refused connect(s) and {len(errors)} error answer(s): {errors[:5]}")
            return refused
        except ConnectionRefusedError:
            refused += 1
        except InferenceError as exc:
            errors.append(f"{time.monotonic() - started:.1f} s: status {exc.status}: {str(exc)[:160]}")
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"the Service at {url} answered no request in {timeout_s:.0f} s: {refused} refused "
                                 f"connect(s), error answers {errors[-5:]}")
        time.sleep(0.2)


def test_killing_an_encoder_pod_under_load_fails_no_request(env: Env) -> None:
    """A staged service with two encoder pods (the front's four gRPC connections spread over them by kube-proxy)
    under a steady image+text load through the front's Service; the encoder pod that served the most is killed
    (deleted with no grace period: SIGKILL, its connections closed with calls in flight). The front sends every
    call that failed UNAVAILABLE again on another connection (``encoder_client``), so no request fails, and
    requests go on being answered through the other pod while the Deployment replaces the killed one."""
    body = _service("kp", staged=True)
    body["spec"]["stages"]["imageEncoder"].update(minReplicas=2, maxReplicas=2)  # Fixed mode: minReplicas run
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, body)
    try:
        _kill_an_encoder_pod_under_load(env)
    finally:
        env.remove("kp")  # its pods go whatever happened (the node's CPU is needed by the next module)


def _kill_an_encoder_pod_under_load(env: Env) -> None:
    from tests.integration.operator.gateway_load import Load

    def serving() -> bool:
        return (len(env.ready_pods("modalscale.io/inferenceservice=kp")) == 1
                and len(env.ready_pods("modalscale.io/image-encoder=kp")) == 2)

    ready_s = env.wait(serving, 480, "the front and both encoder pods Ready", "kp")
    url = f"{env.core.read_namespaced_service('kp', env.ns).spec.cluster_ip}:8000"
    # The front pod Ready is not yet the Service reachable: kube-proxy programs its rules after the EndpointSlice
    # changes. A clean-clone run (ci43) saw 15 refused connects within 0.8 s, 0 failed requests; when, against the
    # kill, was not printed (now it is), and that lag is the likeliest cause. One request answered through the
    # Service first, so that every refusal below belongs to the kill.
    refused_before = _first_answer_through(url)
    with Load(url, connections=3, timeout_s=120) as load:
        env.wait(lambda: len(load.answered) >= 10, 120, "10 requests answered before the kill", "kp")
        served = _pool_successes(env, "kp")
        victim = max(served, key=lambda pod: served[pod])
        killed = time.monotonic()
        env.core.delete_namespaced_pod(victim, env.ns, grace_period_seconds=0)
        env.wait(lambda: load.answers_since(killed + 5) >= 10, 120, "10 requests answered 5 s after the kill", "kp")
    after = _pool_successes(env, "kp")
    print(f"\nfront and 2 encoder pods Ready in {ready_s:.1f} s ({refused_before} refused connect(s) before the "
          f"Service answered); pool successes before the kill {served}; killed {victim}; "
          f"{load.answers_since(killed)} answered after it, {len(load.answered)} in all; pool successes after "
          f"{after}; refused at (s from the kill) {[round(r - killed, 2) for r in load.refused]}")
    assert served[victim] > 0  # the killed pod was serving
    kinds = Counter(why.split(" (")[0] + " " + why.split("did not answer (")[-1][:24] for _, why, _ in load.failed)
    assert load.failed == [] and load.refused == [], (len(load.failed), kinds, load.failed[:3], load.refused[:3])
    assert load.answers_since(killed) >= 10
