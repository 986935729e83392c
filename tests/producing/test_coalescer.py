"""Concurrent enqueues share script calls, and each caller still gets its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue._producing.producer import LANES, Producer
from aioqueue._transport.coalescer import MIN_SHARE, Coalescer
from tests.support.common import PaymentCheck

Builder = Callable[[], EventServiceBuilder]


async def script_calls(client: redis.Redis) -> int:
    """Script calls the server ran so far: as functions (FCALL) or by SHA."""
    stats = await client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha"))


async def test_concurrent_enqueues_share_round_trips_and_keep_their_own_results(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """500 enqueues with 50 in flight take far fewer script calls, and dedupe is per event."""
    before = await script_calls(redis_client)
    results: dict[int, bool] = {}
    async with service_builder().enable_scheduling(False).build() as service:
        # ids repeat every 400: the last 100 calls find their event pending.
        limiter = anyio.Semaphore(50)

        async def enqueue(n: int) -> None:
            async with limiter:
                results[n] = await service.enqueue(PaymentCheck(id=f"p-{n % 400}", order_id=n), 60)

        async with anyio.create_task_group() as group:
            for n in range(500):
                group.start_soon(enqueue, n)
    after = await script_calls(redis_client)
    assert sorted(n for n, scheduled in results.items() if not scheduled) == list(range(400, 500))
    assert await redis_client.hlen("aioqueue:{PaymentCheck}:events") == 400
    assert after - before < 250  # one call per enqueue would be 500


async def test_an_error_reaches_every_caller_of_the_batch_and_the_next_batch_goes_on() -> None:
    """A failing flush fails exactly the requests it carried."""
    calls: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        calls.append(items)
        await anyio.sleep(0.01)
        if 13 in items:
            raise ValueError("unlucky batch")
        return [item * 2 for item in items]

    coalescer: Coalescer[int, int] = Coalescer([flush], max_batch=100)
    outcomes: dict[int, int | str] = {}

    async def submit(item: int) -> None:
        try:
            outcomes[item] = await coalescer.submit(item)
        except ValueError as exc:
            outcomes[item] = str(exc)

    async with anyio.create_task_group() as group:
        for item in range(20):
            group.start_soon(submit, item)
    failed = {item for item, outcome in outcomes.items() if outcome == "unlucky batch"}
    [unlucky] = [batch for batch in calls if 13 in batch]
    assert failed == set(unlucky)
    assert all(outcomes[item] == item * 2 for item in range(20) if item not in failed)
    assert len(calls) < 20


async def test_a_cancelled_flusher_still_answers_the_others() -> None:
    """The caller that happens to flush can be cancelled without stranding the rest."""
    release = anyio.Event()

    async def flush(items: list[str]) -> list[str]:
        await release.wait()
        return [item.upper() for item in items]

    coalescer: Coalescer[str, str] = Coalescer([flush], max_batch=10)
    answers: list[str] = []
    flusher_scope = anyio.CancelScope()

    async def flusher() -> None:
        with flusher_scope:
            answers.append(await coalescer.submit("a"))

    async def other() -> None:
        answers.append(await coalescer.submit("b"))

    async with anyio.create_task_group() as group:
        group.start_soon(flusher)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(other)
        await anyio.wait_all_tasks_blocked()
        flusher_scope.cancel()
        release.set()
    # "b" arrived while "a" was in flight, so the cancelled flusher had to send it too.
    assert "B" in answers


def lanes_recording(
    lanes: int, sizes: list[int], in_flight_most: list[int]
) -> list[Callable[[list[int]], Awaitable[list[int]]]]:
    """Flushes that answer item * 2 from a model of one server: it runs one batch at a time,
    for loop turns in proportion to its size, as Redis runs one script call at a time. Each
    notes the batch's size and how many batches were in flight at most."""
    in_flight = 0
    server = asyncio.Lock()

    async def flush(items: list[int]) -> list[int]:
        nonlocal in_flight
        sizes.append(len(items))
        in_flight += 1
        in_flight_most[0] = max(in_flight_most[0], in_flight)
        try:
            await asyncio.sleep(0)  # on the wire
            async with server:
                for _ in range(len(items) // 4 + 1):
                    await asyncio.sleep(0)
            return [item * 2 for item in items]
        finally:
            in_flight -= 1

    return [flush] * lanes


async def test_two_lanes_keep_two_even_batches_in_flight() -> None:
    """32 callers that each submit again as soon as answered settle into two batches of 16,
    both in flight at once, and every caller gets its own answer."""
    sizes: list[int] = []
    most = [0]
    coalescer: Coalescer[int, int] = Coalescer(lanes_recording(2, sizes, most), max_batch=500)
    answers: dict[int, int] = {}

    async def caller(lane: int) -> None:
        for item in range(lane, 32 * 20, 32):
            answers[item] = await coalescer.submit(item)

    async with anyio.create_task_group() as group:
        for lane in range(32):
            group.start_soon(caller, lane)
    assert answers == {item: item * 2 for item in range(32 * 20)}
    assert most == [2]
    assert sizes[:2] == [16, 16]  # the first wave is split evenly
    # ... and the lanes stay even (the last batch is what the callers' ends leave over).
    assert set(sizes[5:-1]) == {16}, sizes


async def test_few_callers_share_one_lane() -> None:
    """A second lane opens only for a share of MIN_SHARE each: three callers at once go out
    as one batch, as with one lane."""
    sizes: list[int] = []
    most = [0]
    coalescer: Coalescer[int, int] = Coalescer(lanes_recording(2, sizes, most), max_batch=500)
    async with anyio.create_task_group() as group:
        for item in range(3):
            group.start_soon(coalescer.submit, item)
    assert sizes == [3]
    assert most == [1]
    assert MIN_SHARE > 3


async def test_a_service_keeps_two_enqueue_calls_in_flight(
    service_builder: Builder, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """32 callers enqueueing one after another keep two script calls in flight on a real
    server, and each caller still gets its own answer (ids repeat within a caller)."""
    in_flight, most = 0, 0
    write = Producer._write

    async def counting(self: Producer, *args: Any, **kwargs: Any) -> list[bool]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await write(self, *args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(Producer, "_write", counting)
    results: dict[tuple[int, int], bool] = {}
    async with service_builder().enable_scheduling(False).build() as service:

        async def caller(lane: int) -> None:
            for n in range(20):  # the last 5 find their event pending
                event = PaymentCheck(id=f"p-{lane}-{n % 15}", order_id=n)
                results[lane, n] = await service.enqueue(event, 60)

        async with anyio.create_task_group() as group:
            for lane in range(32):
                group.start_soon(caller, lane)
    assert most == LANES == 2
    assert results == {(lane, n): n < 15 for lane in range(32) for n in range(20)}
    assert await redis_client.hlen("aioqueue:{PaymentCheck}:events") == 32 * 15
