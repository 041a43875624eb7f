"""Start-up choices of the operator that need no cluster: the peering priority and the missing-CRD message."""

from __future__ import annotations

import json

import kopf
import pytest
from kubernetes.client.rest import ApiException

from modalscale.operator.apply import Writer
from modalscale.operator.metrics import OperatorMetrics
from modalscale.operator.peering import ensure_peering, peering_priority
from modalscale.operator.settings import Settings


def test_a_later_start_always_outranks_an_earlier_one_whatever_the_tie_breaks() -> None:
    # A replica restarted 1 ms after its predecessor started beats it even with the lowest tie-break against the
    # highest: so a restart never waits for a dead predecessor's peering record to expire.
    t = 1_764_590_000.123
    assert peering_priority(t + 0.001, tie_break=0) > peering_priority(t, tie_break=999)
    assert peering_priority(t, tie_break=1) == peering_priority(t, tie_break=0) + 1


def test_priorities_are_exact_in_json_until_2255_and_tie_breaks_are_bounded() -> None:
    year_2255_s = 9_000_000_000  # about 2255-03
    assert peering_priority(year_2255_s, tie_break=999) < 2**53
    assert 0 <= peering_priority(1_764_590_000.0) - 1_764_590_000_000_000 <= 999
    with pytest.raises(ValueError, match="0..999"):
        peering_priority(1.0, tie_break=1000)


class _Refusing:
    """A CustomObjectsApi stand-in whose create answers like the apiserver did (status, body)."""

    def __init__(self, status: int, body: str) -> None:
        self.status, self.body = status, body

    def _refuse(self, *_: object) -> None:
        exc = ApiException(status=self.status, reason="refused")
        exc.body = self.body
        raise exc

    create_cluster_custom_object = create_namespaced_custom_object = _refuse


def _writer(custom: _Refusing) -> Writer:
    """The operator's ``Writer`` (the peering write goes through it) over the refusing stand-in."""
    from kubernetes import client

    writer = Writer(client.ApiClient(), OperatorMetrics())
    writer.custom = custom  # type: ignore[assignment]
    return writer


@pytest.mark.parametrize("namespaces,crd", [((), "clusterkopfpeerings.kopf.dev"),
                                            (("team-a",), "kopfpeerings.kopf.dev")],
                         ids=["cluster-wide", "namespaced"])
def test_a_missing_peering_crd_is_a_permanent_error_naming_it_and_both_fixes(namespaces: tuple[str, ...],
                                                                            crd: str) -> None:
    with pytest.raises(kopf.PermanentError) as info:
        ensure_peering(_writer(_Refusing(404, "404 page not found")), Settings(namespaces=namespaces))
    assert f"the CRD {crd} is not installed" in str(info.value)
    assert "kubectl apply -f crds/" in str(info.value) and "MODALSCALE_STANDALONE=true" in str(info.value)


def test_a_missing_namespace_or_another_refusal_is_not_reported_as_a_missing_crd() -> None:
    missing_ns = json.dumps({"kind": "Status", "reason": "NotFound", "code": 404,
                             "details": {"name": "team-a", "kind": "namespaces"}})
    with pytest.raises(ApiException) as info:
        ensure_peering(_writer(_Refusing(404, missing_ns)), Settings(namespaces=("team-a",)))
    assert not isinstance(info.value, kopf.PermanentError) and info.value.status == 404
    with pytest.raises(ApiException):
        ensure_peering(_writer(_Refusing(403, "forbidden")), Settings())
    ensure_peering(_writer(_Refusing(409, "exists")), Settings())  # the object already exists: nothing to do


class _Namespaces:
    """A CoreV1Api stand-in whose read_namespace answers 200, 404 or 403 by name."""

    def __init__(self, answers: dict[str, int]) -> None:
        self.answers = answers

    def read_namespace(self, name: str) -> dict[str, object]:
        status = self.answers.get(name, 200)
        if status != 200:
            raise ApiException(status=status, reason="refused")
        return {"metadata": {"name": name}}


def test_a_watched_namespace_that_does_not_exist_is_named_at_start() -> None:
    # User report item 13: `modalscale operator -n does-not-exist` ran without a word.
    from modalscale.operator.cli import missing_namespaces

    core = _Namespaces({"does-not-exist": 404, "team-b": 403})
    assert missing_namespaces(core, ("team-a", "does-not-exist", "team-b")) == ["does-not-exist"]
    assert missing_namespaces(core, ()) == []


class _Existing:
    """A CustomObjectsApi stand-in where the peering objects of ``existing`` namespaces are there already (409)."""

    def __init__(self, existing: set[str]) -> None:
        self.existing = existing
        self.created: list[tuple[str, str, object]] = []

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, object]) -> None:
        if namespace in self.existing:
            exc = ApiException(status=409, reason="AlreadyExists")
            exc.body = json.dumps({"kind": "Status", "reason": "AlreadyExists", "code": 409})
            raise exc
        self.created.append((namespace, plural, body["metadata"]))


def test_a_namespace_added_to_a_namespaced_install_gets_its_peering_though_an_earlier_one_has_it() -> None:
    # `helm upgrade --set config.namespaces={team-a,team-b}` after an install with {team-a}: team-a's KopfPeering is
    # there (409), team-b's must still be created, else kopf (mandatory peering) keeps every namespace paused.
    custom = _Existing({"team-a"})
    writer = _writer(custom)  # type: ignore[arg-type]
    ensure_peering(writer, Settings(namespaces=("team-a", "team-b", "team-c"), peering_name="ms-modalscale"))
    assert custom.created == [("team-b", "kopfpeerings", {"name": "ms-modalscale"}),
                              ("team-c", "kopfpeerings", {"name": "ms-modalscale"})]
