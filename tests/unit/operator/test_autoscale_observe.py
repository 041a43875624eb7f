"""Prometheus answers -> the autoscaler's Observation (pure parser), on answers recorded from a real Prometheus
scraping the real Triton runtime, and on hand-made variants of them."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import re
from typing import Any

import pytest

from modalscale.api.conditions import (
    INCOMPLETE_FEATURES,
    METRICS_CONTRADICT,
    NEGATIVE_RATE,
    NO_REQUEST_METRICS,
    NO_SCRAPE_TARGETS,
    NON_FINITE_METRICS,
    PARTIAL_TARGETS,
    PARTIAL_WINDOW,
    PROMETHEUS_NOT_CONFIGURED,
    SCRAPE_TARGETS_DOWN,
    UNKNOWN_SAMPLE_TIME,
)
from modalscale.autoscaler.features import Modality
from modalscale.autoscaler.metrics_parse import parse_answers
from modalscale.autoscaler.policy import Reason, ScalerState, ScalingMode, ScalingPolicy, recommend
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor
from modalscale.operator.autoscale.observe import PrometheusReader, build_observation, build_queries, selector
from modalscale.operator.autoscale.plan import STALE_METRICS, plan_autoscale
from tests.factories import as_status

T = 1796040026.556  # evaluation time of the recording


def _answer(rows: list[tuple[dict[str, str], str]]) -> list[dict[str, Any]]:
    return [{"metric": labels, "value": [T, value]} for labels, value in rows]


# Recorded on 2026-11-30 from Prometheus 2.x scraping `tritonserver` (nvidia-pytriton 0.7.0) serving the default
# RuntimeConfig (router + per-modality batched models) under a 3 req/s mixed trace; a second target labelled with
# the same InferenceService pointed at a closed port (down). Labels other than modality/model/instance dropped.
RECORDED: dict[str, list[dict[str, Any]]] = {
    "requests": _answer([({"modality": "image"}, "0.34242666666666666"),
                         ({"modality": "image_text"}, "0.4965186666666666"),
                         ({"modality": "text"}, "0.5478826666666666")]),
    "recent_requests": _answer([({"modality": "image"}, "0.7142857142857142"),
                                ({"modality": "image_text"}, "1.357142857142857"),
                                ({"modality": "text"}, "1.2857142857142856")]),
    "images": _answer([({}, "1.5751626666666665")]),
    "recent_images": _answer([({}, "3.142857142857143")]),
    "pixels": _answer([({}, "488974.32234666665")]),
    "recent_pixels": _answer([({}, "734134.8571428572")]),
    "tokens": _answer([({}, "55.19917866666666")]),
    "recent_tokens": _answer([({}, "122.85714285714285")]),
    "nv_count": _answer([({"model": "multimodal"}, "1.386828"), ({"model": "multimodal_image"}, "0.34242666666666666"),
                         ({"model": "multimodal_image_text"}, "0.4965186666666666"),
                         ({"model": "multimodal_text"}, "0.5478826666666666")]),
    "nv_exec": _answer([({"model": "multimodal"}, "1.386828"), ({"model": "multimodal_image"}, "0.30818399999999996"),
                        ({"model": "multimodal_image_text"}, "0.25682"),
                        ({"model": "multimodal_text"}, "0.4965186666666666")]),
    "nv_compute_us": _answer([({"model": "multimodal"}, "2387239.354629333"),
                              ({"model": "multimodal_image"}, "293444.1585266667"),
                              ({"model": "multimodal_image_text"}, "1128346.86784"),
                              ({"model": "multimodal_text"}, "97320.39808")]),
    "nv_success": _answer([({"model": "multimodal"}, "1.386828"),
                           ({"model": "multimodal_image"}, "0.34242666666666666"),
                           ({"model": "multimodal_image_text"}, "0.4965186666666666"),
                           ({"model": "multimodal_text"}, "0.5478826666666666")]),
    "nv_request_us": _answer([({"model": "multimodal"}, "2387814.9567346666"),
                              ({"model": "multimodal_image"}, "385808.8894013333"),
                              ({"model": "multimodal_image_text"}, "1847504.1098520001"),
                              ({"model": "multimodal_text"}, "130200.48142133332")]),
    "nv_pending": _answer([({"model": "multimodal"}, "0"), ({"model": "multimodal_image"}, "0"),
                           ({"model": "multimodal_image_text"}, "0"), ({"model": "multimodal_text"}, "0")]),
    "nv_p95_us": [],
    "up": _answer([({"instance": "127.0.0.1:18002"}, "1"), ({"instance": "127.0.0.1:18999"}, "0")]),
    "scraped": _answer([({"instance": "127.0.0.1:18002"}, "1796040026.374"),
                        ({"instance": "127.0.0.1:18999"}, "1796040026.556")]),
}

T_LABELLED = 1796049435.144  # evaluation time of the second recording


def _answer_at(t: float, rows: list[tuple[dict[str, str], str]]) -> list[dict[str, Any]]:
    return [{"metric": labels, "value": [t, value]} for labels, value in rows]


# Recorded on 2026-11-30 from Prometheus scraping `tritonserver` serving the default RuntimeConfig with the feature
# histograms labelled by modality and --metrics-config=summary_latencies=true, under a 3 req/s mixed
# synthetic_trace(seed=5) of 70 s; one target. Labels other than modality/model/instance dropped.
RECORDED_LABELLED: dict[str, list[dict[str, Any]]] = {key: _answer_at(T_LABELLED, rows) for key, rows in {
    "requests": [({"modality": "image"}, "0.9321559920681999"), ({"modality": "image_text"}, "0.7287765028896835"),
                 ({"modality": "text"}, "1.2541735166008507")],
    "recent_requests": [({"modality": "image"}, "0.9283724916089409"),
                        ({"modality": "image_text"}, "0.7141326858530315"),
                        ({"modality": "text"}, "1.3568521031207597")],
    "images": [({"modality": "image"}, "1.457553005779367"), ({"modality": "image_text"}, "1.355863261190109"),
               ({"modality": "text"}, "0")],
    "recent_images": [({"modality": "image"}, "1.571091908876669"), ({"modality": "image_text"}, "1.571091908876669"),
                      ({"modality": "text"}, "0")],
    "pixels": [({"modality": "image"}, "604979.6789993729"), ({"modality": "image_text"}, "409527.1087910784")],
    "recent_pixels": [({"modality": "image"}, "532877.8118974505"),
                      ({"modality": "image_text"}, "370169.8207526958")],
    "tokens": [({"modality": "image_text"}, "38.642102943918104"), ({"modality": "text"}, "58.98005186176974")],
    "recent_tokens": [({"modality": "image_text"}, "47.98971648932371"), ({"modality": "text"}, "57.701921016924935")],
    "nv_count": [({"model": "multimodal"}, "2.898157720793858"), ({"model": "multimodal_image"}, "0.9152077013033235"),
                 ({"model": "multimodal_image_text"}, "0.7287765028896835"),
                 ({"model": "multimodal_text"}, "1.2541735166008507")],
    "nv_exec": [({"model": "multimodal"}, "2.898157720793858"), ({"model": "multimodal_image"}, "0.8982594105384472"),
                ({"model": "multimodal_image_text"}, "0.6948799213599308"),
                ({"model": "multimodal_text"}, "1.2541735166008507")],
    "nv_compute_us": [({"model": "multimodal"}, "350776.8588037896"),
                      ({"model": "multimodal_image"}, "118012.0671830246"),
                      ({"model": "multimodal_image_text"}, "137958.57837737064"),
                      ({"model": "multimodal_text"}, "40144.45028218904")],
    "nv_success": [({"model": "multimodal"}, "2.898157720793858"),
                   ({"model": "multimodal_image"}, "0.9152077013033235"),
                   ({"model": "multimodal_image_text"}, "0.7287765028896835"),
                   ({"model": "multimodal_text"}, "1.2541735166008507")],
    "nv_request_us": [({"model": "multimodal"}, "351236.9032083114"),
                      ({"model": "multimodal_image"}, "129675.91478399403"),
                      ({"model": "multimodal_image_text"}, "171455.19719336304"),
                      ({"model": "multimodal_text"}, "43832.19497313696")],
    "nv_pending": [({"model": "multimodal"}, "0"), ({"model": "multimodal_image"}, "0"),
                   ({"model": "multimodal_image_text"}, "0"), ({"model": "multimodal_text"}, "0")],
    "nv_p95_us": [({"model": "multimodal"}, "417878"), ({"model": "multimodal_image"}, "346134"),
                  ({"model": "multimodal_image_text"}, "591504"), ({"model": "multimodal_text"}, "59406")],
    "up": [({"instance": "127.0.0.1:35699"}, "1")],
    "scraped": [({"instance": "127.0.0.1:35699"}, "1796049435.019")],
}.items()}

RATE = {"text": 0.5478826666666666, "image": 0.34242666666666666, "image_text": 0.4965186666666666}
EXEC = {"text": 0.4965186666666666, "image": 0.30818399999999996, "image_text": 0.25682}
COMPUTE_US = {"text": 97320.39808, "image": 293444.1585266667, "image_text": 1128346.86784}


def by_class(workload: Any) -> dict[str, Any]:
    return {Modality(c.modality).value: c for c in workload}


def test_recorded_answer_gives_per_class_rates_pooled_features_and_per_class_service_times() -> None:
    reading = parse_answers(RECORDED, "multimodal")
    classes = by_class(reading.workload)
    assert set(classes) == {"text", "image", "image_text"}
    image_requests = RATE["image"] + RATE["image_text"]
    text_requests = RATE["text"] + RATE["image_text"]
    for m in classes:
        assert classes[m].rate_rps == pytest.approx(RATE[m])
        batch = RATE[m] / EXEC[m]  # inference count / executions
        assert classes[m].mean_batch_size == pytest.approx(batch)
        # a batch's compute is added to each of its requests: per-request slot time = compute / count / batch
        assert classes[m].observed_service_ms == pytest.approx(COMPUTE_US[m] / 1000 / RATE[m] / batch)
    # recorded before the histograms carried a modality label: means pooled over the classes with the feature
    assert classes["image"].mean_image_count == pytest.approx(1.5751626666666665 / image_requests)
    assert classes["image_text"].mean_image_count == classes["image"].mean_image_count
    assert classes["image"].mean_image_pixels == pytest.approx(488974.32234666665 / image_requests)
    assert classes["text"].mean_text_tokens == pytest.approx(55.19917866666666 / text_requests)
    assert classes["image_text"].mean_text_tokens == classes["text"].mean_text_tokens
    assert classes["image"].mean_text_tokens == 0 and classes["text"].mean_image_count == 0


def test_recorded_answer_router_is_not_an_executing_model() -> None:
    reading = parse_answers(RECORDED, "multimodal")
    # busy slots = sum over the three modality models only (the router only waits on them)
    expected = sum(COMPUTE_US[m] / 1e6 / (RATE[m] / EXEC[m]) for m in RATE)
    assert reading.busy_erlangs == pytest.approx(expected)
    assert reading.extra["mean_latency_ms"] == pytest.approx(2387814.9567346666 / 1.386828 / 1000)
    assert reading.queued_requests == 0.0
    assert reading.p95_latency_ms is None  # Triton's summary quantiles were not enabled


def test_recorded_answer_with_one_target_down_is_read_from_the_other_and_reported_partial() -> None:
    reading = parse_answers(RECORDED, "multimodal")
    assert reading.workload is not None and reading.partial
    assert reading.down_targets == ("127.0.0.1:18999",) and reading.targets_up == 1 and reading.targets_total == 2
    assert reading.problem is not None and reading.problem[0] == PARTIAL_TARGETS
    # the sample time of the live target, not the down one's
    assert reading.observed_at == dt.datetime.fromtimestamp(1796040026.374, dt.UTC)


def test_recent_window_has_its_own_rates_and_no_observed_service() -> None:
    reading = parse_answers(RECORDED, "multimodal")
    recent = by_class(reading.recent_workload)
    assert recent["text"].rate_rps == pytest.approx(1.2857142857142856)
    image_requests = 0.7142857142857142 + 1.357142857142857
    assert recent["image"].mean_image_count == pytest.approx(3.142857142857143 / image_requests)
    assert all(c.observed_service_ms is None for c in recent.values())


def test_recorded_labelled_answer_gives_each_class_its_own_means() -> None:
    reading = parse_answers(RECORDED_LABELLED, "multimodal")
    assert reading.problem is None
    classes = by_class(reading.workload)
    image_rps, image_text_rps, text_rps = 0.9321559920681999, 0.7287765028896835, 1.2541735166008507
    assert classes["image"].mean_image_count == pytest.approx(1.457553005779367 / image_rps)
    assert classes["image_text"].mean_image_count == pytest.approx(1.355863261190109 / image_text_rps)
    assert classes["image"].mean_image_pixels == pytest.approx(604979.6789993729 / image_rps)
    assert classes["image_text"].mean_image_pixels == pytest.approx(409527.1087910784 / image_text_rps)
    assert classes["text"].mean_text_tokens == pytest.approx(58.98005186176974 / text_rps)
    assert classes["image_text"].mean_text_tokens == pytest.approx(38.642102943918104 / image_text_rps)
    assert classes["text"].mean_image_count == 0 and classes["image"].mean_text_tokens == 0
    # the trace sent larger images in image-only requests (673k vs 504k px per request over the whole trace):
    # per-class means keep that apart (649k, 562k); a pooled mean would give both classes 611k
    assert classes["image"].mean_image_pixels > 640_000 > 570_000 > classes["image_text"].mean_image_pixels
    recent = by_class(reading.recent_workload)
    assert recent["image_text"].mean_text_tokens == pytest.approx(47.98971648932371 / 0.7141326858530315)


def test_recorded_labelled_answer_reads_the_routers_p95() -> None:
    reading = parse_answers(RECORDED_LABELLED, "multimodal")
    assert reading.p95_latency_ms == pytest.approx(417.878)  # the client-facing router, not a modality model
    assert reading.extra["mean_latency_ms"] == pytest.approx(351236.9032083114 / 2.898157720793858 / 1000)


def _labelled(answers: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The feature answers as Prometheus returns ``sum by (modality)`` of the labelled histograms: one series per
    label set the runtime creates (text-only requests observe 0 images, so ``images`` has a text series)."""
    answers[prefix + "images"] = _answer([({"modality": "image"}, "0.6"), ({"modality": "text"}, "0"),
                                          ({"modality": "image_text"}, "1.0")])
    answers[prefix + "pixels"] = _answer([({"modality": "image"}, "600000"), ({"modality": "image_text"}, "100000")])
    answers[prefix + "tokens"] = _answer([({"modality": "text"}, "11"), ({"modality": "image_text"}, "40")])
    return answers


def test_histograms_labelled_by_modality_give_per_class_means() -> None:
    classes = by_class(parse_answers(_labelled(copy.deepcopy(RECORDED)), "multimodal").workload)
    assert classes["image"].mean_image_count == pytest.approx(0.6 / RATE["image"])
    assert classes["image_text"].mean_image_count == pytest.approx(1.0 / RATE["image_text"])
    assert classes["image"].mean_image_pixels == pytest.approx(600000 / RATE["image"])
    assert classes["image_text"].mean_image_pixels == pytest.approx(100000 / RATE["image_text"])
    assert classes["text"].mean_text_tokens == pytest.approx(11 / RATE["text"])
    assert classes["image_text"].mean_text_tokens == pytest.approx(40 / RATE["image_text"])
    # a class's features never leak into another's: text has no images, image no tokens
    assert classes["text"].mean_image_count == 0 and classes["text"].mean_image_pixels == 0
    assert classes["image"].mean_text_tokens == 0


def test_labelled_means_differ_from_the_pooled_ones_of_the_same_traffic() -> None:
    labelled = by_class(parse_answers(_labelled(copy.deepcopy(RECORDED)), "multimodal").workload)
    pooled_answers = copy.deepcopy(RECORDED)
    for key in ("images", "pixels", "tokens"):  # the same traffic without the label: one series per histogram
        total = sum(float(s["value"][1]) for s in _labelled({})[key])
        pooled_answers[key] = _answer([({}, str(total))])
    pooled = by_class(parse_answers(pooled_answers, "multimodal").workload)
    pixels_pooled = (600000 + 100000) / (RATE["image"] + RATE["image_text"])
    assert pooled["image"].mean_image_pixels == pytest.approx(pixels_pooled)
    assert pooled["image_text"].mean_image_pixels == pytest.approx(pixels_pooled)
    assert labelled["image"].mean_image_pixels > pixels_pooled > labelled["image_text"].mean_image_pixels
    # the request rates and service times do not depend on the label
    for m in RATE:
        assert labelled[m].rate_rps == pooled[m].rate_rps
        assert labelled[m].observed_service_ms == pooled[m].observed_service_ms


def test_recent_window_reads_its_own_labelled_series() -> None:
    answers = _labelled(copy.deepcopy(RECORDED))  # stable window labelled, recent window still pooled
    answers["recent_pixels"] = _answer([({"modality": "image"}, "2000000"), ({"modality": "image_text"}, "50000")])
    recent = by_class(parse_answers(answers, "multimodal").recent_workload)
    assert recent["image"].mean_image_pixels == pytest.approx(2000000 / 0.7142857142857142)
    assert recent["image_text"].mean_image_pixels == pytest.approx(50000 / 1.357142857142857)
    pooled_images = 3.142857142857143 / (0.7142857142857142 + 1.357142857142857)
    assert recent["image"].mean_image_count == pytest.approx(pooled_images)


def test_rolling_upgrade_with_labelled_and_unlabelled_targets_pools_over_every_series() -> None:
    """Old pods export the histograms without the label, new ones with it: per-class sums would miss the old
    pods' share, so the means are pooled over all series (exact pooled means, not a per-class split)."""
    answers = copy.deepcopy(RECORDED)
    answers["pixels"] = _answer([({}, "300000"), ({"modality": "image"}, "600000"),
                                 ({"modality": "image_text"}, "100000")])
    answers["tokens"] = _answer([({}, "20"), ({"modality": "text"}, "11"), ({"modality": "image_text"}, "40")])
    classes = by_class(parse_answers(answers, "multimodal").workload)
    pixels = (300000 + 600000 + 100000) / (RATE["image"] + RATE["image_text"])
    tokens = (20 + 11 + 40) / (RATE["text"] + RATE["image_text"])
    assert classes["image"].mean_image_pixels == pytest.approx(pixels)
    assert classes["image_text"].mean_image_pixels == pytest.approx(pixels)
    assert classes["text"].mean_text_tokens == pytest.approx(tokens)
    assert classes["image_text"].mean_text_tokens == pytest.approx(tokens)


def test_labelled_histogram_without_a_series_for_an_active_class_is_incomplete() -> None:
    answers = _labelled(copy.deepcopy(RECORDED))
    answers["tokens"] = _answer([({"modality": "text"}, "11")])  # image_text requests arrive, no series
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is None
    assert reading.problem == (INCOMPLETE_FEATURES, "no tokens series for modality image_text")


def test_single_model_layout_pools_service_time_and_batch_size_over_classes() -> None:
    answers = copy.deepcopy(RECORDED)
    answers["nv_count"] = _answer([({"model": "multimodal"}, "2.0")])
    answers["nv_success"] = _answer([({"model": "multimodal"}, "2.0")])  # equal: its batch dimension is the request
    answers["nv_exec"] = _answer([({"model": "multimodal"}, "1.6")])
    answers["nv_compute_us"] = _answer([({"model": "multimodal"}, "500000")])
    reading = parse_answers(answers, "multimodal")
    batch = 2.0 / 1.6
    service_ms = 1000 * (0.5 / batch) / 2.0  # 0.5 s of compute per second over 2 req/s, shared by batch
    assert reading.busy_erlangs == pytest.approx(0.5 / batch)
    for c in reading.workload:
        assert c.mean_batch_size == pytest.approx(batch)
        assert c.observed_service_ms == pytest.approx(service_ms)


def test_response_cache_hits_are_not_executed_requests() -> None:
    """Triton counts a response-cache hit as a success but neither as an inference nor in the compute time: 1 of
    the 3 successful req/s below came from the cache, so the busy time is shared by the 2 executed ones."""
    answers = copy.deepcopy(RECORDED)
    answers["nv_count"] = _answer([({"model": "multimodal"}, "2.0")])
    answers["nv_success"] = _answer([({"model": "multimodal"}, "3.0")])
    answers["nv_exec"] = _answer([({"model": "multimodal"}, "1.6")])
    answers["nv_compute_us"] = _answer([({"model": "multimodal"}, "500000")])
    reading = parse_answers(answers, "multimodal")
    assert reading.busy_erlangs == pytest.approx(0.5 / (2.0 / 1.6))


def test_no_traffic_is_an_empty_workload_not_missing_data() -> None:
    answers = copy.deepcopy(RECORDED)
    for key in ("requests", "images", "pixels", "tokens", "recent_requests"):
        for sample in answers[key]:
            sample["value"][1] = "0"
    # no traffic in Triton either: every rate 0 (compute time without any inference counted would contradict the
    # counters, MetricsContradict below)
    for key in ("nv_count", "nv_exec", "nv_compute_us", "nv_success", "nv_request_us"):
        answers[key] = _answer([({"model": "multimodal_text"}, "0")])
    reading = parse_answers(answers, "multimodal")
    assert reading.workload == () and reading.problem is not None and reading.problem[0] == PARTIAL_TARGETS
    assert reading.busy_erlangs == 0.0


@pytest.mark.parametrize(("change", "reason"), [
    ({"up": []}, NO_SCRAPE_TARGETS),
    ({"up": _answer([({"instance": "a:1"}, "0"), ({"instance": "b:2"}, "0")])}, SCRAPE_TARGETS_DOWN),
    ({"requests": []}, NO_REQUEST_METRICS),
    ({"images": []}, INCOMPLETE_FEATURES),
    ({"tokens": _answer([({}, "0")])}, INCOMPLETE_FEATURES),
], ids=["no-targets", "all-targets-down", "no-request-counter", "no-image-histogram", "tokens-read-zero"])
def test_unusable_answers_give_no_workload_and_say_why(change: dict[str, Any], reason: str) -> None:
    answers = {**copy.deepcopy(RECORDED), **change}
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is None
    assert reading.problem is not None and reading.problem[0] == reason and reading.problem[1]


def test_missing_data_makes_the_policy_hold_instead_of_scaling() -> None:
    reading = parse_answers({**copy.deepcopy(RECORDED), "requests": []}, "multimodal")
    now = reading.observed_at
    obs = build_observation(reading, current_replicas=3, ready_replicas=3, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    decision = recommend(obs, ScalingPolicy(), ScalerState(), _model(), now)
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 3, Reason.HELD_NO_METRICS)


def test_observation_utilization_is_busy_slots_over_ready_slots() -> None:
    reading = parse_answers(RECORDED, "multimodal")
    now = reading.observed_at + dt.timedelta(seconds=1)
    obs = build_observation(reading, current_replicas=3, ready_replicas=2, slots_per_replica=2,
                            budget_max_replicas=4, now=now)
    assert obs.utilization_ratio == pytest.approx(reading.busy_erlangs / 4)
    assert obs.observed_at == reading.observed_at and obs.budget_max_replicas == 4
    assert obs.window_s == 60 and obs.recent_window_s == 15
    none_ready = build_observation(reading, current_replicas=3, ready_replicas=0, slots_per_replica=2,
                                   budget_max_replicas=None, now=now)
    assert none_ready.utilization_ratio is None


def _model() -> ServiceTimeRegressor:
    return ServiceTimeRegressor().fit(generate_profile(400, random_state=1))


def _with_only(modality: str, rate_rps: float = 5.0) -> dict[str, Any]:
    """The recorded answer with all traffic in one class: text of 40 tokens or two 640x480 images per request."""
    answers = copy.deepcopy(RECORDED)
    images = 2 if modality == "image" else 0
    answers["requests"] = _answer([({"modality": modality}, str(rate_rps))])
    answers["images"] = _answer([({}, str(rate_rps * images))])
    answers["pixels"] = _answer([({}, str(rate_rps * images * 640 * 480))])
    answers["tokens"] = _answer([({}, str(rate_rps * 40 if modality == "text" else 0))])
    answers["recent_requests"] = []
    return answers


def test_same_rate_image_heavy_traffic_needs_more_replicas_than_text_only() -> None:
    policy = ScalingPolicy(target_p95_latency_ms=2000, max_replicas=50)
    model = _model()
    desired = {}
    for modality in ("text", "image"):
        reading = parse_answers(_with_only(modality), "multimodal")
        now = reading.observed_at
        obs = build_observation(reading, current_replicas=1, ready_replicas=1, slots_per_replica=1,
                                budget_max_replicas=None, now=now)
        decision = recommend(obs, policy, ScalerState(), model, now)
        assert decision.valid and decision.mode_used == ScalingMode.PREDICTIVE
        desired[modality] = decision.desired_replicas
    assert desired["image"] > desired["text"]


def test_budget_cap_reaches_the_policy() -> None:
    reading = parse_answers(_with_only("image"), "multimodal")
    now = reading.observed_at
    obs = build_observation(reading, current_replicas=1, ready_replicas=1, slots_per_replica=1,
                            budget_max_replicas=2, now=now)
    decision = recommend(obs, ScalingPolicy(target_p95_latency_ms=500, max_replicas=50, max_step_replicas=100),
                         ScalerState(), _model(), now)
    assert decision.desired_replicas == 2 and decision.reason == Reason.CAPPED_BY_BUDGET


def test_queries_select_the_inferenceservice_by_namespace_and_name_only() -> None:
    queries = build_queries("ml", "vc")
    for key, q in queries.items():
        assert 'namespace="ml",inferenceservice="vc"' in q, key
    assert "[60s]" in queries["requests"] and "[15s]" in queries["recent_requests"]
    assert selector('a"b', "c\\d") == 'namespace="a\\"b",inferenceservice="c\\\\d"'


def test_demand_comes_only_from_inference_counters() -> None:
    """Health checks and scrapes never run the model: rates use only counters the model's execute moves."""
    queries = build_queries("ml", "vc")
    counted = set()
    for q in queries.values():
        counted |= set(re.findall(r"(?:rate|increase)\(([a-z_]+)\{", q))
    allowed = {"modalscale_requests_total", "modalscale_request_images_sum", "modalscale_request_image_pixels_sum",
               "modalscale_request_text_tokens_sum", "nv_inference_count", "nv_inference_exec_count",
               "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
               "nv_inference_compute_output_duration_us", "nv_inference_request_success",
               "nv_inference_request_duration_us"}
    assert counted == allowed


def test_feature_queries_read_the_runtime_histograms_per_modality_and_series() -> None:
    from modalscale.runtime.model import metrics as runtime_metrics

    queries = build_queries("ml", "vc")
    for key, family in (("images", runtime_metrics.REQUEST_IMAGES), ("pixels", runtime_metrics.REQUEST_IMAGE_PIXELS),
                        ("tokens", runtime_metrics.REQUEST_TEXT_TOKENS)):
        for window, q in (("60s", queries[key]), ("15s", queries["recent_" + key])):
            assert q == (f'max by (modality, pod, instance, job) '
                         f'(rate({family}_sum{{namespace="ml",inferenceservice="vc",'
                         f'component!~"gateway|image-encoder"}}'
                         f'[{window}]))')
    assert queries["requests"].startswith(
        f"max by (modality, pod, instance, job) (rate({runtime_metrics.REQUESTS_TOTAL}{{")


def test_reader_without_url_reports_prometheus_not_configured() -> None:
    reading = PrometheusReader("").read("ml", "vc", "multimodal", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert reading.workload is None and reading.problem is not None
    assert reading.problem[0] == PROMETHEUS_NOT_CONFIGURED


# ----------------------------------------------------------------------------- faults on bad metrics (issue 11)


def _four_targets_one_down() -> dict[str, Any]:
    answers = copy.deepcopy(RECORDED_LABELLED)
    instances = [f"10.0.0.{i}:8002" for i in range(1, 5)]
    answers["up"] = _answer_at(T_LABELLED, [({"instance": i}, "0" if i.endswith("4:8002") else "1")
                                            for i in instances])
    answers["scraped"] = _answer_at(T_LABELLED, [({"instance": i}, str(T_LABELLED - 0.1)) for i in instances])
    return answers


def test_partial_targets_are_counted_and_reach_the_policy_which_does_not_scale_down() -> None:
    """One pod's /metrics fails while it keeps serving: 3 of 4 targets answer. The reading says so, the
    observation carries the count, and the policy holds instead of scaling down on the low rate."""
    reading = parse_answers(_four_targets_one_down(), "multimodal")
    assert (reading.targets_up, reading.targets_total, reading.partial) == (3, 4, True)
    assert reading.problem is not None and reading.problem[0] == PARTIAL_TARGETS
    now = reading.observed_at + dt.timedelta(seconds=1)
    obs = build_observation(reading, current_replicas=4, ready_replicas=4, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    assert obs.targets_up == 3
    policy = ScalingPolicy(scale_down_stabilization_s=0, target_p95_latency_ms=10_000)  # the 3 targets' load: 1
    decision = recommend(obs, policy, ScalerState(), _model(), now)
    assert (decision.desired_replicas, decision.reason) == (4, Reason.HELD_PARTIAL_METRICS), decision.message
    answers = _four_targets_one_down()  # the failing pod is gone (scaled away): 3 targets, all answering
    answers["up"] = answers["up"][:3]
    whole = build_observation(parse_answers(answers, "multimodal"), current_replicas=3, ready_replicas=3,
                              slots_per_replica=1, budget_max_replicas=None, now=now)
    assert recommend(whole, policy, ScalerState(), _model(), now).desired_replicas < 3


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf"])
@pytest.mark.parametrize("key", ["requests", "images", "pixels", "tokens"])
def test_non_finite_answer_is_missing_data_and_the_policy_holds(key: str, bad: str) -> None:
    """Issue 11: a rate of "NaN" gave an empty workload (no traffic) and the service scaled to its minimum."""
    answers = copy.deepcopy(RECORDED_LABELLED)
    answers[key][0]["value"][1] = bad
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is None
    assert reading.problem is not None and reading.problem[0] == NON_FINITE_METRICS and key in reading.problem[1]
    now = reading.observed_at + dt.timedelta(seconds=1)
    obs = build_observation(reading, current_replicas=5, ready_replicas=5, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    decision = recommend(obs, ScalingPolicy(scale_down_stabilization_s=0), ScalerState(), _model(), now)
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 5, Reason.HELD_NO_METRICS)


@pytest.mark.parametrize("bad", ["NaN", "+Inf"])
def test_non_finite_triton_answers_are_unknown_everywhere(bad: str) -> None:
    """(The recent window's answers: :func:`test_an_unreadable_recent_window_is_named_and_predictive_holds`.)"""
    answers = copy.deepcopy(RECORDED_LABELLED)
    for key in ("nv_compute_us", "nv_pending", "nv_request_us"):
        answers[key][0]["value"][1] = bad
    answers["nv_p95_us"][0]["value"][1] = bad  # the router's (client-facing) p95
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is not None and reading.recent_workload is not None  # the request rates are intact
    assert reading.busy_erlangs is None
    assert all(c.observed_service_ms is None for c in reading.workload)
    assert reading.p95_latency_ms is None and reading.queued_requests is None
    assert "mean_latency_ms" not in reading.extra
    assert reading.problem is not None and reading.problem[0] == NON_FINITE_METRICS
    now = reading.observed_at + dt.timedelta(seconds=1)
    obs = build_observation(reading, current_replicas=5, ready_replicas=5, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    assert obs.utilization_ratio is None
    held = recommend(obs, ScalingPolicy(mode=ScalingMode.UTILIZATION, scale_down_stabilization_s=0), ScalerState(),
                     None, now)
    assert (held.valid, held.desired_replicas, held.reason) == (False, 5, Reason.HELD_NO_METRICS)


def test_a_nan_quantile_of_an_idle_model_leaves_the_routers_p95_readable() -> None:
    answers = copy.deepcopy(RECORDED_LABELLED)
    answers["nv_p95_us"][1]["value"][1] = "NaN"  # multimodal_image: Triton's summary is NaN with no observation
    assert parse_answers(answers, "multimodal").p95_latency_ms == pytest.approx(417.878)


def test_arrival_counts_are_a_15s_subquery_over_10_minutes_and_reach_the_observation() -> None:
    q = build_queries("ml", "vc")["arrival_counts"]
    assert q == ('sum(max by (modality, pod, instance) '
                 '(increase(modalscale_requests_total{namespace="ml",inferenceservice="vc",'
                 'component!~"gateway|image-encoder"}'
                 '[15s])))[600s:15s]')
    answers = copy.deepcopy(RECORDED_LABELLED)
    answers["arrival_counts"] = [{"metric": {}, "values": [[T_LABELLED - 15 * (3 - i), v]
                                                           for i, v in enumerate(["40", "44.5", "0", "39"])]}]
    reading = parse_answers(answers, "multimodal")
    assert reading.arrival_counts == (40.0, 44.5, 0.0, 39.0)
    obs = build_observation(reading, current_replicas=1, ready_replicas=1, slots_per_replica=1,
                            budget_max_replicas=None, now=reading.observed_at + dt.timedelta(seconds=1))
    assert obs.arrival_counts == (40.0, 44.5, 0.0, 39.0) and obs.count_bin_s == 15.0
    answers["arrival_counts"][0]["values"][1][1] = "NaN"
    assert parse_answers(answers, "multimodal").arrival_counts is None  # missing, not a number
    assert parse_answers(RECORDED_LABELLED, "multimodal").arrival_counts is None  # no answer


def test_arrival_counts_across_a_gap_keep_only_the_whole_bins_after_it() -> None:
    """Bins missing from the subquery (Prometheus down, a scrape gap) split the counts: the bins on each side of
    the hole read low (``increase()`` over a 15 s window that holds only part of the data, extrapolated at most 1.1
    scrape intervals), and the bins before it are not consecutive with those after. Measured in issue 21's
    scenario 4: joined, they read as arrival SCV 3.16 at a steady 1.5 req/s and sized 1 -> 5, trimmed to 4 a
    decision later. Only the run after the newest hole is kept, less its first (partial) bin."""
    answers = copy.deepcopy(RECORDED_LABELLED)
    stamps = [0, 15, 30, 45, 150, 165, 180, 195, 210]  # a hole from 60 s to 135 s
    values = ["22", "23", "21", "6", "4", "22", "24", "21", "23"]
    answers["arrival_counts"] = [{"metric": {}, "values": [[T_LABELLED - 210 + t, v]
                                                           for t, v in zip(stamps, values, strict=True)]}]
    assert parse_answers(answers, "multimodal").arrival_counts == (22.0, 24.0, 21.0, 23.0)
    # a hole right before the newest bin leaves nothing whole: unknown, not a count
    answers["arrival_counts"][0]["values"] = [[T_LABELLED - 90, "22"], [T_LABELLED - 75, "23"], [T_LABELLED, "5"]]
    assert parse_answers(answers, "multimodal").arrival_counts is None
    # contiguous bins, a single bin or unevenly stamped answers of one step are kept as they are
    answers["arrival_counts"][0]["values"] = [[T_LABELLED - 15, "22"], [T_LABELLED, "23"]]
    assert parse_answers(answers, "multimodal").arrival_counts == (22.0, 23.0)
    answers["arrival_counts"][0]["values"] = [[T_LABELLED, "23"]]
    assert parse_answers(answers, "multimodal").arrival_counts == (23.0,)


def test_pod_targets_are_compared_with_ready_replicas_and_a_shared_target_with_prometheus_targets() -> None:
    """Per-pod targets (a PodMonitor adds ``pod``): 3 answering for 4 ready replicas is partial even when no
    target reads down (one vanished from discovery). A shared static target (the local setup: one Triton for every
    replica) stands for all replicas: answering, it is complete however many replicas are ready."""
    pods = copy.deepcopy(RECORDED_LABELLED)
    pods["up"] = _answer_at(T_LABELLED, [({"instance": f"10.0.0.{i}:8002", "pod": f"svc-{i}"}, "1") for i in range(3)])
    pods["scraped"] = _answer_at(T_LABELLED, [({"instance": f"10.0.0.{i}:8002"}, str(T_LABELLED)) for i in range(3)])
    reading = parse_answers(pods, "multimodal")
    assert reading.per_pod_targets and reading.problem is None
    now = reading.observed_at + dt.timedelta(seconds=1)
    policy = ScalingPolicy(scale_down_stabilization_s=0, target_p95_latency_ms=10_000)
    obs = build_observation(reading, current_replicas=4, ready_replicas=4, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    assert (obs.targets_up, obs.targets_expected) == (3, None)
    held = recommend(obs, policy, ScalerState(), _model(), now)
    assert (held.desired_replicas, held.reason) == (4, Reason.HELD_PARTIAL_METRICS)
    shared = parse_answers(RECORDED_LABELLED, "multimodal")  # one static target, no pod label
    assert not shared.per_pod_targets
    obs = build_observation(shared, current_replicas=4, ready_replicas=4, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    assert (obs.targets_up, obs.targets_expected) == (1, 1)
    down = recommend(obs, policy, ScalerState(), _model(), now)
    assert down.desired_replicas < 4 and down.reason != Reason.HELD_PARTIAL_METRICS


# ------------------------------------------------------------------ faults on metric inputs (issue 20, 1 to 3)

PODMONITOR_JOB = "ml/modalscale-inferenceservices"
SERVICEMONITOR_JOB = "ml/vc-metrics"


def _pods(n_pods: int = 4, rps_per_pod: float = 3.0, service_ms: float = 100.0,
          jobs: tuple[str, ...] = (PODMONITOR_JOB,), instance_per_job: bool = False,
          skip: tuple[tuple[int, str], ...] = (), at: float = T_LABELLED) -> dict[str, list[dict[str, Any]]]:
    """Answers shaped as the queries return them (one row per series: ``pod``, ``instance``, ``job`` kept) for
    ``n_pods`` replicas serving image requests (one 640x480 image each) at ``rps_per_pod``, unbatched, at
    ``service_ms`` of Triton compute per request, each pod scraped by every job of ``jobs`` (the chart's
    PodMonitor and a user's ServiceMonitor over the same pods). ``instance_per_job``: the second job relabels
    ``instance`` (to the pod name) so the two scrapes differ in ``instance`` too. ``skip``: ``(pod index, job)``
    scrapes that are down (``up`` 0, no series)."""
    answers: dict[str, list[dict[str, Any]]] = {}

    def add(key: str, labels: dict[str, str], value: float) -> None:
        answers.setdefault(key, []).append({"metric": labels, "value": [at, repr(value)]})

    for i in range(n_pods):
        pod = f"vc-7d9f8c6b5-{'abcdefgh'[i]}x2lq"
        for j, job in enumerate(jobs):
            target = {"pod": pod, "instance": pod if instance_per_job and j else f"10.0.0.{i + 1}:8002", "job": job}
            down = (i, job) in skip
            add("up", target, 0.0 if down else 1.0)
            add("scraped", target, at - 2.0)
            if down:
                continue
            for prefix in ("", "recent_"):
                add(prefix + "requests", {**target, "modality": "image"}, rps_per_pod)
                add(prefix + "images", {**target, "modality": "image"}, rps_per_pod)
                add(prefix + "images", {**target, "modality": "text"}, 0.0)
                add(prefix + "pixels", {**target, "modality": "image"}, rps_per_pod * 640 * 480)
                add(prefix + "tokens", {**target, "modality": "text"}, 0.0)
            for model in ("multimodal", "multimodal_image"):  # the router and the image model
                series = {**target, "model": model, "version": "1"}
                for key in ("nv_count", "nv_exec", "nv_success"):
                    add(key, series, rps_per_pod)
                add("nv_compute_us", series, rps_per_pod * service_ms * 1000)
                add("nv_request_us", series, rps_per_pod * service_ms * 1100)
                add("nv_pending", series, 0.0)
    return answers


def _decide(answers: dict[str, Any], *, current: int, policy: ScalingPolicy | None = None,
            model: ServiceTimeRegressor | None = None, after_window: bool = False) -> Any:
    """Parse, observe and decide as the daemon does (5 s after the newest sample). ``after_window``: the
    scaler's history holds only a recommendation older than the scale-down window (steady operation), so a
    scale-down is not held by the window."""
    reading = parse_answers(answers, "multimodal")
    now = dt.datetime.fromtimestamp(T_LABELLED + 5, dt.UTC)
    obs = build_observation(reading, current_replicas=current, ready_replicas=current, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    state = ScalerState(((now - dt.timedelta(seconds=400), current),)) if after_window else ScalerState()
    return reading, recommend(obs, policy or ScalingPolicy(), state, model, now)


@pytest.mark.parametrize("instance_per_job", [False, True], ids=["same-instance", "instance-relabelled"])
def test_fault1_pods_scraped_by_two_jobs_count_once_and_12_rps_sizes_4_replicas_not_7(
        instance_per_job: bool) -> None:
    """Issue 20 fault 1 (kedacore/charts#277): every pod scraped by two jobs summed its demand twice, and 12 req/s
    sized 7 replicas instead of 4 (default policy). Each pod is one series per pod identity whatever the job."""
    answers = _pods(jobs=(PODMONITOR_JOB, SERVICEMONITOR_JOB), instance_per_job=instance_per_job)
    reading, decision = _decide(answers, current=4, model=_model())
    assert sum(c.rate_rps for c in reading.workload) == pytest.approx(12.0)
    assert sum(c.rate_rps for c in reading.recent_workload) == pytest.approx(12.0)
    assert reading.busy_erlangs == pytest.approx(4 * 3.0 * 0.100)  # 1.2 erlangs, not 2.4
    image = by_class(reading.workload)["image"]
    assert image.observed_service_ms == pytest.approx(100.0) and image.mean_image_pixels == 640 * 480
    assert (reading.targets_up, reading.targets_total, reading.per_pod_targets) == (4, 4, True)
    assert reading.extra["duplicate_series"] == 4 + 4  # 4 request series and 4 targets read twice
    assert decision.valid and decision.desired_replicas == 4, decision.message
    # the same pods scraped once give the same decision
    _, once = _decide(_pods(), current=4, model=_model())
    assert once.desired_replicas == 4 and "duplicate_series" not in parse_answers(_pods(), "multimodal").extra


def test_fault1_a_pod_is_one_target_up_when_either_scrape_is_and_down_when_both_are() -> None:
    """With two jobs a pod has two targets: counting targets would see 6 of 8 up for 4 ready replicas while one
    pod's series are missing altogether, and scale down on the low rates."""
    answers = _pods(jobs=(PODMONITOR_JOB, SERVICEMONITOR_JOB), instance_per_job=True,
                    skip=((2, SERVICEMONITOR_JOB), (3, PODMONITOR_JOB), (3, SERVICEMONITOR_JOB)))
    reading, decision = _decide(answers, current=4, model=_model(),
                                policy=ScalingPolicy(scale_down_stabilization_s=0, target_p95_latency_ms=10_000))
    assert (reading.targets_up, reading.targets_total) == (3, 4)
    assert reading.down_targets == ("vc-7d9f8c6b5-dx2lq",)
    assert sum(c.rate_rps for c in reading.workload) == pytest.approx(9.0)  # pod c read from its other scrape
    assert (decision.desired_replicas, decision.reason) == (4, Reason.HELD_PARTIAL_METRICS), decision.message


def test_fault1_every_query_keeps_one_row_per_pod_and_job_instead_of_summing_them() -> None:
    """``sum by`` over the targets double counts a pod scraped twice; each instant query keeps the series' pod
    identity (``max by (..., pod, instance, job)``: a querier's replica label is folded by ``max``) and the parse
    counts each pod once; the per-bin counts fold duplicates of one pod and instance before summing."""
    queries = build_queries("ml", "vc")
    for key, q in queries.items():
        if key in ("up", "scraped", "nv_p95_us", "arrival_counts", "window_up", "window_before"):
            continue  # per target (the scrapes of the window are checked per target and job)
        for part in q.split(" + "):
            assert part.startswith("max by (") and "pod, instance, job)" in part, (key, q)
    assert queries["arrival_counts"].startswith("sum(max by (modality, pod, instance) (increase(")


@pytest.mark.parametrize("durations", ["zero", "counted"])
@pytest.mark.parametrize("mode", ["Utilization", "Predictive without a model"])
def test_fault2_triton_counters_stuck_at_zero_while_serving_hold_instead_of_scaling_to_1(
        durations: str, mode: str) -> None:
    """Issue 20 fault 2 (triton-inference-server/server#8125): Triton's request counters (count, exec count,
    success, pending) stuck at 0 while the service serves 12 req/s: busy time 0 read as idle and Utilization
    mode (and Predictive without a service-time model) scaled 4 -> 1. The runtime's own counter (or Triton's
    compute time) contradicts them: hold."""
    answers = _pods()
    for key in ("nv_count", "nv_exec", "nv_success", "nv_pending") + (
            ("nv_compute_us", "nv_request_us") if durations == "zero" else ()):
        for sample in answers[key]:
            sample["value"][1] = "0"
    policy = ScalingPolicy(mode=ScalingMode.UTILIZATION) if mode == "Utilization" else ScalingPolicy()
    reading, decision = _decide(answers, current=4, policy=policy, after_window=True)
    assert reading.busy_erlangs is None and reading.queued_requests is None
    assert reading.problem is not None and reading.problem[0] == METRICS_CONTRADICT
    assert "720 requests" in reading.problem[1] and "nv_inference_count" in reading.problem[1]
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 4, Reason.HELD_NO_METRICS)
    plan = plan_autoscale(as_status({"desiredReplicas": 4}), decision, reading, None, generation=1,
                          now=dt.datetime.fromtimestamp(T_LABELLED + 5, dt.UTC))
    assert "desiredReplicas" not in plan.status_patch
    (condition,) = plan.status_patch["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "MetricsAvailable", "False", METRICS_CONTRADICT)
    # Predictive with a model sizes on the runtime's counter (the signal that says serving): 12 req/s -> 4
    _, predictive = _decide(answers, current=4, model=_model(), after_window=True)
    assert predictive.valid and predictive.desired_replicas == 4, predictive.message


def test_fault2_triton_compute_time_without_counted_requests_is_a_contradiction() -> None:
    """The same fault without the runtime's counter (a model that does not export it): Triton's own compute time
    says serving while its counts read 0."""
    answers = _pods()
    for key in ("nv_count", "nv_exec", "nv_success"):
        for sample in answers[key]:
            sample["value"][1] = "0"
    answers["requests"] = []
    reading, decision = _decide(answers, current=4, policy=ScalingPolicy(mode=ScalingMode.UTILIZATION),
                                after_window=True)
    assert reading.busy_erlangs is None and reading.problem is not None
    assert reading.problem[0] == METRICS_CONTRADICT and "compute time" in reading.problem[1]
    assert (decision.valid, decision.desired_replicas) == (False, 4)


def test_fault2_runtime_counter_stuck_at_zero_while_triton_counts_holds_predictive() -> None:
    """The other direction of the kind: the runtime's counter reads 0 while Triton counts 12 req/s; Predictive
    would read no traffic and scale 4 -> 1."""
    answers = _pods()
    for key in ("requests", "images", "pixels", "recent_requests", "recent_images", "recent_pixels"):
        for sample in answers[key]:
            sample["value"][1] = "0"
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True)
    assert reading.workload is None and reading.recent_workload is None
    assert reading.problem is not None and reading.problem[0] == METRICS_CONTRADICT
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 4, Reason.HELD_NO_METRICS)
    # Utilization mode reads Triton's busy time (the signal that says serving): 1.2 erlangs on 4 -> 2
    _, utilization = _decide(answers, current=4, policy=ScalingPolicy(mode=ScalingMode.UTILIZATION),
                             after_window=True)
    assert utilization.valid and utilization.desired_replicas == 2, utilization.message


def test_fault2_a_few_requests_at_the_window_edge_are_no_contradiction() -> None:
    answers = _pods(n_pods=1, rps_per_pod=1.0 / 60)  # one request in the window, not yet counted by Triton
    for key in ("nv_count", "nv_exec", "nv_success", "nv_compute_us", "nv_request_us"):
        for sample in answers[key]:
            sample["value"][1] = "0"
    reading = parse_answers(answers, "multimodal")
    assert reading.problem is None and reading.busy_erlangs == 0.0


@pytest.mark.parametrize("mode", ["Predictive", "Utilization"])
def test_fault3_frozen_idle_sample_dated_an_hour_ahead_is_stale_not_fresh(mode: str) -> None:
    """Issue 20 fault 3 (clock skew, ray-project/ray#66271): a frozen "no traffic" sample dated 1 h ahead read as
    fresh (age -3600 s is under any age limit) and scaled 5 -> 1. Beyond ``max_future_skew_s`` it is stale."""
    ahead = T_LABELLED + 3600
    answers = _pods(n_pods=5, at=ahead)
    for key in ("requests", "images", "pixels", "recent_requests", "recent_images", "recent_pixels", "nv_count",
                "nv_exec", "nv_success", "nv_compute_us", "nv_request_us"):
        for sample in answers[key]:
            sample["value"][1] = "0"
    for sample in answers["scraped"]:
        sample["value"][1] = repr(ahead - 2.0)
    policy = ScalingPolicy(mode=ScalingMode(mode))
    reading, decision = _decide(answers, current=5, policy=policy, model=_model(), after_window=True)
    assert reading.workload == () and reading.busy_erlangs == 0.0  # no traffic, as far as the sample goes
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 5, Reason.HELD_STALE_METRICS)
    assert "in the future" in decision.message
    plan = plan_autoscale(as_status({}), decision, reading, None, generation=1,
                          now=dt.datetime.fromtimestamp(T_LABELLED + 5, dt.UTC))
    (condition,) = plan.status_patch["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", STALE_METRICS)


@pytest.mark.parametrize("key", ["requests", "nv_count"])
def test_resets_a_negative_rate_is_missing_data_not_zero_traffic(key: str) -> None:
    """rate() and increase() correct counter resets (a pod restart), so Prometheus never answers a negative rate
    for them; one that does (a counter read without that correction, e.g. a recording rule with delta()) was
    clamped to 0: no traffic, scale to the minimum. It is missing data."""
    answers = _pods()
    for sample in answers[key]:
        sample["value"][1] = "-3.0"
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True,
                                policy=ScalingPolicy(mode=ScalingMode.UTILIZATION if key == "nv_count"
                                                     else ScalingMode.PREDICTIVE))
    assert reading.problem is not None and reading.problem[0] == NEGATIVE_RATE and key in reading.problem[1]
    assert (decision.valid, decision.desired_replicas) == (False, 4)


def test_resets_every_counter_is_read_through_rate_or_increase_only() -> None:
    """Only rate() and increase() correct counter resets; irate/delta/idelta/deriv of a counter, or a counter
    read raw, turns a pod restart into a negative or huge rate."""
    for key, q in build_queries("ml", "vc").items():
        assert not re.search(r"\b(irate|delta|idelta|deriv)\(", q), (key, q)
        for name in re.findall(r"([a-z_]+(?:_total|_count|_sum|_us|_success))\{", q):
            if name in ("nv_inference_pending_request_count", "nv_inference_request_summary_us"):
                continue  # a gauge and a summary quantile, not counters
            assert re.search(rf"(rate|increase)\({name}\{{", q), (key, name)


def test_in_flight_is_the_client_facing_models_requests_inside_execute_plus_its_queue() -> None:
    # issue 20: the observed-queue rule reads the requests in flight; a router counts its requests until they are
    # answered, so the inner per-modality models are not added again
    answers = dict(RECORDED)
    answers["inflight"] = [{"metric": {"model": "multimodal"}, "value": [0, "3"]},
                           {"metric": {"model": "multimodal_image"}, "value": [0, "2"]}]
    answers["nv_pending"] = [{"metric": {"model": "multimodal"}, "value": [0, "4"]},
                             {"metric": {"model": "multimodal_image"}, "value": [0, "1"]}]
    reading = parse_answers(answers, "multimodal")
    assert reading.in_flight_requests == 7.0
    obs = build_observation(reading, current_replicas=1, ready_replicas=1, slots_per_replica=1,
                            budget_max_replicas=None, now=dt.datetime.fromtimestamp(T, dt.UTC))
    assert obs.in_flight_requests == 7.0
    answers["inflight"] = [{"metric": {"model": "multimodal"}, "value": [0, "NaN"]}]
    assert parse_answers(answers, "multimodal").in_flight_requests is None  # missing data, never zero
    assert build_queries("ns", "svc")["inflight"].startswith("max by (model, pod, instance, job) (modalscale_inflight")


# ------------------------------------------------------------------------ a gap in Prometheus' data (issue 21, 4)
def _one_target_up() -> dict[str, Any]:
    """The recording with its down target left out (one target, up)."""
    answers = copy.deepcopy(RECORDED)
    answers["up"] = _answer([({"instance": "127.0.0.1:18002"}, "1")])
    answers["scraped"] = _answer([({"instance": "127.0.0.1:18002"}, "1796040026.374")])
    return answers


def _scrapes(since_s: float, until_s: float = 0.0, step_s: float = 1.0, before: bool = True,
             failed: tuple[float, ...] = ()) -> dict[str, Any]:
    """``window_up`` and ``window_before`` of one target scraped every ``step_s`` from ``T - since_s`` to
    ``T - until_s`` (``failed``: ages of scrapes that read 0), with (``before``) or without a success in the ten
    minutes before the stable window."""
    labels = {"instance": "127.0.0.1:18002", "job": "triton-0"}
    ages = [since_s - i * step_s for i in range(int((since_s - until_s) / step_s) + 1)]
    values = [[round(T - a, 3), "0" if any(abs(a - f) < 1e-6 for f in failed) else "1"] for a in ages]
    return {"window_up": [{"metric": labels, "values": values}],
            "window_before": [{"metric": labels, "value": [T, "1"]}] if before else []}


def test_queries_read_the_raw_scrapes_of_the_window_and_whether_each_target_was_scraped_before() -> None:
    q = build_queries("ml", "vc")
    # gateway and replicas alike: every target but the image encoder pool's (whose reading checks its own)
    every = f'{selector("ml", "vc")},component!="image-encoder"'
    assert q["window_up"] == f"up{{{every}}}[60s]"
    assert q["window_before"] == f"max_over_time(up{{{every}}}[600s] offset 60s)"
    pool = build_queries("ml", "vc", component="image-encoder")
    assert pool["window_up"] == f'up{{{selector("ml", "vc")},component="image-encoder"}}[60s]'


def test_a_window_that_starts_in_a_gap_is_partial_data_and_gives_no_rates() -> None:
    """Prometheus down for 5 minutes and back 20 s ago: its 60 s rates see only 20 s of samples and read a third of
    the traffic; they are not read at all."""
    reading = parse_answers({**_one_target_up(), **_scrapes(since_s=20)}, "multimodal")
    assert reading.workload is None and reading.recent_workload is None
    assert reading.busy_erlangs is None and reading.arrival_counts is None
    assert reading.problem is not None and reading.problem[0] == PARTIAL_WINDOW, reading.problem
    assert "40 s" in reading.problem[1] and "60 s metrics window" in reading.problem[1]


def test_the_policy_holds_on_a_partial_window_instead_of_scaling_on_it() -> None:
    """The pure decision on that reading: hold the current count (1), not a scale to the partial rates' size."""
    reading = parse_answers({**_one_target_up(), **_scrapes(since_s=20)}, "multimodal")
    now = reading.observed_at
    assert now is not None
    for current in (1, 6):  # neither up on a lower bound (a staircase) nor down on traffic read low
        obs = build_observation(reading, current_replicas=current, ready_replicas=current, slots_per_replica=1,
                                budget_max_replicas=None, now=now)
        for model in (_model(), None):  # Predictive, and the Utilization fallback (busy time is a rate too)
            decision = recommend(obs, ScalingPolicy(mode=ScalingMode.PREDICTIVE), ScalerState(), model, now)
            assert (decision.valid, decision.desired_replicas, decision.reason) == (
                False, current, Reason.HELD_NO_METRICS), decision.message


def test_a_recent_window_that_starts_in_a_gap_leaves_only_the_recent_rates_unknown() -> None:
    """Back 50 s after a gap of 30 s: the 60 s window starts before the gap (its rates span it), the 15 s window
    does not."""
    answers = {**_one_target_up(), **_scrapes(since_s=10)}
    old = _scrapes(since_s=70, until_s=40)["window_up"][0]["values"]
    answers["window_up"][0]["values"] = [v for v in old if float(v[0]) >= T - 60] + answers["window_up"][0]["values"]
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is not None and reading.problem is None
    assert reading.recent_workload is None


@pytest.mark.parametrize("scrapes", [
    _scrapes(since_s=60), _scrapes(since_s=59.2, step_s=1.0), _scrapes(since_s=60, step_s=15.0),
    _scrapes(since_s=60, failed=(60.0, 30.0)), _scrapes(since_s=20, before=False),
], ids=["every-second", "first-scrape-0.8s-in", "15s-interval", "one-failed-scrape-at-the-start", "new-target"])
def test_a_window_with_samples_from_its_start_or_a_target_new_in_it_is_whole(scrapes: dict[str, Any]) -> None:
    reading = parse_answers({**_one_target_up(), **scrapes}, "multimodal")
    assert reading.problem is None and reading.workload is not None and reading.recent_workload is not None


def test_a_target_scraped_before_whose_scrapes_failed_at_the_start_of_the_window_is_a_gap() -> None:
    """The target did not answer for 20 s (Prometheus wrote ``up`` 0): its counters have no sample then."""
    failed = tuple(float(a) for a in range(40, 61))
    reading = parse_answers({**_one_target_up(), **_scrapes(since_s=60, failed=failed)}, "multimodal")
    assert reading.workload is None and reading.problem is not None and reading.problem[0] == PARTIAL_WINDOW


def test_the_int8_fallback_gauge_is_read_per_pod_into_the_extras_and_never_changes_the_reading() -> None:
    # The runtime's modalscale_image_int8_fallback (1: the pod's INT8 image encoder missed its fidelity bound at
    # load and serves every image in FP32) reaches status.autoscaler.features; a pod scraped twice counts once
    # (its largest value), a non-finite value is left out, and nothing else of the reading moves.
    answers = dict(RECORDED)
    answers["int8_fallback"] = [{"metric": {"pod": "vc-a", "job": "one"}, "value": [0, "1"]},
                                {"metric": {"pod": "vc-a", "job": "two"}, "value": [0, "0"]},
                                {"metric": {"pod": "vc-b", "job": "one"}, "value": [0, "0"]},
                                {"metric": {"pod": "vc-c", "job": "one"}, "value": [0, "NaN"]}]
    reading, base = parse_answers(answers, "multimodal"), parse_answers(RECORDED, "multimodal")
    assert (reading.extra["image_int8_fallback_pods"], reading.extra["image_int8_pods"]) == (1.0, 2.0)
    assert "image_int8_pods" not in base.extra  # INT8 images not asked for: no gauge, no feature
    assert dataclasses.replace(reading, extra=base.extra) == base
    nan_only = parse_answers({**RECORDED, "int8_fallback": answers["int8_fallback"][3:]}, "multimodal")
    assert "image_int8_pods" not in nan_only.extra


def test_the_int8_fallback_query_reads_the_replicas_series_or_the_pools() -> None:
    front = build_queries("ml", "vc", gateway=True)["int8_fallback"]
    assert front.startswith("max by (pod, instance, job) (modalscale_image_int8_fallback{")
    assert 'component!~"gateway|image-encoder"' in front
    assert 'component="image-encoder"' in build_queries("ml", "vc", component="image-encoder")["int8_fallback"]


def _stamps(answers: dict[str, Any], how: str) -> dict[str, Any]:
    """``answers`` with the scrape times (``timestamp(up)``) spoiled as ``how`` says."""
    first = answers["scraped"][0]
    if how == "missing":
        del answers["scraped"]
    elif how == "one-pod-missing":
        answers["scraped"] = answers["scraped"][1:]
    elif how == "other-instance":
        first["metric"] = {**first["metric"], "instance": "10.9.9.9:1"}
    elif how == "milliseconds":  # a units slip: the same instant in ms
        first["value"][1] = repr(float(first["value"][1]) * 1000)
    else:
        first["value"][1] = how  # NaN, +Inf, out of datetime's range
    return answers


@pytest.mark.parametrize("mode", ["Predictive", "Utilization"])
@pytest.mark.parametrize("how", ["missing", "one-pod-missing", "other-instance", "NaN", "+Inf", "milliseconds",
                                 "1e20", "-1e12"])
def test_data_whose_scrape_time_is_unknown_is_not_read_and_the_policy_holds(how: str, mode: str) -> None:
    """Found by an adversarial probe (6 Dec 2026): with the scrape-time answer missing, the observation was dated
    ``now`` and Predictive scaled 10 -> 6 on samples an hour old (Utilization held); a scrape time in ms raised
    ``ValueError`` out of the parse. Data of unknown age is unread data: no workload, a named problem, a hold."""
    answers = _stamps(_pods(n_pods=4), how)
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is None and reading.recent_workload is None and reading.busy_erlangs is None
    assert reading.p95_latency_ms is None and reading.in_flight_requests is None
    assert reading.problem is not None and reading.problem[0] == UNKNOWN_SAMPLE_TIME, reading.problem
    assert "scrape time" in reading.problem[1] and "holding" in reading.problem[1]
    for late_s in (5.0, 3600.0):  # evaluated at once, and an hour after the samples (their true age)
        now = dt.datetime.fromtimestamp(T_LABELLED + late_s, dt.UTC)
        obs = build_observation(reading, current_replicas=10, ready_replicas=10, slots_per_replica=1,
                                budget_max_replicas=None, now=now)
        decision = recommend(obs, ScalingPolicy(mode=ScalingMode(mode), scale_down_stabilization_s=60),
                             ScalerState(((now - dt.timedelta(seconds=400), 10),)), _model(), now)
        assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 10, Reason.HELD_NO_METRICS)


def test_a_readable_scrape_time_on_every_live_target_still_reads_the_data() -> None:
    reading = parse_answers(_pods(n_pods=4, skip=((3, PODMONITOR_JOB),)), "multimodal")  # a down pod needs none
    assert reading.workload is not None and reading.problem is not None and reading.problem[0] == PARTIAL_TARGETS
    assert reading.observed_at == dt.datetime.fromtimestamp(T_LABELLED - 2.0, dt.UTC)


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-1"])
@pytest.mark.parametrize("key", ["recent_requests", "recent_images", "recent_pixels", "recent_tokens"])
def test_an_unreadable_recent_window_is_named_and_predictive_holds(key: str, bad: str) -> None:
    """Found by the same probe: a NaN or negative answer of the 15 s (burst) window was dropped without a word and
    Predictive scaled 10 -> 6 on the 60 s window alone, blind to a burst. It is unread data like the stable
    window's: no workload, the problem named, a hold (Utilization reads busy time only and goes on)."""
    answers = _pods(n_pods=4)
    answers[key][0]["value"][1] = bad
    reading = parse_answers(answers, "multimodal")
    assert reading.workload is None and reading.recent_workload is None
    assert reading.problem is not None and reading.problem[0] in (NON_FINITE_METRICS, NEGATIVE_RATE)
    assert key in reading.problem[1], reading.problem
    _, decision = _decide(answers, current=10, model=_model(), after_window=True)
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 10, Reason.HELD_NO_METRICS)


# ------------------------------------------------------------------------------ review of the parse (Dec 2026)

@pytest.mark.parametrize("modality", [None, "", "audio"], ids=["unlabelled", "empty-label", "unknown-modality"])
def test_requests_without_a_known_modality_are_unread_demand_not_zero_traffic(modality: str | None) -> None:
    """12 req/s counted by ``modalscale_requests_total`` under no ``modality`` label (a user's model exporting the
    runtime's names, as the feature histograms may be) or one the parse does not know were dropped: the workload
    read ``()`` (no traffic), Predictive scaled 4 -> 1 with "No traffic in the window" (and with minReplicas 0 would
    have counted towards scale to zero). Requests that arrive but cannot be classed are unread demand: hold."""
    answers = _pods()
    for prefix in ("", "recent_"):
        for sample in answers[prefix + "requests"]:
            if modality is None:
                del sample["metric"]["modality"]
            else:
                sample["metric"]["modality"] = modality
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True)
    assert reading.workload is None
    assert reading.problem is not None and reading.problem[0] == INCOMPLETE_FEATURES, reading.problem
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 4, Reason.HELD_NO_METRICS)


def test_an_executing_models_counters_stuck_at_zero_under_a_counting_router_is_a_contradiction() -> None:
    """The cross-check compared only the largest model's count (the router's) with 0: with the image model's
    ``nv_inference_count`` and successes stuck at 0 (triton-inference-server/server#8125 on one model) while its
    executions and compute time say it serves 12 req/s, its busy time was dropped, busy read 0 erlangs and
    Utilization mode scaled 4 -> 1 on the signal that says idle. Contradicting signals hold."""
    answers = _pods()
    for key in ("nv_count", "nv_success"):
        for sample in answers[key]:
            if sample["metric"]["model"] == "multimodal_image":
                sample["value"][1] = "0"
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True,
                                policy=ScalingPolicy(mode=ScalingMode.UTILIZATION, scale_down_stabilization_s=0))
    assert reading.busy_erlangs is None
    assert reading.problem is not None and reading.problem[0] == METRICS_CONTRADICT, reading.problem
    assert "multimodal_image" in reading.problem[1]
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 4, Reason.HELD_NO_METRICS)


@pytest.mark.parametrize("mode", ["Predictive", "Utilization"])
def test_a_down_pod_target_is_partial_even_when_a_terminating_pods_target_still_answers(mode: str) -> None:
    """4 ready replicas serve 6 req/s each at 100 ms (4 needed); a fifth pod, terminating after a scale-down (not
    ready, idle, still scraped in its grace period), answers while ready pod d's scrape is down. The partial check
    counted targets only (4 up for 4 ready) and scaled 4 -> 3 on the three pods that answered, d's traffic missing
    from every sum. A target that is down makes the reading partial: no scale-down."""
    answers = _pods(n_pods=5, rps_per_pod=6.0, skip=((3, PODMONITOR_JOB),))
    for key, samples in answers.items():
        for sample in samples:
            if sample["metric"]["pod"].startswith("vc-7d9f8c6b5-e") and key not in ("up", "scraped"):
                sample["value"][1] = "0.0"  # the terminating pod serves nothing
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True,
                                policy=ScalingPolicy(mode=ScalingMode(mode), scale_down_stabilization_s=0,
                                                     target_p95_latency_ms=10_000))
    assert reading.down_targets == ("vc-7d9f8c6b5-dx2lq",) and reading.problem[0] == PARTIAL_TARGETS
    assert (decision.desired_replicas, decision.reason) == (4, Reason.HELD_PARTIAL_METRICS), decision.message
    # the same pods, d answering: 4 is what the load needs
    answers = _pods(n_pods=4, rps_per_pod=6.0)
    _, whole = _decide(answers, current=4, model=_model(), after_window=True,
                       policy=ScalingPolicy(mode=ScalingMode(mode), scale_down_stabilization_s=0,
                                            target_p95_latency_ms=10_000))
    assert whole.desired_replicas == 4, whole.message


@pytest.mark.parametrize(("key", "value", "mode"), [
    ("nv_compute_us", "1e308", "Utilization"),  # finite per pod; the sum over 4 pods is +Inf: busy time unknown
    ("requests", "1e-310", "Predictive"),  # finite; a feature's mean per request is +Inf
], ids=["compute-sum-overflows", "feature-mean-overflows"])
def test_finite_answers_whose_sum_or_mean_overflows_are_unread_not_a_crash(key: str, value: str, mode: str) -> None:
    """Every value finite, but the parse's own sum over pods or mean per request is not: ``WorkloadClass`` raised
    ValueError out of ``parse_answers`` (an exception out of the decision, no status, no reason) instead of a
    reading that names the problem and a hold."""
    answers = _pods()
    for prefix in ("", "recent_") if key == "requests" else ("",):
        for sample in answers[prefix + key]:
            sample["value"][1] = value
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True,
                                policy=ScalingPolicy(mode=ScalingMode(mode), scale_down_stabilization_s=0))
    assert reading.problem is not None and reading.problem[0] == NON_FINITE_METRICS, reading.problem
    assert (decision.valid, decision.desired_replicas) == (False, 4), decision.message


@pytest.mark.parametrize("mode", ["Predictive", "Utilization"])
def test_a_target_whose_last_scrape_is_minutes_old_is_stale_not_hidden_by_the_fresh_ones(mode: str) -> None:
    """Pod d's newest ``up`` (1) is 200 s old (Prometheus stopped scraping it without a staleness marker: a
    restart, a remote-write gap; the instant query still returns it within its 5 min look-back) and none of its
    rates exist over the 60 s window. The reading was dated by the newest target, so it read fresh and complete
    (4 of 4 targets up) and both modes scaled 4 -> 3 on three pods' traffic. Data are as fresh as their oldest
    target's: stale, hold."""
    answers = _pods(n_pods=4, rps_per_pod=6.0)
    stale = "vc-7d9f8c6b5-dx2lq"
    for key in list(answers):
        if key == "scraped":
            for sample in answers[key]:
                if sample["metric"]["pod"] == stale:
                    sample["value"][1] = repr(T_LABELLED - 200.0)
        elif key != "up":
            answers[key] = [s for s in answers[key] if s["metric"]["pod"] != stale]
    reading, decision = _decide(answers, current=4, model=_model(), after_window=True,
                                policy=ScalingPolicy(mode=ScalingMode(mode), scale_down_stabilization_s=0,
                                                     target_p95_latency_ms=10_000))
    assert reading.observed_at == dt.datetime.fromtimestamp(T_LABELLED - 200.0, dt.UTC)
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 4, Reason.HELD_STALE_METRICS), \
        decision.message
