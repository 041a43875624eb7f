"""The demo overlaps the runtime image and Prometheus builds with the control plane's (issue 23 item 0: cold
set-up time); on a cluster that will be KWOK-only it starts neither (the image would be built for nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from modalscale.demo import run as demo_run


def _demo(real_node: bool | None) -> demo_run.Demo:
    cfg = demo_run.DemoConfig(real_node=real_node)
    return demo_run.Demo(cfg, say=lambda line: None)


@pytest.mark.parametrize(("real_node", "missing"), [
    (False, []),  # --no-real-node
    (None, ["root (the kubelet, containerd and CNI need uid 0)"]),  # a machine that cannot run a real node
])
def test_no_background_build_when_the_cluster_will_be_kwok_only(monkeypatch: pytest.MonkeyPatch,
                                                                 real_node: bool | None, missing: list[str]) -> None:
    import modalscale.devenv.realnode as realnode

    monkeypatch.setattr(realnode, "machine_support", lambda: missing)
    monkeypatch.delenv("MODALSCALE_REAL_NODE", raising=False)
    demo = _demo(real_node=real_node)
    try:
        demo.start_builds()
        assert demo.image_build is None and demo.prometheus_build is None
    finally:
        demo.close()


def test_builds_start_before_the_cluster_and_their_result_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import modalscale.devenv.binaries as binaries
    import modalscale.devenv.images as images
    import modalscale.devenv.realnode as realnode

    calls: list[str] = []
    monkeypatch.setattr(realnode, "machine_support", lambda: [])
    monkeypatch.setattr(images, "build_images", lambda names, log: calls.append(f"image {names}") or ["IMG"])
    monkeypatch.setattr(binaries, "ensure_prometheus", lambda log: calls.append("prometheus") or "PROM")
    monkeypatch.delenv(demo_run.REUSE_IMAGE_ENV, raising=False)
    demo = _demo(real_node=True)
    try:
        demo.start_builds()
        assert demo.image_build is not None and demo.prometheus_build is not None
        got: Any = demo.image_build.result(timeout=5)
        assert got == ["IMG"] and demo.prometheus_build.result(timeout=5) == "PROM"
        # the gateway's pods run the operator image
        assert sorted(calls) == ["image ['runtime-cpu', 'operator']", "prometheus"]
    finally:
        demo.close()
