"""A front's client of the image encoder pool: KServe v2 gRPC (``tritonclient.grpc``) calls that return futures.

Each call is sent with ``async_infer`` and answered on gRPC's own thread, so the front's model thread encodes texts
while the images are out (``staged.FrontPipeline``). No ``triton_python_backend_utils``: usable in any process.

Connections: a ClusterIP Service balances per TCP connection, and one gRPC channel is one connection, so a front with
one channel would send every image to one encoder pod and never reach a pod added by a scale-up. The client keeps
:data:`CHANNELS` channels, each with its own connection (``grpc.use_local_subchannel_pool``), takes them in turn,
and replaces a channel older than :data:`CHANNEL_MAX_AGE_S` on its next use (the old one is closed once its calls
can no longer be in flight), so the pool's pods share the load within about a minute of a change. Reconnect backoff
is capped at :data:`MAX_RECONNECT_BACKOFF_MS`, so a pool that comes back is used within seconds (gRPC's default
backoff grows to 120 s while a channel's calls fail at once).

Retries: encoding an image has no side effect, so a call that fails with one of :data:`RETRIED_STATUSES` is sent
again: ``UNAVAILABLE`` (its pod was killed with the call in flight, or the connection went to a pod that is gone
before the Service's endpoints changed) and ``NOT_FOUND`` (a pod that is stopping: Triton unloads its models on
SIGTERM and answers "unknown model" on the connections it still holds; an encoder pod deleted under load on the
real node failed 47 image requests, each of the five shown with ``NOT_FOUND``, while only ``UNAVAILABLE`` was
retried). It goes on the next channel
(another connection, so most likely another pod) after :data:`RETRY_BACKOFF_S`, doubling up to
:data:`RETRY_BACKOFF_MAX_S`, for as long as it can start again within :data:`RETRY_WINDOW_S` of the first send,
each attempt under what is left of the call's deadline. Any other status (the request's fault, a deadline exceeded,
an unreadable answer) is never retried. A pool that stays down fails its image requests after the window
(503 ``ImageEncoderUnavailable``).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from modalscale.runtime.model.staged import (
    ENCODER_CALL_TIMEOUT_S,
    INTERNAL,
    EncoderFailure,
    RemoteImages,
    classify_encoder_error,
)
from modalscale.runtime.repo_config import CLASSES, ENCODER_IMAGE, ENCODER_IMAGE_SIZE, FEATURES, IMAGE_ENCODER_MODEL

CHANNELS = 4
"""gRPC channels (TCP connections) per client, used in turn."""
CHANNEL_MAX_AGE_S = 30.0
"""A channel older than this is replaced on its next use (seconds)."""
MAX_RECONNECT_BACKOFF_MS = 2000
"""Longest wait between reconnection attempts of a channel whose pool did not answer."""
MAX_MESSAGE_BYTES = 2**31 - 1
"""Send and receive limit of a call (tritonclient's default; 16 large images exceed gRPC's 4 MiB)."""
RETRIED_STATUSES = ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND")
"""gRPC statuses of a call that another pod of the pool may answer (tritonclient's ``status()`` strings)."""
RETRY_WINDOW_S = 10.0
"""A call failing with one of :data:`RETRIED_STATUSES` is sent again while the next attempt starts within this many
seconds of the first send (seconds; never past the call's deadline)."""
RETRY_BACKOFF_S = 0.1
"""Wait before the first retry, doubled at each further one (seconds)."""
RETRY_BACKOFF_MAX_S = 1.0
"""Longest wait between two attempts (seconds)."""

CHANNEL_ARGS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
]
"""Channel arguments of every channel (given whole: tritonclient then sets none of its own)."""


def _after(delay_s: float, fn: Callable[[], None]) -> None:
    """Run ``fn`` after ``delay_s`` on a daemon timer thread."""
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()


def _grpc_client(url: str) -> Any:
    return grpcclient.InferenceServerClient(url, channel_args=CHANNEL_ARGS)


class ImageEncoderClient:
    """Calls :data:`~modalscale.runtime.repo_config.IMAGE_ENCODER_MODEL` at ``url``.

    Args:
        url: ``host:port`` of the pool's gRPC endpoint.
        model: The model name.
        timeout_s: Deadline of one call.
        channels: Channels used in turn.
        max_age_s: Age after which a channel is replaced.
        clock: Monotonic seconds (channel ages).
        call_clock: Seconds for the calls' wall times.
        new_client: ``url -> tritonclient.grpc.InferenceServerClient`` (injectable for tests).
        retry_window_s: Calls failing with :data:`RETRIED_STATUSES` are retried while a retry starts within this of
            the first send (0 = never retried).
        schedule: ``(delay_s, fn)``: run ``fn`` after ``delay_s`` on another thread (injectable for tests; a retry
            is never sent from gRPC's callback thread itself).

    Attributes:
        retries: Calls sent again so far (every retry counts once).
    """

    def __init__(self, url: str, model: str = IMAGE_ENCODER_MODEL, timeout_s: float = ENCODER_CALL_TIMEOUT_S,
                 channels: int = CHANNELS, max_age_s: float = CHANNEL_MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic, call_clock: Callable[[], float] = time.perf_counter,
                 new_client: Callable[[str], Any] = _grpc_client, retry_window_s: float = RETRY_WINDOW_S,
                 schedule: Callable[[float, Callable[[], None]], None] | None = None) -> None:
        self.url = url
        self.model = model
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self.clock = clock
        self.call_clock = call_clock
        self._new_client = new_client
        now = clock()
        self._slots: list[tuple[Any, float]] = [(new_client(url), now) for _ in range(max(1, channels))]
        self._retired: list[tuple[Any, float]] = []
        self._turn = 0
        self._lock = threading.Lock()  # the model thread and retries (timer threads) take channels
        self.retry_window_s = retry_window_s
        self._schedule = schedule or _after
        self.retries = 0

    def _client(self) -> Any:
        """The next channel's client, replacing it first when older than ``max_age_s``; closes retired channels
        whose calls have all passed their deadline."""
        with self._lock:
            return self._next_client()

    def _next_client(self) -> Any:
        now = self.clock()
        i = self._turn
        self._turn = (i + 1) % len(self._slots)
        client, born = self._slots[i]
        if now - born > self.max_age_s:
            self._retired.append((client, now + self.timeout_s + 5.0))
            client = self._new_client(self.url)
            self._slots[i] = (client, now)
        keep = []
        for old, close_after in self._retired:
            if now >= close_after:
                old.close()
            else:
                keep.append((old, close_after))
        self._retired = keep
        return client

    def start(self, images: list[bytes]) -> concurrent.futures.Future[RemoteImages]:
        """Send one request's encoded images (``IMAGE`` ``[k, 1]`` BYTES); never raises.

        Returns:
            A future of :class:`~modalscale.runtime.model.staged.RemoteImages`, failed with
            :class:`~modalscale.runtime.model.staged.EncoderFailure` (``classify_encoder_error``) when the call
            fails.
        """
        future: concurrent.futures.Future[RemoteImages] = concurrent.futures.Future()
        array = np.empty((len(images), 1), dtype=np.object_)
        for i, data in enumerate(images):
            array[i, 0] = data
        tensor = grpcclient.InferInput(ENCODER_IMAGE, [len(images), 1], "BYTES")
        tensor.set_data_from_numpy(array)
        outputs = [grpcclient.InferRequestedOutput(name) for name in (FEATURES, CLASSES, ENCODER_IMAGE_SIZE)]
        sent = self.call_clock()
        first = self.clock()

        def failed(attempt: int, status: Any, message: str) -> None:
            delay = min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2 ** attempt)
            if (status in RETRIED_STATUSES and self.clock() + delay - first < self.retry_window_s
                    and self.clock() + delay - first < self.timeout_s):
                with self._lock:
                    self.retries += 1
                self._schedule(delay, lambda: send(attempt + 1))
                return
            future.set_exception(classify_encoder_error(status, message, self.url))

        def send(attempt: int) -> None:
            def done(result: Any, error: Any) -> None:
                if error is not None:
                    failed(attempt, error.status(), error.message())
                    return
                try:
                    future.set_result(decode_answer(result, len(images), self.call_clock() - sent))
                except (ValueError, TypeError, AttributeError, InferenceServerException) as exc:
                    future.set_exception(EncoderFailure("InternalError", f"InternalError: image encoder pool at "
                                                        f"{self.url} sent an answer that could not be read: {exc}",
                                                        INTERNAL))

            try:
                self._client().async_infer(self.model, [tensor], callback=done, outputs=outputs,
                                           client_timeout=max(0.001, self.timeout_s - (self.clock() - first)))
            except InferenceServerException as exc:
                failed(attempt, exc.status(), exc.message())

        send(0)
        return future

    def close(self) -> None:
        """Close every channel (calls still out fail)."""
        for client, _ in self._slots + self._retired:
            client.close()
        self._retired = []


def decode_answer(result: Any, count: int, seconds: float) -> RemoteImages:
    """A tritonclient ``InferResult`` of the pool -> :class:`~modalscale.runtime.model.staged.RemoteImages`.

    Raises:
        ValueError: An output is missing or its shape is not ``[count, ...]``.
    """
    arrays: Sequence[Any] = [result.as_numpy(name) for name in (FEATURES, CLASSES, ENCODER_IMAGE_SIZE)]
    if any(a is None for a in arrays):
        raise ValueError("an output is missing")
    features, classes, sizes = arrays
    if features.shape[0] != count or classes.shape[0] != count or sizes.shape != (count, 2):
        raise ValueError(f"shapes {features.shape}, {classes.shape}, {sizes.shape} for {count} images")
    return RemoteImages(features=np.asarray(features, dtype=np.float32), classes=classes.reshape(-1).astype(np.int32),
                        sizes=sizes.astype(np.int32), seconds=seconds)
