"""Batch handlers (`service.add_batch_handler`): sizes and waits honoured, per-event
outcomes settled one by one, serial keys and rate limits within batches, sync batch
handlers, the handler timeout, a stop that cuts a batch off and a worker killed mid-batch,
against real servers. What a batch handler's events look like to metrics, instrumentation
and `current_deliveries` is in test_batch_instrumentation.py."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from datetime import timedelta

import anyio

from aioqueue import (
    EventServiceBuilder,
    current_deliveries,
)
from aioqueue._transport.client import RedisClient
from tests.delivery.test_leases import enqueue_due_now, lease_worker, started_lines
from tests.support.batches import Batches, checks
from tests.support.common import EVERY_TOPOLOGY, OrderStep, PaymentCheck, queue_key, wait_until

Builder = Callable[[], EventServiceBuilder]


@EVERY_TOPOLOGY
async def test_a_backlog_comes_in_full_batches_each_event_once(service_builder: Builder) -> None:
    handler = Batches()
    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handler, max_size=100, max_wait=5)
    async with service:
        await service.enqueue_many(checks(250), 0)
        await handler.wait_for(250)
    assert sorted(id for call in handler.calls for id in call) == sorted(
        event.id for event in checks(250)
    )
    assert all(len(call) <= 100 for call in handler.calls)
    # Whole batches without waiting for max_wait, save the last.
    assert sorted(len(call) for call in handler.calls)[-2:] == [100, 100]
    for call, deliveries in zip(handler.calls, handler.deliveries, strict=True):
        assert [delivery.id for delivery in deliveries] == call
        assert {(delivery.type, delivery.attempt) for delivery in deliveries} == {
            ("PaymentCheck", 1)
        }


async def test_a_trickle_waits_max_wait_after_the_first_event(service_builder: Builder) -> None:
    handler = Batches()
    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handler, max_size=100, max_wait=0.3)
    async with service:
        enqueued = time.monotonic()
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await handler.wait_for(1)
        waited = handler.started[0] - enqueued
        await service.enqueue_many(checks(2, "q"), 0)
        await handler.wait_for(3)
    assert handler.calls[0] == ["p-1"]
    assert 0.3 <= waited < 0.3 + 0.5
    # The late ones that came together were handled together.
    assert sorted(handler.calls[1]) == ["q-0", "q-1"]


async def test_outcomes_per_event_are_settled_one_by_one(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    # p-0 succeeds, p-1 fails (False), p-2 is left out (tried again), p-3 gets no bool.
    def outcome(batch: list[PaymentCheck]) -> Mapping[str, object]:
        return {
            "p-0": True,
            "p-1": False,
            "p-3": "yes",
            "stranger": True,  # not in the batch: ignored
        }

    handler = Batches(outcome)
    service = service_builder().retry_attempts(2).build()
    service.add_batch_handler(PaymentCheck, handler, max_size=10, max_wait=0.2)
    async with service:
        await service.enqueue_many(checks(4), 0)

        async def three_dead() -> bool:
            return await redis_client.hlen(queue_key("PaymentCheck", "dead_letters")) == 3

        await wait_until(three_dead)
        letters = {letter.id: letter for letter in await service.dead_letters(PaymentCheck)}
    assert handler.calls[0] == ["p-0", "p-1", "p-2", "p-3"]
    # Only the failures came back, each with its second attempt.
    assert sorted(id for call in handler.calls[1:] for id in call) == ["p-1", "p-2", "p-3"]
    assert {d.id: d.attempt for call in handler.deliveries[1:] for d in call} == {
        "p-1": 2,
        "p-2": 2,
        "p-3": 2,
    }
    name = "Batches"
    assert letters["p-1"].error == f"batch handler {name} returned False for it on attempt 2"
    assert letters["p-2"].error == (
        f"batch handler {name} left it out of the outcomes it returned on attempt 2 (an event "
        "left out is tried again)"
    )
    assert letters["p-3"].error == (
        f"batch handler {name} returned 'yes' for it on attempt 2; an outcome is True or False"
    )
    assert letters["p-1"].attempts == 2


async def test_false_or_an_exception_tries_every_event_again_on_its_own_backoff(
    service_builder: Builder,
) -> None:
    def outcome(batch: list[PaymentCheck]) -> bool:
        if len(handler.calls) == 1:
            return False
        if len(handler.calls) == 2:
            raise ValueError("the provider is down")
        return True

    handler = Batches(outcome)
    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handler, max_size=10, max_wait=0.2)
    async with service:
        await service.enqueue_many(checks(3), 0)
        await handler.wait_for(9)
    attempts = [{d.id: d.attempt for d in call} for call in handler.deliveries]
    assert attempts[0] == {"p-0": 1, "p-1": 1, "p-2": 1}
    assert sorted((id, attempt) for call in attempts[1:] for id, attempt in call.items()) == sorted(
        (f"p-{n}", attempt) for n in range(3) for attempt in (2, 3)
    )


async def test_serial_keys_never_share_a_batch_and_keep_their_order(
    service_builder: Builder,
) -> None:
    calls: list[list[tuple[int, str]]] = []

    async def handle(batch: list[OrderStep]) -> bool:
        calls.append([(step.order_id, step.id) for step in batch])
        return True

    steps = [OrderStep(id=f"s-{order}-{n}", order_id=order) for n in range(3) for order in range(4)]
    service = service_builder().build()
    service.add_batch_handler(OrderStep, handle, max_size=50, max_wait=0.05)
    async with service:
        for n, step in enumerate(steps):
            await service.enqueue(step, timedelta(milliseconds=n))

        async def all_handled() -> bool:
            return sum(len(call) for call in calls) == len(steps)

        await wait_until(all_handled)
    for call in calls:
        keys = [order for order, _ in call]
        assert len(keys) == len(set(keys)), call
    by_key: dict[int, list[str]] = {}
    for call in calls:
        for order, step_id in call:
            by_key.setdefault(order, []).append(step_id)
    assert by_key == {order: [f"s-{order}-{n}" for n in range(3)] for order in range(4)}


async def test_a_batch_takes_a_rate_permit_per_event(service_builder: Builder) -> None:
    handler = Batches()
    service = service_builder().rate_limit(PaymentCheck, 5, per=timedelta(seconds=0.5)).build()
    service.add_batch_handler(PaymentCheck, handler, max_size=100, max_wait=0.05)
    async with service:
        await service.enqueue_many(checks(12), 0)
        await handler.wait_for(12)
    assert max(len(call) for call in handler.calls) <= 5
    # 12 starts at 5 per half second need at least two windows after the first.
    assert handler.started[-1] - handler.started[0] >= 0.9


@EVERY_TOPOLOGY
async def test_a_sync_batch_handler_runs_in_a_thread(service_builder: Builder) -> None:
    calls: list[list[str]] = []
    threads: set[bool] = set()

    def handle(batch: list[PaymentCheck]) -> Mapping[str, bool]:
        import threading

        threads.add(threading.current_thread() is threading.main_thread())
        calls.append([event.id for event in batch])
        assert [d.id for d in current_deliveries()] == calls[-1]
        return {event.id: True for event in batch}

    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handle, max_size=20, max_wait=0.1)
    async with service:
        await service.enqueue_many(checks(50), 0)

        async def all_handled() -> bool:
            return sum(len(call) for call in calls) == 50

        await wait_until(all_handled)
    assert threads == {False}
    assert all(len(call) <= 20 for call in calls)


async def test_the_handler_timeout_covers_the_call_and_fails_each_event(
    service_builder: Builder,
) -> None:
    async def slow(batch: list[PaymentCheck]) -> bool:
        await anyio.sleep(10)
        return True

    service = service_builder().handler_timeout(0.2).retry_attempts(1).build()
    service.add_batch_handler(PaymentCheck, slow, max_size=10, max_wait=0.1)
    async with service:
        await service.enqueue_many(checks(2), 0)

        async def dead() -> bool:
            return len(await service.dead_letters(PaymentCheck)) == 2

        await wait_until(dead)
        letters = await service.dead_letters(PaymentCheck)
    assert {letter.error for letter in letters} == {
        "the handler did not finish within 0.2 s on attempt 1"
    }


async def test_a_stop_cuts_a_running_batch_off_and_gives_its_events_back(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    started = anyio.Event()

    async def hold(batch: list[PaymentCheck]) -> bool:
        started.set()
        await anyio.sleep(60)
        return True

    service = service_builder().handler_timeout(120).shutdown_grace(0.2).build()
    service.add_batch_handler(PaymentCheck, hold, max_size=10, max_wait=0.1)
    async with service:
        await service.enqueue_many(checks(3), 0)
        await started.wait()
    # Given back at once, due now, their attempt spent (the handler began).
    handler = Batches()
    after = service_builder().build()
    after.add_batch_handler(PaymentCheck, handler, max_size=10, max_wait=0.1)
    async with after:
        await handler.wait_for(3, within=5)
    assert {d.attempt for call in handler.deliveries for d in call} == {2}


async def test_a_worker_killed_mid_batch_loses_nothing(
    service_builder: Builder, redis_url: str
) -> None:
    """A worker holding a batch of 40 (a 30 s handler timeout, the default 5 s lease) is
    SIGKILLed: another worker has them all, as second attempts, within a lease or so."""
    await enqueue_due_now(service_builder, 40)
    with lease_worker(redis_url, BATCH="40", HANDLER_TIMEOUT="30") as worker:
        started = await started_lines(worker, 40)
        assert {attempt for _, attempt in started} == {1}
        worker.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        worker.wait()
    handler = Batches()
    async with service_builder().build() as service:
        service.add_batch_handler(PaymentCheck, handler, max_size=40, max_wait=0.1)
        await handler.wait_for(40)
        assert await service.dead_letters(PaymentCheck) == []
    assert sorted(id for call in handler.calls for id in call) == sorted(
        f"p-{n}" for n in range(40)
    )
    assert {d.attempt for call in handler.deliveries for d in call} == {2}
    assert handler.started[-1] - killed_at <= 10
