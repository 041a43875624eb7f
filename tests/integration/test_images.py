"""The images built from this repository for real: a debootstrap base, the operator image from Dockerfile.operator
and the CPU runtime image from Dockerfile.runtime-cpu (buildah, no daemon, no registry), then run with no
container engine: the operator's entrypoint in a chroot as the chart's user, and a real ``tritonserver`` from the
CPU runtime image under ``runc`` (read-only root filesystem, uid 1000, the operator's own arguments) answering an
image + text request, with the preStop drain run inside the container.

Build times (cold on a fresh cache, warm on the second call) and sizes are printed, never asserted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from modalscale.devenv.image_rootfs import mounted_rootfs
from modalscale.devenv.images import (
    BuiltImage,
    archive_layers,
    archive_manifest,
    archive_paths,
    build_images,
    missing_tools,
    operator_reference,
    runtime_cpu_reference,
    stage_context,
)
from modalscale.devenv.kube import wait_for

# A cold build of both images takes minutes (about 8 on a loaded 2-core machine), inside the first test's limit.
pytestmark = pytest.mark.timeout(2400)

REPO = Path(__file__).resolve().parents[2]
VALUES = yaml.safe_load((REPO / "charts" / "modalscale" / "values.yaml").read_text())


def snapshot(dest: Path) -> Path:
    """A copy of what the image builds read (the build context, the Dockerfiles, the chart's image settings), so
    edits to the working tree during the minutes a cold build takes do not change the second call's inputs."""
    stage_context(REPO, dest)
    for dockerfile in REPO.glob("Dockerfile.*"):
        shutil.copy2(dockerfile, dest / dockerfile.name)
    (dest / "charts" / "modalscale").mkdir(parents=True)
    for name in ("Chart.yaml", "values.yaml"):
        shutil.copy2(REPO / "charts" / "modalscale" / name, dest / "charts" / "modalscale" / name)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BuiltImage]:
    """Both images, built (or found in ~/.cache/modalscale/images) once per module; a second call builds nothing."""
    missing = missing_tools()
    assert not missing, f"image builds need {missing}: scripts/env.sh installs them (run as root)"
    repo = snapshot(tmp_path_factory.mktemp("repo-snapshot") / "repo")
    started = time.monotonic()
    first = build_images(log=lambda m: print(m, flush=True), repo=repo)
    first_s = time.monotonic() - started
    for b in first:
        how = "found in the cache" if b.cached else (
            f"built in {b.build_s:.1f} s (this call; deps " + ("cached" if b.deps_cached else f"{b.deps_build_s:.1f} s")
            + f", code layer {b.code_build_s:.1f} s, push {b.push_s:.1f} s)")
        print(f"image {b.full_ref}: {b.unpacked_bytes / 1e6:.0f} MB unpacked, {b.size_bytes / 1e6:.0f} MB of "
              f"layers (gzip), {how}")
    started = time.monotonic()
    second = build_images(log=lambda m: print(m, flush=True), repo=repo)
    print(f"images build: first call {first_s:.1f} s, second call with no change {time.monotonic() - started:.1f} s")
    assert [b.cached for b in second] == [True, True], "a second build with unchanged inputs rebuilt an image"
    assert [b.archive for b in second] == [b.archive for b in first]
    return {b.name: b for b in second}


def layer_paths(archive: Path, digest: str) -> set[str]:
    """Paths in one layer of the image in ``archive``."""
    import tarfile

    algo, _, hexd = digest.partition(":")
    with tarfile.open(archive) as outer:
        fh = outer.extractfile(f"blobs/{algo}/{hexd}")
        assert fh is not None
        with tarfile.open(fileobj=fh, mode="r|*") as inner:
            return {m.name.removeprefix("./").lstrip("/") for m in inner}


def test_images_are_a_base_a_deps_and_a_small_code_layer(built: dict[str, BuiltImage]) -> None:
    """The code stage is built on the cached deps image: the project's package is in the last layer only, which
    is small, so a code edit rebuilds and re-imports only that layer."""
    for name, image in built.items():
        archive = Path(image.archive)
        layers = archive_layers(archive)
        assert [size for _, size in layers] == image.layer_sizes and len(layers) == 3, (name, layers)
        code = layer_paths(archive, layers[2][0])
        assert any(re.search(r"site-packages/modalscale/runtime/drain\.py$", p) for p in code), name
        assert not any("/src/" in p or p.endswith("README.md") for p in code if "site-packages" not in p), name
        assert layers[2][1] < 0.05 * sum(size for _, size in layers), (name, layers)
        print(f"image {image.ref}: layers (gzip) base {layers[0][1] / 1e6:.1f} MB, deps {layers[1][1] / 1e6:.1f} MB, "
              f"code {layers[2][1] / 1e6:.2f} MB")
    # The operator's deps layer (small enough to read here) has every dependency and none of the project.
    archive = Path(built["operator"].archive)
    manifest, _ = archive_manifest(archive)
    deps = layer_paths(archive, manifest["layers"][1]["digest"])
    assert site_packages(deps) >= {"kopf", "kubernetes", "sklearn"} and "modalscale" not in site_packages(deps)


def site_packages(paths: set[str]) -> set[str]:
    """Top-level entries of every site-packages directory in an image's file list."""
    return {p.split("site-packages/", 1)[1].split("/")[0] for p in paths if re.search(r"site-packages/.+", p)}


def test_images_carry_the_names_the_chart_and_the_example_use(built: dict[str, BuiltImage]) -> None:
    chart = yaml.safe_load((REPO / "charts" / "modalscale" / "Chart.yaml").read_text())
    assert built["operator"].ref == operator_reference() == f"modalscale/operator:{chart['appVersion']}"
    assert built["operator"].full_ref == f"docker.io/modalscale/operator:{chart['appVersion']}"
    example = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
    runtime = example["spec"]["runtime"]
    assert f"{runtime['image']}:{runtime['version']}" == built["runtime-cpu"].ref == runtime_cpu_reference()


def test_operator_image_has_no_torch_and_runs_as_the_chart_user(built: dict[str, BuiltImage], tmp_path: Path) -> None:
    archive = Path(built["operator"].archive)
    packages = site_packages(archive_paths(archive))
    assert {"kopf", "kubernetes", "sklearn", "modalscale"} <= packages
    assert not {p for p in packages if p.lower().startswith(("torch", "nvidia", "transformers", "triton/", "triton-"))
                or p == "triton"}, packages

    with mounted_rootfs(archive, tmp_path / "image", log=lambda m: print(m, flush=True)) as (rootfs, config):
        _operator_image_runs_as_the_chart_user(rootfs, config)


def _operator_image_runs_as_the_chart_user(rootfs: Path, config: dict[str, Any]) -> None:
    uid = VALUES["securityContext"]["runAsUser"]
    assert config["User"] == f"{uid}:{VALUES['securityContext']['runAsGroup']}"
    assert config["Entrypoint"] == ["modalscale", "operator"]
    env = dict(e.split("=", 1) for e in config["Env"])
    proc = subprocess.run(["chroot", f"--userspec={config['User']}", str(rootfs), *config["Entrypoint"], "--help"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: modalscale operator" in proc.stdout
    # Nothing of torch is importable in the image's interpreter either.
    proc = subprocess.run(["chroot", f"--userspec={config['User']}", str(rootfs), "python3", "-c",
                           "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('kopf') is not None)"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.split() == ["None", "True"], proc.stderr[-2000:]


# ---------------------------------------------------------------------------------------------- runtime under runc
def free_port() -> int:
    from modalscale.runtime.server import free_port as fp

    return fp()


def runc_config(rootfs: Path, args: list[str], env: list[str], uid: int, mounts: list[dict[str, Any]],
                bundle: Path) -> dict[str, Any]:
    """``runc spec``'s default config, changed to: no terminal, ``args``/``env`` as uid:gid ``uid``, read-only
    root, a writable /tmp tmpfs plus ``mounts``, and the host's network namespace (loopback ports)."""
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True, capture_output=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"].update({"terminal": False, "args": args, "env": env, "cwd": "/tmp",
                            "user": {"uid": uid, "gid": uid}})
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["mounts"] += [{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                        "options": ["nosuid", "nodev", "mode=1777", "size=1g"]}, *mounts]
    spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"] if n["type"] != "network"]
    return spec


@pytest.fixture(scope="module")
def runtime_rootfs(built: dict[str, BuiltImage], tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The CPU runtime image as one read-only tree per module (``(rootfs, image config)``), shared by every container
    of the module (unpacking its 3 GB of gzip layers took 50-120 s per test; :func:`mounted_rootfs` unpacks the
    dependency layers once per their change and mounts the code layer over them)."""
    started = time.monotonic()
    with mounted_rootfs(Path(built["runtime-cpu"].archive), tmp_path_factory.mktemp("runtime-image"),
                        log=lambda m: print(m, flush=True)) as (rootfs, config):
        print(f"runtime image root filesystem ready in {time.monotonic() - started:.1f} s", flush=True)
        yield rootfs, config


@pytest.fixture
def runtime_container(runtime_rootfs: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
                      request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """tritonserver from the CPU runtime image under runc, with the arguments, env, uid and read-only root the
    operator's Deployment gives it (ports moved to free loopback ports), serving the BuiltIn model repository of
    crds/examples/inferenceservice-real-node.yaml, its ``spec.runtime`` updated with the test's indirect parameter
    (a mapping) when it has one. The root filesystem is the module's (:func:`runtime_rootfs`), mounted read-only."""
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.objects import build_deployment
    from modalscale.runtime.repo_config import RuntimeConfig, build_repository
    from modalscale.runtime.server import write_repository

    work = tmp_path_factory.mktemp("runtime-image")
    (work / "bundle").mkdir()
    rootfs, config = runtime_rootfs
    body = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
    body["metadata"].update({"namespace": "default", "uid": "1"})
    body["spec"].setdefault("runtime", {}).update(getattr(request, "param", None) or {})
    spec = parse_isvc(body)
    files = build_repository(RuntimeConfig.from_typed(spec.model, spec.runtime, spec.resources))
    # As a ConfigMap volume lays it out: the files under the kubelet's ..data link, which the pod's
    # --model-repository names (the volume root also holds ..data and ..<timestamp>).
    write_repository(files, work / "models" / "..data")
    container = build_deployment(spec, 1, files)["spec"]["template"]["spec"]["containers"][0]
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    args = [a for a in container["args"] if not a.startswith(("--http-port", "--grpc-port", "--metrics-port"))]
    args += [f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}", f"--metrics-port={ports['metrics']}"]
    env = config["Env"] + [f"{e['name']}={e['value']}" for e in container["env"]]
    uid = container["securityContext"]["runAsUser"]
    spec_json = runc_config(rootfs, container["command"] + args, env, uid,
                            [{"destination": "/models", "type": "bind", "source": str(work / "models"),
                              "options": ["rbind", "ro"]}], work / "bundle")
    (work / "bundle" / "config.json").write_text(json.dumps(spec_json))
    state = work / "runc-state"
    cid = f"ms-img-{uuid.uuid4().hex[:8]}"
    log_path = work / "tritonserver.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["runc", "--root", str(state), "run", "--bundle", str(work / "bundle"), cid],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    info = {"cid": cid, "state": state, "ports": ports, "proc": proc, "log": log_path, "container": container,
            "model": spec.model.name}
    try:
        yield info
    finally:
        subprocess.run(["runc", "--root", str(state), "kill", cid, "KILL"], capture_output=True, check=False)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["runc", "--root", str(state), "delete", "--force", cid], capture_output=True, check=False)


def wait_model_ready(info: dict[str, Any]) -> float:
    """Seconds until Triton in the container answers 200 on ``/v2/models/<name>/ready``."""
    url = f"http://127.0.0.1:{info['ports']['http']}/v2/models/{info['model']}/ready"

    def ready() -> bool:
        assert info["proc"].poll() is None, f"runc exited {info['proc'].returncode}:\n{info['log'].read_text()[-4000:]}"
        try:
            return httpx.get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    started = time.monotonic()
    try:
        wait_for(ready, 300, "the model in the CPU runtime image Ready")
    except TimeoutError:
        raise AssertionError(info["log"].read_text()[-4000:]) from None
    return time.monotonic() - started


def pod_probe(info: dict[str, Any], kind: str) -> subprocess.CompletedProcess[str]:
    """Run the Deployment's exec probe ``kind`` (``readinessProbe``/``livenessProbe``) inside the container
    (``runc exec``), its ``--http-port`` moved as the container's ports were."""
    command = [f"--http-port={info['ports']['http']}" if a.startswith("--http-port=") else a
               for a in info["container"][kind]["exec"]["command"]]
    return subprocess.run(["runc", "--root", str(info["state"]), "exec", info["cid"], *command],
                          capture_output=True, text=True, timeout=120, check=False)


def test_cpu_runtime_image_probes_fail_after_a_python_backend_stub_is_killed(
        runtime_container: dict[str, Any]) -> None:
    """The pod's exec probes (modalscale.runtime.health) in the real image, read-only root, uid 1000: ok while it
    serves; after SIGKILL of a Python-backend stub (as the OOM killer does) both fail and name the stub, so the pod
    leaves the Service and the kubelet restarts it, while Triton's own ready endpoint still answers 200."""
    import os
    import signal

    from modalscale.runtime.proctree import descendants

    info = runtime_container
    wait_model_ready(info)
    for kind in ("readinessProbe", "livenessProbe"):
        out = pod_probe(info, kind)
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), out
    state = subprocess.run(["runc", "--root", str(info["state"]), "state", info["cid"]], capture_output=True,
                           text=True, check=True)
    stubs = [p for p in descendants(json.loads(state.stdout)["pid"]) if p.comm.startswith("triton_python")]
    assert stubs, "no Python-backend stub under the container's tritonserver"
    os.kill(stubs[0].pid, signal.SIGKILL)

    def failing() -> subprocess.CompletedProcess[str] | None:
        out = pod_probe(info, "readinessProbe")
        return out if out.returncode != 0 else None

    ready = wait_for(failing, 60, "the readiness probe failing after the stub was killed")
    assert ready.returncode == 1 and "stub" in ready.stdout, ready
    live = pod_probe(info, "livenessProbe")
    assert live.returncode == 1 and "stub" in live.stdout, live
    triton = httpx.get(f"http://127.0.0.1:{info['ports']['http']}/v2/models/{info['model']}/ready", timeout=5)
    print(f"runtime image: after SIGKILL of stub {stubs[0].pid}: readiness probe {ready.stdout.strip()!r}; "
          f"Triton's own ready endpoint {triton.status_code}")


def test_cpu_runtime_image_serves_an_image_and_text_request_read_only_as_uid_1000(
        runtime_container: dict[str, Any]) -> None:
    from modalscale.runtime.client import MultimodalClient
    from modalscale.runtime.workload import photo_bytes

    info = runtime_container
    print(f"runtime image: model Ready {wait_model_ready(info):.1f} s after runc run")
    for kind in ("readinessProbe", "livenessProbe"):  # the pod's own checks, run in the container
        out = pod_probe(info, kind)
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), out

    with MultimodalClient(f"127.0.0.1:{info['ports']['http']}", model_name=info["model"]) as client:
        result = client.infer(images=[photo_bytes("chelsea")], text="a photo of a cat")
    assert result.modality == "image_text"
    assert result.embedding.shape == (256,) and abs(float((result.embedding ** 2).sum()) - 1.0) < 1e-3
    assert result.image_classes.shape == (1,) and int(result.image_classes[0]) >= 0

    state = subprocess.run(["runc", "--root", str(info["state"]), "state", info["cid"]], capture_output=True,
                           text=True, check=True)
    pid = json.loads(state.stdout)["pid"]
    status = Path(f"/proc/{pid}/status").read_text()
    assert re.search(r"^Uid:\s+1000\s", status, re.M), status  # tritonserver runs as the pods' uid
    # The root filesystem is read-only for it, /tmp is not.
    write = subprocess.run(["runc", "--root", str(info["state"]), "exec", info["cid"], "python3", "-c",
                            "import pathlib\nfor p in ('/opt/x', '/tmp/x'):\n"
                            "    try: pathlib.Path(p).write_text('x'); print(p, 'ok')\n"
                            "    except OSError as e: print(p, e.errno)"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert write.stdout.split("\n")[:2] == ["/opt/x 30", "/tmp/x ok"], write.stdout + write.stderr  # 30: EROFS

    # The preStop hook of the operator's Deployment runs in the container and ends with nothing in flight.
    hook = info["container"]["lifecycle"]["preStop"]["exec"]["command"]
    hook = [a.replace(":8002/", f":{info['ports']['metrics']}/") for a in hook]
    hook = [a if not a.startswith("--quiet-s") else "--quiet-s=1" for a in hook]
    started = time.monotonic()
    drain = subprocess.run(["runc", "--root", str(info["state"]), "exec", info["cid"], *hook],
                           capture_output=True, text=True, timeout=120, check=False)
    assert drain.returncode == 0, drain.stdout + drain.stderr
    print(f"runtime image: preStop drain exited 0 in {time.monotonic() - started:.1f} s: {drain.stdout.strip()[-200:]}")

    # SIGTERM: Triton's own drain, then exit well inside the pod's grace period.
    started = time.monotonic()
    subprocess.run(["runc", "--root", str(info["state"]), "kill", info["cid"], "TERM"], check=True)
    info["proc"].wait(timeout=120)
    print(f"runtime image: exited {time.monotonic() - started:.1f} s after SIGTERM (code {info['proc'].returncode})")


@pytest.mark.parametrize("runtime_container", [{"engine": "openvino", "precision": "INT8"}], indirect=True,
                         ids=["openvino-int8"])
def test_cpu_runtime_image_serves_an_openvino_int8_inference_service_read_only(
        runtime_container: dict[str, Any]) -> None:
    """``spec.runtime.engine: openvino`` with ``precision: INT8`` (the fastest preset's encoders): the image's
    models load (OpenVINO and NNCF are in it; the IR is converted and calibrated at start under the read-only root,
    into HOME=/tmp) and answer within cosine 0.99 of torch FP32 on the host."""
    from modalscale.runtime.client import MultimodalClient
    from modalscale.runtime.model.encoders import MultimodalEncoder
    from modalscale.runtime.model.pipeline import MultimodalPipeline
    from modalscale.runtime.model.settings import ModelSettings
    from modalscale.runtime.repo_config import Precision
    from modalscale.runtime.workload import photo_bytes

    info = runtime_container
    print(f"runtime image, engine openvino INT8: model Ready {wait_model_ready(info):.1f} s after runc run")
    image, text = photo_bytes("chelsea"), "a photo of a cat sitting on a table"
    with MultimodalClient(f"127.0.0.1:{info['ports']['http']}", model_name=info["model"]) as client:
        result = client.infer(images=[image], text=text)
    assert result.modality == "image_text"
    cache = subprocess.run(["runc", "--root", str(info["state"]), "exec", info["cid"], "sh", "-c",
                            "ls /tmp/.cache/modalscale/openvino"], capture_output=True, text=True, timeout=60,
                           check=False)
    assert cache.returncode == 0 and cache.stdout.strip(), cache.stdout + cache.stderr  # the IR went to HOME=/tmp

    reference = MultimodalPipeline(ModelSettings(embedding_cache=False, precision=Precision.FP32),
                                   MultimodalEncoder(Precision.FP32))
    ref = reference.run([reference.prepare(np.array([[image]], dtype=object),
                                           np.array([[text.encode()]], dtype=object))])[0]
    got = np.asarray(result.embedding, dtype=np.float64).ravel()
    want = np.asarray(ref.embedding, dtype=np.float64).ravel()
    cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    print(f"runtime image, engine openvino INT8: cosine to torch FP32 on the host {cosine:.5f}")
    assert cosine >= 0.99, cosine


# ---------------------------------------------------------------------------------------------- on the real node
def test_runtime_pods_on_the_real_node_answer_through_the_service_and_scaling_1_3_1_loses_no_request(
        real_node_cluster: Any, api: Any, crds_installed: list[str], built: dict[str, BuiltImage],
        tmp_path: Path) -> None:
    """crds/examples/inferenceservice-real-node.yaml reconciled by a real operator: its pods run the CPU runtime
    image on the real node (500m CPU limit each), become Ready on /v2/models/<name>/ready, and answer a real
    image + text request through the ClusterIP Service (kube-proxy). Then, under a steady stream of requests (a
    new connection each, through the Service), the replicas go 1 -> 3 -> 1: every request sent gets an answer
    (the scale-down runs the preStop drain in the real containers)."""
    import threading

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from modalscale.devenv.images import import_into_cluster
    from modalscale.devenv.operator_process import OperatorProcess
    from modalscale.devenv.realnode import NODE_TYPE_LABEL, NODE_TYPE_REAL
    from modalscale.runtime.client import MultimodalClient
    from modalscale.runtime.workload import photo_at, photo_bytes

    cluster = real_node_cluster
    seconds = import_into_cluster(built["runtime-cpu"], cluster.workdir, log=lambda m: print(m, flush=True))
    print(f"runtime image imported into the real node's containerd in {seconds:.1f} s")
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    ns = f"real-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    op = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log",
                         {"MODALSCALE_NAMESPACES": ns, "MODALSCALE_STANDALONE": "true"})
    body = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
    # The direct Service (kube-proxy to the replicas): 3 replicas of 500m fill the node's 1500m, leaving no room for
    # gateway pods (on by default; tests/integration/operator/test_gateway_real_node.py runs the gateway there).
    body["spec"]["gateway"] = {"enabled": False}
    name = body["metadata"]["name"]
    selector = f"modalscale.io/inferenceservice={name}"

    def pods() -> list[Any]:
        return core.list_namespaced_pod(ns, label_selector=selector).items

    def describe() -> str:
        lines = []
        for p in pods():
            waiting = [(s.state.waiting.reason if s.state.waiting else None) for s in p.status.container_statuses or []]
            lines.append(f"{p.metadata.name} {p.status.phase} node={p.spec.node_name} waiting={waiting}")
        obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", name)
        return "\n".join(lines) + f"\nstatus: {json.dumps(obj.get('status'))[:1500]}\noperator:\n{op.log()[-1500:]}"

    def ready_replicas(n: int) -> bool:
        try:
            deploy = apps.read_namespaced_deployment(name, ns)
        except ApiException as exc:
            if exc.status == 404:  # the operator has not created it yet
                return False
            raise
        running = [p for p in pods() if p.metadata.deletion_timestamp is None]
        return (deploy.status.ready_replicas or 0) == n and len(running) == n and len(pods()) == n

    def wait_replicas(n: int, timeout_s: float) -> float:
        started = time.monotonic()
        try:
            wait_for(lambda: ready_replicas(n), timeout_s, f"{n} ready runtime pods and no other")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{describe()}") from None
        return time.monotonic() - started

    def scale(n: int) -> None:
        custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", name,
                                              {"spec": {"scaling": {"replicas": n}}})

    try:
        op.wait_healthy()
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", body)
        print(f"first replica Ready after {wait_replicas(1, 600):.1f} s (image cached)")
        pod = pods()[0]
        assert core.read_node(pod.spec.node_name).metadata.labels.get(NODE_TYPE_LABEL) == NODE_TYPE_REAL
        limits = pod.spec.containers[0].resources.limits
        assert limits["cpu"] == "500m", limits
        assert pod.spec.containers[0].readiness_probe._exec.command[-1] == f"--model={body['spec']['model']['name']}"
        service_ip = core.read_namespaced_service(name, ns).spec.cluster_ip
        url = f"{service_ip}:8000"
        with MultimodalClient(url, model_name=body["spec"]["model"]["name"], timeout_s=120) as c:
            result = c.infer(images=[photo_bytes("chelsea")], text="a photo of a cat")
        assert result.modality == "image_text" and result.embedding.shape == (256,)

        sent, answered, errors = [0], [0], []
        stop = threading.Event()
        image = photo_at("coffee", 160, 120)

        def load() -> None:
            while not stop.is_set():
                sent[0] += 1
                try:  # a new connection per request, so each one goes through kube-proxy's current endpoints
                    with MultimodalClient(url, model_name=body["spec"]["model"]["name"], timeout_s=120) as c:
                        c.infer(images=[image], text="coffee in a cup")
                    answered[0] += 1
                except Exception as exc:  # every failure is recorded and fails the test below
                    errors.append(f"{time.monotonic():.1f} {type(exc).__name__}: {exc}")

        workers = [threading.Thread(target=load, daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            scale(3)
            print(f"1 -> 3: ready after {wait_replicas(3, 600):.1f} s; sent {sent[0]}, answered {answered[0]}")
            mark = answered[0]
            wait_for(lambda: answered[0] >= mark + 10, 180, "10 answers with 3 replicas")
            scale(1)
            print(f"3 -> 1: two pods gone after {wait_replicas(1, 300):.1f} s; sent {sent[0]}, answered {answered[0]}")
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=180)
        print(f"steady load through the Service during 1 -> 3 -> 1: sent {sent[0]}, answered {answered[0]}, "
              f"errors {len(errors)}")
        assert errors == [] and answered[0] == sent[0] > 0, errors[:10]
    finally:
        op.stop()
        core.delete_namespace(ns)


def test_a_runtime_pod_whose_python_backend_stub_is_killed_leaves_the_service_and_is_restarted(
        real_node_cluster: Any, api: Any, crds_installed: list[str], built: dict[str, BuiltImage],
        tmp_path: Path) -> None:
    """On the real node: SIGKILL of the runtime pod's Python-backend stub (as the OOM killer does). Triton keeps
    answering 200 on its own ready endpoint, but the pod's probes (modalscale.runtime.health) see the dead stub:
    the pod turns unready (its endpoint leaves the Service), the kubelet restarts the container, and the replica
    is Ready again and answers."""
    import os
    import signal

    from kubernetes import client

    from modalscale.devenv.images import import_into_cluster
    from modalscale.devenv.operator_process import OperatorProcess
    from modalscale.runtime.client import MultimodalClient

    cluster = real_node_cluster
    import_into_cluster(built["runtime-cpu"], cluster.workdir, log=lambda m: print(m, flush=True))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"stub-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    op = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log",
                         {"MODALSCALE_NAMESPACES": ns, "MODALSCALE_STANDALONE": "true"})
    body = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
    body["spec"]["gateway"] = {"enabled": False}  # the Service's own endpoints are the pod's (no gateway pods)
    name, model = body["metadata"]["name"], body["spec"]["model"]["name"]

    def pod() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"modalscale.io/inferenceservice={name}").items
        return pods[0] if len(pods) == 1 else None

    def ready(p: Any) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])

    def endpoints() -> list[str]:
        subsets = core.read_namespaced_endpoints(name, ns).subsets or []
        return [a.ip for s in subsets for a in s.addresses or []]

    try:
        op.wait_healthy()
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", body)
        first = wait_for(lambda: (p := pod()) is not None and ready(p) and p, 600, "the runtime pod Ready",
                         interval_s=1)
        wait_for(lambda: endpoints() == [first.status.pod_ip], 60, "the pod in the Service's endpoints")
        cid = first.status.container_statuses[0].container_id.split("://", 1)[1]
        stubs = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if cid in (entry / "cgroup").read_text() and (entry / "comm").read_text().startswith(
                            "triton_python"):
                        stubs.append(int(entry.name))
                except OSError:
                    continue
        assert stubs, "no Python-backend stub in the runtime container"
        http = f"{first.status.pod_ip}:8000"
        os.kill(stubs[0], signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not ready(core.read_namespaced_pod(first.metadata.name, ns)), 120, "the pod unready")
        unready_s = time.monotonic() - killed
        wait_for(lambda: endpoints() == [], 60, "the pod out of the Service's endpoints")
        out_s = time.monotonic() - killed
        triton = httpx.get(f"http://{http}/v2/models/{model}/ready", timeout=10).status_code
        def restarted_and_ready() -> Any:
            p = core.read_namespaced_pod(first.metadata.name, ns)
            statuses = p.status.container_statuses or []
            return p if statuses and statuses[0].restart_count >= 1 and ready(p) else None

        restarted = wait_for(restarted_and_ready, 600, "the container restarted and Ready again", interval_s=1)
        back_s = time.monotonic() - killed
        with MultimodalClient(http, model_name=model, timeout_s=120) as c:
            assert c.infer(text="a table after the restart").modality == "text"
        wait_for(lambda: endpoints() == [restarted.status.pod_ip], 60, "the pod back in the Service's endpoints")
        last = restarted.status.container_statuses[0].last_state.terminated
        print(f"stub {stubs[0]} killed: pod unready after {unready_s:.0f} s, out of the endpoints after {out_s:.0f} s "
              f"(Triton's own ready endpoint meanwhile: {triton}); container restarted (last exit: "
              f"{last.reason if last else None}, code {last.exit_code if last else None}) and Ready again after "
              f"{back_s:.0f} s")
    finally:
        op.stop()
        core.delete_namespace(ns)
