"""On the real kubelet node, an InferenceService whose runtime image was never imported says so in Ready=False
(the pods' real ErrImagePull / ImagePullBackOff / ErrImageNeverPull), instead of waiting silently."""

from __future__ import annotations

from typing import Any

from modalscale.devenv.realnode import real_node_placement

from .isvc_helpers import create, make_isvc, wait_condition

IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull")


def test_missing_runtime_image_on_the_real_node_is_the_ready_false_reason(
        api: Any, operator: Any, namespace: str, real_node_cluster: Any) -> None:
    body = make_isvc("noimage", runtime={"image": "modalscale/not-imported", "version": "0"},
                     placement=real_node_placement())
    body["spec"]["resources"] = {"cpu": "500m", "memory": "256Mi"}
    body["spec"]["scaling"] = {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}
    create(api, namespace, body)
    # No registry is reachable: the kubelet's pull fails at once (ErrImagePull, then ImagePullBackOff).
    c = wait_condition(api, namespace, "noimage", "Ready", "False", reason="ImagePullError", timeout_s=180)
    print(f"\nReady=False {c['reason']}: {c['message']}")
    assert any(r in c["message"] for r in IMAGE_REASONS), c
    assert "0/1 replicas ready" in c["message"] and "container triton" in c["message"], c
