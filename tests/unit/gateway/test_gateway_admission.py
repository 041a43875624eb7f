"""Admission: the in-flight limit, the bounded FIFO queue, holding at zero, overflow and timeout (asyncio only)."""

from __future__ import annotations

import asyncio

import pytest

from modalscale.gateway.admission import Admission, Rejected


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_admits_up_to_the_limit_then_queues_fifo() -> None:
    async def body() -> list[int]:
        adm = Admission(max_inflight=2, queue_size=5, queue_timeout_s=5, is_ready=lambda: True)
        await adm.enter()
        await adm.enter()
        order: list[int] = []

        async def waiter(i: int) -> None:
            await adm.enter()
            order.append(i)

        tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert adm.waiting == 3 and adm.inflight == 2 and order == []
        for _ in range(3):
            adm.exit()
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        assert adm.inflight == 2
        return order

    assert run(body()) == [0, 1, 2]


def test_overflow_is_refused_at_once_with_retry_after() -> None:
    async def body() -> Rejected:
        adm = Admission(max_inflight=1, queue_size=1, queue_timeout_s=5, is_ready=lambda: True)
        await adm.enter()
        queued = asyncio.create_task(adm.enter())
        await asyncio.sleep(0.01)
        with pytest.raises(Rejected) as err:
            await adm.enter()
        queued.cancel()
        return err.value

    rej = run(body())
    assert isinstance(rej, Rejected) and rej.reason == "QueueFull" and rej.retry_after_s >= 1


def test_hold_at_zero_until_a_replica_is_ready() -> None:
    async def body() -> float:
        ready = [False]
        adm = Admission(max_inflight=4, queue_size=4, queue_timeout_s=5, is_ready=lambda: ready[0])
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task = asyncio.create_task(adm.enter())
        await asyncio.sleep(0.2)
        assert not task.done() and adm.waiting == 1
        ready[0] = True
        adm.wake()
        await task
        return loop.time() - t0

    # admitted by wake(), long before its 5 s queue timeout (a bare 1 s bound would fail on a stalled machine)
    assert 0.2 <= run(body()) < 5 / 2  # type: ignore[operator]


def test_timeout_at_zero_says_no_ready_replica_and_frees_the_place() -> None:
    async def body() -> tuple[str, int]:
        adm = Admission(max_inflight=4, queue_size=1, queue_timeout_s=0.1, is_ready=lambda: False)
        with pytest.raises(Rejected) as err:
            await adm.enter()
        return err.value.reason, adm.waiting

    assert run(body()) == ("NoReadyReplica", 0)


def test_timeout_with_replicas_says_queue_timeout() -> None:
    async def body() -> str:
        adm = Admission(max_inflight=1, queue_size=1, queue_timeout_s=0.1, is_ready=lambda: True)
        await adm.enter()
        with pytest.raises(Rejected) as err:
            await adm.enter()
        return err.value.reason

    assert run(body()) == "QueueTimeout"


def test_cancelled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    async def body() -> tuple[int, int]:
        adm = Admission(max_inflight=1, queue_size=2, queue_timeout_s=5, is_ready=lambda: True)
        await adm.enter()
        task = asyncio.create_task(adm.enter())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        adm.exit()
        return adm.inflight, adm.waiting

    assert run(body()) == (0, 0)


def test_closed_admission_refuses_new_requests() -> None:
    async def body() -> str:
        adm = Admission(max_inflight=1, queue_size=1, queue_timeout_s=1, is_ready=lambda: True)
        adm.close()
        with pytest.raises(Rejected) as err:
            await adm.enter()
        return err.value.reason

    assert run(body()) == "ShuttingDown"


def test_close_at_zero_refuses_the_waiters_instead_of_leaving_them_to_hang() -> None:
    async def body() -> tuple[str, list[tuple[int, int]]]:
        seen: list[tuple[int, int]] = []
        adm: Admission

        def changed() -> None:
            seen.append((adm.inflight, adm.waiting))

        adm = Admission(max_inflight=1, queue_size=2, queue_timeout_s=5, is_ready=lambda: False, on_change=changed)
        task = asyncio.create_task(adm.enter())
        await asyncio.sleep(0.01)
        adm.close()
        with pytest.raises(Rejected) as err:
            await task
        return err.value.reason, seen

    reason, seen = run(body())  # type: ignore[misc]
    assert reason == "ShuttingDown"
    assert seen[0] == (0, 1) and seen[-1] == (0, 0)  # the gauges saw the wait begin and end
