"""Client of the built-in multimodal model over Triton's HTTP or gRPC protocol (tritonclient), sync and async.

Request interface (see ``runtime/README.md``): ``IMAGES`` BYTES [1, n] of encoded images and/or ``TEXT``
BYTES [1, 1] of UTF-8 text; outputs ``EMBEDDING`` FP32 [1, 256], ``MODALITY`` BYTES [1, 1] and
``IMAGE_CLASSES`` INT32 [1, n] (``[[-1]]`` for text-only).
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from modalscale.runtime.repo_config import (
    INPUT_IMAGES,
    INPUT_TEXT,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
)

Protocol = Literal["http", "grpc"]


class InferenceError(RuntimeError):
    """The server answered the request with an error; ``status`` is Triton's status text (e.g. ``400``)."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status

    @classmethod
    def from_triton(cls, exc: InferenceServerException) -> InferenceError:
        """The error tritonclient raised, its message kept; an answer with no body (tritonclient's message then
        says only "empty response") names its HTTP status too, the one fact left to tell who answered."""
        message, status = exc.message() or "", exc.status()
        if status and message.startswith(EMPTY_RESPONSE):
            message = f"{message.rstrip('.')} (HTTP status {status}, no body)"
        return cls(message, status)


EMPTY_RESPONSE = "client received an empty response from the server"
"""How tritonclient's HTTP client words a non-200 answer with no body (``tritonclient/http/_utils.py``)."""


@dataclass(frozen=True)
class MultimodalResult:
    """Decoded outputs of one request."""

    embedding: NDArray[np.float32]
    """float32 (256,), L2-normalised."""
    modality: str
    """``image``, ``text`` or ``image_text``."""
    image_classes: NDArray[np.int32]
    """int32 (n_images,) ImageNet-1k class index per image; ``[-1]`` for a text-only request."""


def _module(protocol: Protocol, aio: bool) -> types.ModuleType:
    if protocol == "http":
        if aio:
            import tritonclient.http.aio as module
        else:
            import tritonclient.http as module
    elif protocol == "grpc":
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
    else:
        raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
    found: types.ModuleType = module  # tritonclient is untyped: its modules are Any to mypy
    return found


def build_inputs(module: types.ModuleType, images: Sequence[bytes] | None, text: str | bytes | None) -> list[Any]:
    """Build the ``InferInput`` list of one request.

    Args:
        module: ``tritonclient.http`` or ``tritonclient.grpc`` (or their ``aio``), for ``InferInput``.
        images: Encoded images (None: do not send IMAGES; ``[]`` sends an empty [1, 0] tensor).
        text: Text (str is UTF-8 encoded; bytes are sent as they are) or None.
    Returns:
        The inputs (IMAGES first when present).
    """
    inputs = []
    if images is not None:
        array = np.empty((1, len(images)), dtype=np.object_)
        for i, data in enumerate(images):
            array[0, i] = bytes(data)
        tensor = module.InferInput(INPUT_IMAGES, list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    if text is not None:
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        array = np.empty((1, 1), dtype=np.object_)
        array[0, 0] = raw
        tensor = module.InferInput(INPUT_TEXT, [1, 1], "BYTES")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _outputs(module: types.ModuleType) -> list[Any]:
    return [module.InferRequestedOutput(name) for name in (OUTPUT_EMBEDDING, OUTPUT_MODALITY,
                                                           OUTPUT_IMAGE_CLASSES)]


def decode_result(result: Any) -> MultimodalResult:
    """Turn a tritonclient ``InferResult`` into a :class:`MultimodalResult`."""
    modality = result.as_numpy(OUTPUT_MODALITY).reshape(-1)[0]
    return MultimodalResult(
        embedding=result.as_numpy(OUTPUT_EMBEDDING).reshape(-1).astype(np.float32),
        modality=modality.decode() if isinstance(modality, bytes) else str(modality),
        image_classes=result.as_numpy(OUTPUT_IMAGE_CLASSES).reshape(-1).astype(np.int32),
    )


class MultimodalClient:
    """Blocking client.

    Args:
        url: ``host:port`` of the HTTP or gRPC endpoint.
        protocol: ``http`` or ``grpc``.
        model_name: Triton model name.
        timeout_s: Network timeout per request in seconds.
    """

    def __init__(self, url: str, protocol: Protocol = "http", model_name: str = "multimodal",
                 timeout_s: float = 60.0) -> None:
        self.module = _module(protocol, aio=False)
        self.protocol = protocol
        self.model_name = model_name
        self.timeout_s = timeout_s
        if protocol == "http":
            self._client = self.module.InferenceServerClient(url, connection_timeout=timeout_s,
                                                             network_timeout=timeout_s)
        else:
            self._client = self.module.InferenceServerClient(url)

    def infer(self, images: Sequence[bytes] | None = None, text: str | bytes | None = None,
              headers: Mapping[str, str] | None = None) -> MultimodalResult:
        """Send one request.

        Args:
            headers: Extra HTTP headers (gRPC: metadata), e.g. the gateway's tenant header.
        Raises:
            InferenceError: The server rejected the request (message from the model or Triton; ``status`` is the
                HTTP status or gRPC code, e.g. 429 from a gateway refusing a tenant over its budget).
        """
        kwargs: dict[str, Any] = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
        if headers:
            kwargs["headers"] = dict(headers)
        try:
            result = self._client.infer(self.model_name, build_inputs(self.module, images, text),
                                        outputs=_outputs(self.module), **kwargs)
        except InferenceServerException as exc:
            raise InferenceError.from_triton(exc) from None
        return decode_result(result)

    def is_ready(self) -> bool:
        """True when the server and the model are ready."""
        return bool(self._client.is_server_ready() and self._client.is_model_ready(self.model_name))

    def close(self) -> None:
        """Close connections (Triton waits for open HTTP connections when it drains on SIGTERM)."""
        self._client.close()

    def __enter__(self) -> MultimodalClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncMultimodalClient:
    """asyncio client (``tritonclient.*.aio``); same arguments as :class:`MultimodalClient`."""

    def __init__(self, url: str, protocol: Protocol = "grpc", model_name: str = "multimodal",
                 timeout_s: float = 60.0) -> None:
        self.module = _module(protocol, aio=True)
        self.protocol = protocol
        self.model_name = model_name
        self.timeout_s = timeout_s
        if protocol == "http":
            self._client = self.module.InferenceServerClient(url, conn_timeout=timeout_s)
        else:
            self._client = self.module.InferenceServerClient(url)

    async def infer(self, images: Sequence[bytes] | None = None,
                    text: str | bytes | None = None, request_id: str = "") -> MultimodalResult:
        """Send one request.

        Args:
            request_id: The KServe v2 request ``id`` (empty: none), which Triton echoes in its response and in its
                trace records' ``request_id``.
        Raises:
            InferenceError: The server rejected the request.
        """
        kwargs: dict[str, Any] = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
        if request_id:
            kwargs["request_id"] = request_id
        try:
            result = await self._client.infer(self.model_name, build_inputs(self.module, images, text),
                                              outputs=_outputs(self.module), **kwargs)
        except InferenceServerException as exc:
            raise InferenceError.from_triton(exc) from None
        return decode_result(result)

    async def close(self) -> None:
        """Close connections."""
        await self._client.close()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{'name{label="v",...}': value}`` with labels sorted by name.

    Names stay exactly as on the wire (``prometheus_client.parser`` would rename Triton's counters, e.g.
    ``nv_inference_request_success`` to ``..._total``, which is not what a PromQL query uses).
    """
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, raw_labels, value = match.groups()
        labels = sorted(_LABEL.findall(raw_labels or ""))
        key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")
        samples[key] = float(value)
    return samples


def scrape_metrics(metrics_url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """GET Triton's ``/metrics`` and parse it with :func:`parse_metrics`."""
    import httpx

    response = httpx.get(metrics_url, timeout=timeout_s)
    response.raise_for_status()
    return parse_metrics(response.text)
