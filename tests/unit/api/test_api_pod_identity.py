"""``spec.serviceAccountName`` and ``spec.imagePullSecrets``: who the replicas' pods run as and which Secrets pull
their images (KServe's predictor fields of the same names). Without them a private mirror of the Triton image (NGC
images are pulled with credentials in most enterprises) left every replica in ImagePullBackOff, and a model in S3 or
GCS had no workload identity (IRSA, GKE Workload Identity) to read it with.

The parser holds them to the CRD's rules (the names are DNS-1123 subdomains, the Secrets a list-map keyed by name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.budgetpolicy import DNS_SUBDOMAIN_PATTERN
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_isvc

REPO = Path(__file__).resolve().parents[3]


def body(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vc", "namespace": "ml"}, "spec": spec}


def crd_spec() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_unset_the_pods_run_as_the_namespaces_default_account_with_no_pull_secrets() -> None:
    spec = parse_isvc(body())
    assert spec.service_account_name is None
    assert spec.image_pull_secrets == ()


def test_the_account_and_the_secrets_are_read_in_their_order() -> None:
    spec = parse_isvc(body(serviceAccountName="model-reader",
                           imagePullSecrets=[{"name": "ngc-mirror"}, {"name": "registry.creds"}]))
    assert spec.service_account_name == "model-reader"
    assert spec.image_pull_secrets == ("ngc-mirror", "registry.creds")


@pytest.mark.parametrize(("spec", "field"), [
    ({"serviceAccountName": "Model_Reader"}, "spec.serviceAccountName"),
    ({"serviceAccountName": ""}, "spec.serviceAccountName"),
    ({"serviceAccountName": "a" * 254}, "spec.serviceAccountName"),
    ({"serviceAccountName": ["model-reader"]}, "spec.serviceAccountName"),
    ({"imagePullSecrets": "ngc-mirror"}, "spec.imagePullSecrets"),
    ({"imagePullSecrets": ["ngc-mirror"]}, "spec.imagePullSecrets[0]"),
    ({"imagePullSecrets": [{"name": "ok"}, {"name": "Bad Name"}]}, "spec.imagePullSecrets[1].name"),
    ({"imagePullSecrets": [{}]}, "spec.imagePullSecrets[0].name"),
    ({"imagePullSecrets": [{"name": "ok", "namespace": "other"}]}, "spec.imagePullSecrets[0].namespace"),
    ({"imagePullSecrets": [{"name": "ok"}, {"name": "ok"}]}, "spec.imagePullSecrets[1].name"),
    ({"imagePullSecrets": [{"name": f"s{i}"} for i in range(17)]}, "spec.imagePullSecrets"),
], ids=["account-pattern", "account-empty", "account-too-long", "account-not-string", "secrets-not-list",
        "secret-not-object", "secret-name-pattern", "secret-name-missing", "secret-unknown-field", "secret-twice",
        "secrets-too-many"])
def test_a_bad_account_or_secret_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(**spec))
    assert info.value.field == field
    assert "e.g." in info.value.message  # names the fix


def test_the_crd_holds_the_names_to_the_one_dns_subdomain_pattern_and_the_secrets_to_a_list_map() -> None:
    props = crd_spec()
    account, secrets = props["serviceAccountName"], props["imagePullSecrets"]
    assert account["pattern"] == DNS_SUBDOMAIN_PATTERN and account["maxLength"] == 253
    item = secrets["items"]
    assert item["properties"]["name"]["pattern"] == DNS_SUBDOMAIN_PATTERN
    assert item["properties"]["name"]["maxLength"] == 253 and item["required"] == ["name"]
    assert secrets["x-kubernetes-list-type"] == "map" and secrets["x-kubernetes-list-map-keys"] == ["name"]
    assert secrets["maxItems"] == 16
