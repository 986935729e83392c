"""Concurrent enqueues share script calls, and each caller still gets its own answer."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue._engine.coalescer import Coalescer
from tests.support import PaymentCheck

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

    coalescer: Coalescer[int, int] = Coalescer(flush, max_batch=100)
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

    coalescer: Coalescer[str, str] = Coalescer(flush, max_batch=10)
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
