"""A front's request pipeline (stage ``front``, issue 24), independent of Triton and of the network.

A front validates and tokenizes each request itself (``inputs.check_request``: every check that decodes no image),
sends the request's images, still encoded, to the image encoder pool (``repo_config.IMAGE_ENCODER_MODEL``) and,
while that call is out, encodes the batch's texts; then it waits for the image features and fuses. The image call
is whatever ``start_images`` returns (``encoder_client.ImageEncoderClient.start`` in a server, a stand-in in unit
tests): a :class:`concurrent.futures.Future` of :class:`RemoteImages` that fails with :class:`EncoderFailure`.

Stage seconds of a front request (``modalscale_stage_compute_seconds``): ``decode`` = its own checks (the text's
UTF-8 decode; no image is decoded here), ``tokenize``, ``text_encoder`` and ``fusion`` as in the one-piece model,
and ``image_encoder`` = the wall time of the remote call (the pool's queue, its decode, resize and encoder pass,
and the network): the front's view of what an image costs it. The pool's own series split its decode from its
encoder pass.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from modalscale.runtime.model.batching import split_evenly
from modalscale.runtime.model.encoders import IMAGE_FEATURE_DIM, MultimodalEncoder
from modalscale.runtime.model.inputs import Modality, check_request, image_bytes
from modalscale.runtime.model.pipeline import encode_texts
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import IMAGE_ENCODER_UNAVAILABLE, OUT_OF_MEMORY

ENCODER_CALL_TIMEOUT_S = 60.0
"""Deadline of one call to the image encoder pool, in seconds; past it the request fails as unavailable."""

CLIENT, UNAVAILABLE, INTERNAL = "client", "unavailable", "internal"
"""Kinds of :class:`EncoderFailure`: the request's fault (400), the pool not answering (503 / ``UNAVAILABLE``), the
pool's own failure (500)."""

_REASON = re.compile(r"^([A-Z][A-Za-z0-9]+): ")


class EncoderFailure(Exception):
    """The image encoder pool did not give a request's image features.

    Attributes:
        reason: CamelCase label (``modalscale_request_errors_total``), e.g. ``CorruptImage`` or
            :data:`~modalscale.runtime.repo_config.IMAGE_ENCODER_UNAVAILABLE`.
        message: The error message for the client, starting with ``<reason>: ``.
        kind: :data:`CLIENT`, :data:`UNAVAILABLE` or :data:`INTERNAL`.
    """

    def __init__(self, reason: str, message: str, kind: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.kind = kind


def classify_encoder_error(status: str | None, message: str, url: str) -> EncoderFailure:
    """Turn an error of the call to the pool into the front request's error (pure).

    Args:
        status: The call's status as tritonclient gives it (``StatusCode.INVALID_ARGUMENT``, ``StatusCode.UNAVAILABLE``
            ...) or None.
        message: Its message (for ``INVALID_ARGUMENT`` the pool model's ``<Reason>: IMAGES[i]: ...``).
        url: The pool's address, named in the unavailable message.
    Returns:
        ``INVALID_ARGUMENT``: the client's error, the pool's message unchanged (reason from its prefix, else
        ``ImageEncoderRejected``); ``INTERNAL`` / ``UNKNOWN``: ``InternalError`` naming the pool; ``UNAVAILABLE``
        with the pool model's ``OutOfMemory: ...`` (a pool replica out of memory for these images, after the
        client's retries): :data:`~modalscale.runtime.repo_config.OUT_OF_MEMORY` naming the pool; anything else
        (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``NOT_FOUND`` for a pool without the model, no status ...):
        :data:`~modalscale.runtime.repo_config.IMAGE_ENCODER_UNAVAILABLE` naming ``url``.
    """
    code = (status or "").rpartition(".")[2]
    if code == "INVALID_ARGUMENT":
        match = _REASON.match(message)
        if match is not None and match.group(1) != "InternalError":
            return EncoderFailure(match.group(1), message, CLIENT)
        return EncoderFailure("ImageEncoderRejected", f"ImageEncoderRejected: {message}", CLIENT)
    if code in ("INTERNAL", "UNKNOWN"):
        return EncoderFailure("InternalError", f"InternalError: image encoder pool at {url}: {message}", INTERNAL)
    if code == "UNAVAILABLE" and message.startswith(OUT_OF_MEMORY + ": "):
        return EncoderFailure(OUT_OF_MEMORY, f"{OUT_OF_MEMORY}: image encoder pool at {url}: "
                                             f"{message.removeprefix(OUT_OF_MEMORY + ': ')}", UNAVAILABLE)
    shown = f"{code}: {message}" if code else message
    return EncoderFailure(IMAGE_ENCODER_UNAVAILABLE,
                          f"{IMAGE_ENCODER_UNAVAILABLE}: the image encoder pool at {url} did not answer ({shown}); "
                          "requests without images are still served", UNAVAILABLE)


@dataclass(frozen=True)
class RemoteImages:
    """The pool's answer for one request's k images."""

    features: NDArray[np.float32]
    """float32 (k, 1280) pooled features."""
    classes: NDArray[np.int32]
    """int32 (k,) top-1 class per image."""
    sizes: NDArray[np.int32]
    """int32 (k, 2) ``(width, height)`` as displayed, before resizing."""
    seconds: float
    """Wall time of the call, from send to answer."""


StartImages = Callable[[list[bytes]], "concurrent.futures.Future[RemoteImages]"]
"""Send one request's encoded images to the pool; the future fails with :class:`EncoderFailure`."""


@dataclass
class FrontPrepared:
    """A request checked by the front, its images still encoded."""

    modality: str
    images: list[bytes]
    token_ids: list[int] | None
    """Encoder ids ([CLS] ... [SEP], truncated to 256) or None without text."""
    text_tokens: int | None
    """WordPiece tokens of the text before truncation; None without text."""
    stage_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FrontOutput:
    """Outputs of one front request (as ``pipeline.RequestOutput``) plus what its metrics need."""

    embedding: NDArray[np.float32]
    """float32 (256,)."""
    modality: str
    image_classes: NDArray[np.int32]
    """int32 (n_images,)."""
    image_pixels: list[int]
    """``width * height`` of each image, from the pool."""
    text_tokens: int | None
    stage_s: dict[str, float]


class FrontPipeline:
    """Prepare and run requests for one front model instance.

    Args:
        settings: From the model config parameters.
        encoder: Holds the text encoder and the fusion head (never asked for the image encoder).
        start_images: Sends one request's images to the pool (:data:`StartImages`).
        clock: Monotonic seconds.
        timeout_s: How long :meth:`run` waits for a batch's image calls (each call also has its own deadline).
    """

    def __init__(self, settings: ModelSettings, encoder: MultimodalEncoder, start_images: StartImages,
                 clock: Callable[[], float] = time.perf_counter,
                 timeout_s: float = ENCODER_CALL_TIMEOUT_S + 5.0) -> None:
        self.settings = settings
        self.encoder = encoder
        self.start_images = start_images
        self.clock = clock
        self.timeout_s = timeout_s

    def prepare(self, images: NDArray[np.object_] | None, text: NDArray[np.object_] | None) -> FrontPrepared:
        """Check and tokenize one request; its images are not decoded (the pool does it).

        Raises:
            RequestError: As ``inputs.check_request`` (and ``BadElementType`` for an element that is not bytes).
        """
        start = self.clock()
        items, decoded_text = check_request(images, text, self.settings)
        data = image_bytes(items)
        checked = self.clock()
        token_ids, tokens = None, None
        if decoded_text is not None:
            token_ids = self.encoder.token_ids(decoded_text)
            tokens = self.encoder.count_tokens(decoded_text)
        stage_s = {"decode": checked - start}
        if decoded_text is not None:
            stage_s["tokenize"] = self.clock() - checked
        if data and decoded_text is not None:
            modality = Modality.IMAGE_TEXT.value
        else:
            modality = Modality.IMAGE.value if data else Modality.TEXT.value
        return FrontPrepared(modality=modality, images=data, token_ids=token_ids, text_tokens=tokens,
                             stage_s=stage_s)

    def run(self, batch: Sequence[FrontPrepared]) -> list[FrontOutput | EncoderFailure]:
        """Serve a batch: every image call is sent first, the texts are encoded while they are out, then each
        request's image features are awaited, averaged per request and fused with its text.

        Returns:
            Per request, in order: its output, or the :class:`EncoderFailure` of its image call (the other requests
            are served).
        """
        n = len(batch)
        calls = {r: self.start_images(prep.images) for r, prep in enumerate(batch) if prep.images}
        text_features, text_present = encode_texts(
            self.encoder, [prep.token_ids for prep in batch], [prep.stage_s for prep in batch],
            self.settings.modality_aware_batching, self.clock)
        image_features = np.zeros((n, IMAGE_FEATURE_DIM), dtype=np.float32)
        image_present = np.zeros(n, dtype=bool)
        answers: dict[int, RemoteImages] = {}
        failures: dict[int, EncoderFailure] = {}
        deadline = time.monotonic() + self.timeout_s  # one deadline for the batch's calls, which run side by side
        for r, call in calls.items():
            try:
                answer = call.result(timeout=max(0.0, deadline - time.monotonic()))
            except EncoderFailure as exc:
                failures[r] = exc
                continue
            except concurrent.futures.TimeoutError:
                failures[r] = classify_encoder_error(None, f"no answer within {self.timeout_s:g} s",
                                                     self.settings.image_encoder_url)
                continue
            answers[r] = answer
            image_features[r] = answer.features.mean(axis=0)
            image_present[r] = True
            batch[r].stage_s["image_encoder"] = answer.seconds
        served = [r for r in range(n) if r not in failures]
        embeddings: dict[int, NDArray[np.float32]] = {}
        if served:
            rows = np.array(served)
            start = self.clock()
            fused = self.encoder.fuse(image_features[rows], image_present[rows], text_features[rows],
                                      text_present[rows])
            for j, (r, share) in enumerate(zip(served, split_evenly(self.clock() - start, [1] * len(served)),
                                               strict=True)):
                embeddings[r] = fused[j]
                batch[r].stage_s["fusion"] = batch[r].stage_s.get("fusion", 0.0) + share
        outputs: list[FrontOutput | EncoderFailure] = []
        for r, prep in enumerate(batch):
            if r in failures:
                outputs.append(failures[r])
                continue
            remote = answers.get(r)
            outputs.append(FrontOutput(
                embedding=embeddings[r], modality=prep.modality,
                image_classes=np.zeros(0, np.int32) if remote is None else remote.classes.astype(np.int32),
                image_pixels=[] if remote is None else [int(w) * int(h) for w, h in remote.sizes],
                text_tokens=prep.text_tokens, stage_s=dict(prep.stage_s)))
        return outputs
