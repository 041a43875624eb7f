"""``InferenceError.from_triton``: what a failed request says about who answered it."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

from modalscale.runtime.client import InferenceError


def test_an_answer_with_no_body_names_its_http_status() -> None:
    # tritonclient's own wording for a non-200 answer with an empty body (CI stop 38 saw only this sentence).
    exc = InferenceServerException(msg="client received an empty response from the server.", status="503")
    err = InferenceError.from_triton(exc)
    assert str(err) == "client received an empty response from the server (HTTP status 503, no body)"
    assert err.status == "503"


def test_a_message_from_the_server_is_kept_as_it_is() -> None:
    exc = InferenceServerException(msg="CorruptImage: image 0 is not a JPEG", status="400")
    err = InferenceError.from_triton(exc)
    assert (str(err), err.status) == ("CorruptImage: image 0 is not a JPEG", "400")


def test_no_status_leaves_the_message_alone() -> None:
    exc = InferenceServerException(msg="client received an empty response from the server.")
    assert str(InferenceError.from_triton(exc)) == "client received an empty response from the server."


def test_a_grpc_error_without_details_is_still_an_inference_error() -> None:
    # grpc's details() can be None: the message is then empty, never an AttributeError.
    err = InferenceError.from_triton(InferenceServerException(msg=None, status="StatusCode.UNAVAILABLE"))
    assert (str(err), err.status) == ("", "StatusCode.UNAVAILABLE")
