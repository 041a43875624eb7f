"""InferenceService Events say what happened, with the right type (user report item 14): a normal creation is a
Normal ``Creating``; a scaling conflict posts an Event whenever its cause changes or an external scale is restored,
not only when ``ScalingConflict`` flips; ``Progressing`` never says "4/1 replicas updated"."""

from __future__ import annotations

import datetime as dt

from modalscale.api import conditions as R
from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.conditions import get
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.unit.operator.test_isvc_plan import FILES, NOW, converge, make_isvc


def test_a_normal_creation_posts_one_normal_creating_event_not_a_warning() -> None:
    plan = plan_isvc(parse_isvc(make_isvc()), IsvcObserved(), FILES, PlanConfig(), NOW)
    assert [(t, r) for t, r, _ in plan.events] == [("Normal", R.CREATING)]


def test_kubectl_scale_on_the_service_then_on_the_deployment_posts_an_event_for_each_cause() -> None:
    body = make_isvc(scaling={"mode": "Predictive", "replicas": 5, "minReplicas": 2, "maxReplicas": 6})
    obs, _ = converge(body)
    ignored = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    assert get(write_isvc_status(ignored.status)["conditions"], R.SCALING_CONFLICT)["reason"] == R.SCALE_IGNORED_IN_MODE
    obs.status = ignored.status
    obs.deployment["spec"]["replicas"] = 5  # kubectl scale deployment: the condition stays True, its cause changes
    external = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW + dt.timedelta(seconds=30))
    assert ("Warning", R.EXTERNAL_SCALE) in [(t, r) for t, r, _ in external.events]
    # Restored; scaled by hand again within the hold time: another restore, another Event.
    obs.status = external.status
    obs.deployment["spec"]["replicas"] = 4
    again = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW + dt.timedelta(seconds=40))
    assert [w.body["spec"]["replicas"] for w in again.writes] == [2]
    assert ("Warning", R.EXTERNAL_SCALE) in [(t, r) for t, r, _ in again.events]
    # Nothing new: no Event.
    obs.status = again.status
    obs.deployment["spec"]["replicas"] = 2
    quiet = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW + dt.timedelta(seconds=45))
    assert [r for _, r, _ in quiet.events if r == R.EXTERNAL_SCALE] == []


def test_an_hpa_appearing_while_a_conflict_is_already_reported_posts_a_foreign_autoscaler_event() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["spec"]["replicas"] = 5
    external = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    obs.status = external.status
    obs.deployment["spec"]["replicas"] = 2
    obs.foreign_autoscalers = ["vc-hpa"]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW + dt.timedelta(seconds=10))
    assert ("Warning", R.FOREIGN_AUTOSCALER) in [(t, r) for t, r, _ in plan.events]


def test_progressing_says_a_scale_down_not_four_of_one_replicas_updated() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["status"].update(replicas=4, updatedReplicas=4, readyReplicas=4, availableReplicas=4)  # 4 -> 2
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    msg = get(write_isvc_status(plan.status)["conditions"], R.PROGRESSING)["message"]
    assert msg == "scaling from 4 to 2 replica(s) (4 replica(s), 4 updated, 4 available, 4 ready)"
    obs.deployment["status"].update(replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2)
    done = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert get(write_isvc_status(done.status)["conditions"], R.PROGRESSING)["message"] == "all 2 replica(s) updated"
