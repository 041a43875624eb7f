"""The operator against the real control plane: children, readiness, rollout, drift, one replica writer."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from kubernetes import client, watch

from modalscale.devenv.kube import wait_for
from tests.integration.operator.isvc_helpers import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    create,
    event_reasons,
    get,
    make_isvc,
    patch_spec,
    wait_condition,
    wait_event,
)


def test_create_makes_owned_children_and_reports_ready(api: Any, operator: Any, namespace: str,
                                                        cluster: Any) -> None:
    isvc = create(api, namespace, make_isvc("vc"))
    wait_condition(api, namespace, "vc", "Ready", "True")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    dep = apps.read_namespaced_deployment("vc", namespace)
    svc = core.read_namespaced_service("vc", namespace)
    cm = core.read_namespaced_config_map("vc-model-repo", namespace)
    for obj in (dep, svc, cm):
        (ref,) = obj.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == (
            "InferenceService", "vc", isvc["metadata"]["uid"], True)
        assert obj.metadata.labels["app.kubernetes.io/managed-by"] == "modalscale-operator"
    assert "multimodal__config.pbtxt" in cm.data
    assert dep.spec.template.spec.containers[0].readiness_probe._exec.command[-1] == "--model=multimodal"
    pods = core.list_namespaced_pod(namespace, label_selector="modalscale.io/inferenceservice=vc").items
    assert len(pods) == 2 and all(p.spec.node_name.startswith("kwok-gpu-") for p in pods)
    status = get(api, namespace, "vc")["status"]
    assert (status["replicas"], status["readyReplicas"], status["desiredReplicas"]) == (2, 2, 2)
    assert status["url"] == f"http://vc.{namespace}.svc.cluster.local:8000"
    assert status["observedGeneration"] == 1
    from decimal import Decimal

    from modalscale.costmodel.catalog import ReplicaResources, default_catalog

    per_replica = default_catalog().price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"),
                                                  "OnDemand")
    wait_for(lambda: get(api, namespace, "vc")["status"].get("costUSDPerHour") is not None, 30, "cost in status")
    assert Decimal(get(api, namespace, "vc")["status"]["costUSDPerHour"]) == (2 * per_replica).quantize(
        Decimal("0.0001"))

    from modalscale.devenv.binaries import ensure_binaries

    out = subprocess.run([str(ensure_binaries(lambda _m: None).kubectl), f"--kubeconfig={cluster.kubeconfig}",
                          "-n", namespace, "get", "msvc", "vc"], capture_output=True, text=True, check=True).stdout
    header, row = out.splitlines()
    assert row.split()[:5] == ["vc", "True", "2", "2", "500"]
    assert row.split()[5] == get(api, namespace, "vc")["status"]["costUSDPerHour"]


def test_spec_change_rolls_out_without_losing_ready_replicas(api: Any, operator: Any, namespace: str) -> None:
    create(api, namespace, make_isvc("roll"))
    wait_condition(api, namespace, "roll", "Ready", "True")
    apps = client.AppsV1Api(api)
    seen_ready: list[int] = []

    def is_rolled(d: Any) -> bool:
        return bool(d.spec.template.spec.containers[0].image.endswith(":24.11-py3")
                    and d.status.updated_replicas == 2 and d.status.ready_replicas == 2 and d.status.replicas == 2)

    def watch_ready() -> None:
        # Every event of the rollout, up to the first that shows it done. It stopped at the first event after the
        # test had seen the rollout done, and none comes then: the watch held the test until its own 60 s timeout.
        w = watch.Watch()
        for ev in w.stream(apps.list_namespaced_deployment, namespace, field_selector="metadata.name=roll",
                           timeout_seconds=60):
            seen_ready.append(ev["object"].status.ready_replicas or 0)
            if is_rolled(ev["object"]):
                w.stop()

    t = threading.Thread(target=watch_ready, daemon=True)
    t.start()
    time.sleep(0.5)
    patch_spec(api, namespace, "roll", {"runtime": {"version": "24.11-py3",
                                                    "dynamicBatching": {"maxQueueDelayMicroseconds": 500}}})

    wait_for(lambda: is_rolled(apps.read_namespaced_deployment("roll", namespace)), 90, "rollout of the new image")
    wait_condition(api, namespace, "roll", "Ready", "True")
    t.join(timeout=70)
    assert seen_ready and min(seen_ready) >= 2, seen_ready
    cm = client.CoreV1Api(api).read_namespaced_config_map("roll-model-repo", namespace)
    configs = {k: v for k, v in cm.data.items() if k.endswith("config.pbtxt")}
    # The batched models (one per modality with modality-aware batching) carry the new queue delay.
    assert any("max_queue_delay_microseconds: 500" in v for v in configs.values()), sorted(configs)


def test_a_repository_only_change_rolls_the_pods_onto_the_new_repository(api: Any, operator: Any,
                                                                          namespace: str) -> None:
    """Triton reads its repository once: a change of the generated repository alone (the batching window here, no
    image or argument change) must still give new pods, with the hash of what the ConfigMap now holds."""
    from modalscale.operator.isvc.objects import MODEL_REPOSITORY_HASH_ANNOTATION, content_hash

    create(api, namespace, make_isvc("repo", runtime={"dynamicBatching": {"maxQueueDelayMicroseconds": 2000}}))
    wait_condition(api, namespace, "repo", "Ready", "True")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def mounted_hash() -> str:
        data = core.read_namespaced_config_map("repo-model-repo", namespace).data
        return content_hash({k.replace("__", "/"): v for k, v in data.items()})

    def template_hash() -> str:
        return apps.read_namespaced_deployment("repo", namespace).spec.template.metadata.annotations[
            MODEL_REPOSITORY_HASH_ANNOTATION]

    before = template_hash()
    assert before == mounted_hash()
    before_generation = apps.read_namespaced_deployment("repo", namespace).metadata.generation
    patch_spec(api, namespace, "repo", {"runtime": {"dynamicBatching": {"maxQueueDelayMicroseconds": 500}}})

    def rolled() -> bool:
        d = apps.read_namespaced_deployment("repo", namespace)
        return (d.spec.template.metadata.annotations[MODEL_REPOSITORY_HASH_ANNOTATION] != before
                and d.status.observed_generation == d.metadata.generation
                and d.status.updated_replicas == 2 and d.status.ready_replicas == 2 and d.status.replicas == 2)

    wait_for(rolled, 90, "rollout onto the new repository")
    assert template_hash() == mounted_hash() != before
    assert apps.read_namespaced_deployment("repo", namespace).metadata.generation > before_generation
    configs = core.read_namespaced_config_map("repo-model-repo", namespace).data
    assert any("max_queue_delay_microseconds: 500" in v for v in configs.values())
    replica_sets = apps.list_namespaced_replica_set(namespace, label_selector="modalscale.io/inferenceservice=repo")
    assert len(replica_sets.items) == 2  # the first pods' and the new repository's


def test_drift_is_repaired_and_hand_scaling_is_reported(api: Any, operator: Any, namespace: str) -> None:
    create(api, namespace, make_isvc("drift"))
    wait_condition(api, namespace, "drift", "Ready", "True")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    core.delete_namespaced_service("drift", namespace)
    wait_for(lambda: core.list_namespaced_service(namespace, field_selector="metadata.name=drift").items,
             30, "Service recreated")

    apps.patch_namespaced_deployment("drift", namespace, {"spec": {"template": {"spec": {"containers": [
        {"name": "triton", "image": "evil/triton:latest"}]}}}})
    wait_for(lambda: apps.read_namespaced_deployment("drift", namespace)
             .spec.template.spec.containers[0].image == "nvcr.io/nvidia/tritonserver:24.10-py3", 30, "image restored")

    apps.patch_namespaced_deployment("drift", namespace, {"metadata": {"labels": {
        "app.kubernetes.io/part-of": "other", "team": "search"}}})
    wait_for(lambda: apps.read_namespaced_deployment("drift", namespace).metadata.labels.get(
        "app.kubernetes.io/part-of") == "modalscale", 30, "owned label restored")
    assert apps.read_namespaced_deployment("drift", namespace).metadata.labels["team"] == "search"

    apps.patch_namespaced_deployment_scale("drift", namespace, {"spec": {"replicas": 5}})
    c = wait_condition(api, namespace, "drift", "ScalingConflict", "True", "ReplicasChangedExternally")
    assert "scaled to 5" in c["message"]
    wait_for(lambda: apps.read_namespaced_deployment("drift", namespace).spec.replicas == 2, 30, "replicas restored")
    wait_for(lambda: any(e.reason == "ReplicasChangedExternally" and e.type == "Warning" for e in
                         core.list_namespaced_event(namespace, field_selector="involvedObject.name=drift").items),
             30, "the ReplicasChangedExternally Warning Event")
    # Restored once; no alternating writes afterwards.
    time.sleep(3 * 2.0)
    history = get(api, namespace, "drift")["status"]["scalingHistory"]
    assert [(h["from"], h["to"]) for h in history].count((5, 2)) == 1


def test_reconciles_with_nothing_changed_make_zero_writes(api: Any, operator: Any, namespace: str) -> None:
    create(api, namespace, make_isvc("quiet"))
    wait_condition(api, namespace, "quiet", "Ready", "True")
    time.sleep(2 * 2.0)  # let the rollout settle: deployment status and the Ready/Progressing flips
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def versions() -> list[str]:
        return [get(api, namespace, "quiet")["metadata"]["resourceVersion"],
                apps.read_namespaced_deployment("quiet", namespace).metadata.resource_version,
                core.read_namespaced_service("quiet", namespace).metadata.resource_version,
                core.read_namespaced_config_map("quiet-model-repo", namespace).metadata.resource_version]

    def our_writes() -> int:
        return operator.log().count(f"namespace={namespace} ")

    before_versions, before_writes = versions(), our_writes()
    assert before_writes >= 4  # the creates and first status were counted by the same log line
    reconciles_before = operator.metric("modalscale_reconciles_total", result="ok")
    time.sleep(4 * 2.0)  # four resync periods
    assert operator.metric("modalscale_reconciles_total", result="ok") >= reconciles_before + 3
    assert our_writes() == before_writes
    assert versions() == before_versions


def test_unschedulable_pods_make_ready_false_with_the_scheduler_reason(api: Any, operator: Any,
                                                                       namespace: str) -> None:
    create(api, namespace, make_isvc("huge", resources={"cpu": "1", "memory": "1Gi",
                                                        "gpu": {"count": 16, "type": "nvidia-l4"}}))
    c = wait_condition(api, namespace, "huge", "Ready", "False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in c["message"]
    deg = condition(get(api, namespace, "huge"), "Degraded")
    assert deg and deg["status"] == "True"


def test_missing_model_configmap_is_reported_by_field_and_nothing_is_created(api: Any, operator: Any,
                                                                            namespace: str) -> None:
    create(api, namespace, make_isvc("usermodel", model={"source": "ConfigMap", "name": "cap",
                                                         "configMap": {"name": "no-such-repo"}}))
    c = wait_condition(api, namespace, "usermodel", "Ready", "False", "ModelNotFound")
    assert "spec.model.configMap.name" in c["message"]
    assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items == []
    assert wait_event(api, namespace, "usermodel", "ModelNotFound").count("ModelNotFound") == 1

    client.CoreV1Api(api).create_namespaced_config_map(namespace, {
        "metadata": {"name": "no-such-repo"},
        "data": {"cap__config.pbtxt": 'name: "cap"\nbackend: "python"\n', "cap__1__model.py": "# user model\n"}})
    wait_condition(api, namespace, "usermodel", "Ready", "True")
    dep = client.AppsV1Api(api).read_namespaced_deployment("usermodel", namespace)
    (vol,) = [v for v in dep.spec.template.spec.volumes if v.name == "model-repository"]
    assert sorted(i.path for i in vol.config_map.items) == ["cap/1/model.py", "cap/config.pbtxt"]
    # reconciles after the first (the ConfigMap's creation, the Deployment's) posted no second ModelNotFound
    assert event_reasons(api, namespace, "usermodel").count("ModelNotFound") == 1


def test_scale_subresource_is_honoured_in_fixed_mode_and_explained_otherwise(api: Any, operator: Any,
                                                                            namespace: str) -> None:
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
    create(api, namespace, make_isvc("fixed"))
    wait_condition(api, namespace, "fixed", "Ready", "True")
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "fixed", {"spec": {"replicas": 3}})
    wait_for(lambda: (apps.read_namespaced_deployment("fixed", namespace).status.ready_replicas or 0) == 3, 60,
             "3 ready replicas")
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "fixed")
    wait_for(lambda: custom.get_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, "fixed")["status"]["replicas"] == 3, 30, "scale status 3")
    assert scale["status"]["selector"] == "modalscale.io/inferenceservice=fixed"

    create(api, namespace, make_isvc("pred", scaling={"mode": "Predictive", "minReplicas": 1, "maxReplicas": 4}))
    wait_condition(api, namespace, "pred", "Ready", "True")
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "pred", {"spec": {"replicas": 3}})
    c = wait_condition(api, namespace, "pred", "ScalingConflict", "True", "ScaleIgnoredInMode")
    assert "Fixed" in c["message"]
    assert apps.read_namespaced_deployment("pred", namespace).spec.replicas == 1


def test_delete_removes_everything_and_nothing_hangs(api: Any, operator: Any, namespace: str) -> None:
    create(api, namespace, make_isvc("gone"))
    wait_condition(api, namespace, "gone", "Ready", "True")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gone")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    wait_for(lambda: not client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"], 30, "InferenceService deleted")
    wait_for(lambda: not apps.list_namespaced_deployment(namespace).items
             and not core.list_namespaced_service(namespace).items
             and not [c for c in core.list_namespaced_config_map(namespace).items
                      if c.metadata.name != "kube-root-ca.crt"]
             and not core.list_namespaced_pod(namespace).items, 60, "children garbage-collected")


def test_gpu_type_without_a_price_is_refused_by_field_and_nothing_is_created(api: Any, operator: Any,
                                                                             namespace: str) -> None:
    create(api, namespace, make_isvc("exotic", resources={"cpu": "1", "memory": "1Gi",
                                                          "gpu": {"count": 1, "type": "acme-tpu9000"}}))
    c = wait_condition(api, namespace, "exotic", "Ready", "False", "UnknownGPUPrice")
    assert "spec.resources.gpu.type" in c["message"] and "acme-tpu9000" in c["message"]
    assert "costUSDPerHour" not in get(api, namespace, "exotic")["status"]
    assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items == []
    assert wait_event(api, namespace, "exotic", "UnknownGPUPrice").count("UnknownGPUPrice") == 1


def test_a_gpu_and_model_source_change_gives_a_template_the_api_server_takes_with_nothing_of_the_old_layout(
        api: Any, operator: Any, namespace: str) -> None:
    """Found by review (7 Dec 2026), on the real API server here: a strategic merge keeps what its patch does not
    name, so a live service switched from one GPU and the BuiltIn model to a CPU replica reading a PVC kept its GPU
    request and GPU node selector (a "CPU" replica holding a GPU), and its patch merged a ConfigMap and a PVC into
    one volume and exec and httpGet into one probe, which the API server refuses (422) at every pass. Now the
    patch nulls what the old spec wrote: the Deployment takes it, holds one volume source and one probe handler, no
    GPU and no BuiltIn preStop hook, and a rerun writes nothing."""
    from modalscale.api.inferenceservice import GPU_PRODUCT_LABEL, GPU_RESOURCE

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "models"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    create(api, namespace, make_isvc("swap"))
    wait_condition(api, namespace, "swap", "Ready", "True")
    before = apps.read_namespaced_deployment("swap", namespace).spec.template.spec
    assert before.containers[0].resources.limits[GPU_RESOURCE] == "1" and GPU_PRODUCT_LABEL in before.node_selector
    client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "swap", {"spec": {
        "resources": {"cpu": "1", "memory": "2Gi", "gpu": None},
        "model": {"source": "PVC", "pvc": {"claimName": "models", "subPath": "repo"}}}})

    def switched() -> Any:
        d = apps.read_namespaced_deployment("swap", namespace)
        volume = next(v for v in d.spec.template.spec.volumes if v.name == "model-repository")
        return d if volume.persistent_volume_claim is not None else None

    dep = wait_for(switched, 60, "the Deployment patched onto the PVC")
    pod = dep.spec.template.spec
    volume = next(v for v in pod.volumes if v.name == "model-repository")
    assert volume.config_map is None and volume.persistent_volume_claim.claim_name == "models"
    triton = pod.containers[0]
    for probe in (triton.readiness_probe, triton.liveness_probe, triton.startup_probe):
        if probe is not None:
            assert probe._exec is None and probe.http_get is not None, probe
    assert GPU_RESOURCE not in (triton.resources.requests or {}) and GPU_RESOURCE not in (triton.resources.limits or {})
    assert GPU_PRODUCT_LABEL not in (pod.node_selector or {}) and triton.lifecycle is None
    assert (triton.resources.limits or {}).get("cpu") == "1"  # the CPU layout's own limit
    mount = next(m for m in triton.volume_mounts if m.name == "model-repository")
    assert mount.sub_path == "repo"
    ready = condition(get(api, namespace, "swap"), "Ready")
    assert ready is None or ready["reason"] != "InvalidSpec", ready
    time.sleep(2 * 2.0)  # the writes of the switch settle
    version = apps.read_namespaced_deployment("swap", namespace).metadata.resource_version
    time.sleep(3 * 2.0)  # three resync periods
    assert apps.read_namespaced_deployment("swap", namespace).metadata.resource_version == version


def test_a_service_account_and_pull_secrets_reach_the_pods_and_leave_them_when_taken_out_of_the_spec(
        api: Any, operator: Any, namespace: str) -> None:
    """``spec.serviceAccountName`` and ``spec.imagePullSecrets`` (KServe's predictor fields): a private mirror of the
    Triton image and a workload identity for a model in object storage. On the real API server: the Deployment's pod
    template and its pods carry them; taking one Secret out, then both fields, takes them off the template (the
    strategic merge keeps what a patch does not name, the list merges on ``name``, and the API server reads the
    deprecated ``serviceAccount`` back when ``serviceAccountName`` alone is nulled), the pods roll onto the
    namespace's default account, and a rerun writes nothing."""
    import base64

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "model-reader"}})
    config = base64.b64encode(b'{"auths": {}}').decode()
    for name in ("ngc-mirror", "hub"):
        core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson",
                                                  "data": {".dockerconfigjson": config}})
    create(api, namespace, make_isvc("ident", serviceAccountName="model-reader",
                                     imagePullSecrets=[{"name": "ngc-mirror"}, {"name": "hub"}]))
    wait_condition(api, namespace, "ident", "Ready", "True")

    def template() -> Any:
        return apps.read_namespaced_deployment("ident", namespace).spec.template.spec

    def pods() -> list[Any]:
        return core.list_namespaced_pod(namespace, label_selector="modalscale.io/inferenceservice=ident").items

    pod = template()
    assert pod.service_account_name == "model-reader" and pod.automount_service_account_token is False
    assert [s.name for s in pod.image_pull_secrets] == ["ngc-mirror", "hub"]
    running = pods()
    assert running and all(p.spec.service_account_name == "model-reader" for p in running)
    assert all([s.name for s in p.spec.image_pull_secrets] == ["ngc-mirror", "hub"] for p in running)

    patch_spec(api, namespace, "ident", {"imagePullSecrets": [{"name": "hub"}]})
    wait_for(lambda: [s.name for s in template().image_pull_secrets or []] == ["hub"], 60,
             "the Deployment pulling with hub only")
    patch_spec(api, namespace, "ident", {"serviceAccountName": None, "imagePullSecrets": None})
    wait_for(lambda: not template().image_pull_secrets and not template().service_account_name, 60,
             "the Deployment without pull secrets and account")
    pod = template()
    assert pod.service_account_name is None and pod.service_account is None and pod.image_pull_secrets is None

    def rolled() -> bool:
        live = [p for p in pods() if not p.metadata.deletion_timestamp]
        # "default" once the ServiceAccount admission plugin fills it in (it is off in this cluster: none)
        return len(live) == 2 and all(p.spec.service_account_name in (None, "default") and not p.spec.image_pull_secrets
                                      for p in live)

    wait_for(rolled, 90, "the pods rolled onto the namespace's default account without pull secrets")
    ready = condition(get(api, namespace, "ident"), "Ready")
    assert ready is None or ready["reason"] != "InvalidSpec", ready
    time.sleep(2 * 2.0)  # the writes of the removal settle
    version = apps.read_namespaced_deployment("ident", namespace).metadata.resource_version
    time.sleep(3 * 2.0)  # three resync periods
    assert apps.read_namespaced_deployment("ident", namespace).metadata.resource_version == version


def test_leaving_the_builtin_model_and_a_node_selector_label_leaves_nothing_of_them_on_the_api_server(
        api: Any, operator: Any, namespace: str) -> None:
    """Three repairs the unit tests check only against their model of the strategic merge, here on the real API
    server: BuiltIn -> URI deletes the model volume and its /models mount (``$patch: delete`` on lists merged by
    ``name`` and ``mountPath``), a label taken out of ``spec.placement.nodeSelector`` is nulled on the Deployment,
    and the generated ConfigMap ``<name>-model-repo`` is deleted once the rollout is complete (not before: the pods
    never schedule, so it completes only at 0 replicas); a rerun writes nothing. The pods never schedule (no node has
    ``pool``/``zone`` labels): only the Deployment's template and the ConfigMap are read."""
    from modalscale.operator.isvc.objects import MODEL_VOLUME

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    create(api, namespace, make_isvc("leave", placement={"nodeSelector": {"pool": "a", "zone": "z1"}}))

    def template() -> Any:
        try:
            return apps.read_namespaced_deployment("leave", namespace).spec.template.spec
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def configmaps() -> list[str]:
        return [m.metadata.name for m in core.list_namespaced_config_map(namespace).items]

    before = wait_for(template, 60, "the Deployment of the BuiltIn service")
    wait_for(lambda: "leave-model-repo" in configmaps(), 60, "the generated model repository")
    volume = next(v for v in before.volumes if v.name == MODEL_VOLUME)
    assert volume.config_map.name == "leave-model-repo"
    assert "/models" in [m.mount_path for m in before.containers[0].volume_mounts]
    assert (before.node_selector["pool"], before.node_selector["zone"]) == ("a", "z1")

    patch_spec(api, namespace, "leave", {"model": {"source": "URI", "uri": "s3://bucket/models"},
                                         "placement": {"nodeSelector": {"pool": None, "zone": "z1"}}})
    def unpinned() -> Any:
        t = template()
        return t if t is not None and "pool" not in (t.node_selector or {}) else None

    pod = wait_for(unpinned, 60, "the Deployment without the pool label")
    assert pod.node_selector["zone"] == "z1"
    assert MODEL_VOLUME not in [v.name for v in pod.volumes or []]
    assert "/models" not in [m.mount_path for m in pod.containers[0].volume_mounts or []]
    time.sleep(3 * 2.0)  # three resync periods: the new pods never schedule, so the rollout never completes and
    assert "leave-model-repo" in configmaps()  # the old ReplicaSet's pods (which still mount it) stay
    patch_spec(api, namespace, "leave", {"scaling": {"minReplicas": 0, "replicas": 0}})  # a rollout of 0 completes
    wait_for(lambda: "leave-model-repo" not in configmaps(), 60, "the generated model repository deleted")
    ready = condition(get(api, namespace, "leave"), "Ready")
    assert ready is None or ready["reason"] != "InvalidSpec", ready
    time.sleep(2 * 2.0)  # the writes of the switch settle
    version = apps.read_namespaced_deployment("leave", namespace).metadata.resource_version
    time.sleep(3 * 2.0)  # three resync periods
    assert apps.read_namespaced_deployment("leave", namespace).metadata.resource_version == version
    assert "leave-model-repo" not in configmaps()


def test_a_users_objects_of_child_names_are_left_as_they_are_reported_and_outlive_the_service(
        api: Any, operator: Any, namespace: str) -> None:
    """Found by the isvc review (7 Dec 2026): a user's ConfigMap ``<name>-model-repo`` or ServiceAccount
    ``<name>-gateway`` (no managed-by label, so in no watch cache: the create met it with 409) was patched to the
    service's labels, owner reference and data, and garbage-collected with the InferenceService. Now it is read,
    left as it is, the replicas and the gateway (their groups) are held, ``ChildConflict`` and ``Ready`` name it
    with the fix and a Warning Event is posted, while the rest (the Service) is made; deleting the InferenceService
    leaves both."""
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "adopt-model-repo", "labels": {"app": "mine"}},
                                                  "data": {"keep": "me"}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "adopt-gateway"}})
    create(api, namespace, make_isvc("adopt", gateway={"enabled": True}))
    c = wait_condition(api, namespace, "adopt", "ChildConflict", "True", "ForeignObject")
    for kind, name in (("ConfigMap", "adopt-model-repo"), ("ServiceAccount", "adopt-gateway")):
        assert f"rename or delete the existing {kind} {name}" in c["message"]
    ready = wait_condition(api, namespace, "adopt", "Ready", "False", "ForeignObject")
    assert "ConfigMap adopt-model-repo" in ready["message"]
    wait_event(api, namespace, "adopt", "ForeignObject")
    wait_for(lambda: [s for s in core.list_namespaced_service(namespace).items if s.metadata.name == "adopt"], 30,
             "the Service made beside the conflict")
    apps, rbac = client.AppsV1Api(api), client.RbacAuthorizationV1Api(api)
    assert [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == []
    assert [r.metadata.name for r in rbac.list_namespaced_role(namespace).items] == []
    assert [b.metadata.name for b in rbac.list_namespaced_role_binding(namespace).items] == []
    cm = core.read_namespaced_config_map("adopt-model-repo", namespace)
    sa = core.read_namespaced_service_account("adopt-gateway", namespace)
    assert cm.metadata.owner_references is None and sa.metadata.owner_references is None
    assert cm.data == {"keep": "me"} and cm.metadata.labels == {"app": "mine"} and sa.metadata.labels is None
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adopt")
    wait_for(lambda: not client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"], 30, "InferenceService deleted")
    wait_for(lambda: not [s for s in core.list_namespaced_service(namespace).items if s.metadata.name == "adopt"],
             60, "its own Service garbage-collected")
    assert core.read_namespaced_config_map("adopt-model-repo", namespace).data == {"keep": "me"}
    assert core.read_namespaced_service_account("adopt-gateway", namespace).metadata.name == "adopt-gateway"
