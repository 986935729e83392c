"""Batch handlers (`service.add_batch_handler`): sizes and waits honoured, per-event
outcomes settled one by one, serial keys and rate limits within batches, sync batch
handlers, the handler timeout, a stop that cuts a batch off, and per-event metrics, tracing
scopes and deliveries, against real servers."""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
import pytest

from aioqueue import (
    Delivery,
    EventServiceBuilder,
    HandlerRegistrationError,
    HandlingScope,
    NoInstrumentation,
    NoMetrics,
    Outcome,
    OutsideHandlerError,
    current_deliveries,
    current_delivery,
)
from aioqueue._delivery.handler_runner import Succeeded, _Call
from aioqueue._delivery.leases import Lease
from aioqueue._delivery.takers import Claim
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from tests.delivery.test_leases import enqueue_due_now, lease_worker, started_lines
from tests.support.common import EVERY_TOPOLOGY, OrderStep, PaymentCheck, queue_key, wait_until

Builder = Callable[[], EventServiceBuilder]


@dataclass
class Batches:
    """A batch handler that records each call's ids and deliveries; `outcome` decides
    what it returns."""

    outcome: Callable[[list[PaymentCheck]], Any] = lambda batch: True
    calls: list[list[str]] = field(default_factory=list)
    deliveries: list[list[Delivery]] = field(default_factory=list)
    started: list[float] = field(default_factory=list)

    async def __call__(self, batch: list[PaymentCheck]) -> Any:  # wrong outcomes included
        self.started.append(time.monotonic())
        self.calls.append([event.id for event in batch])
        self.deliveries.append(current_deliveries())
        return self.outcome(batch)

    @property
    def handled(self) -> int:
        return sum(len(call) for call in self.calls)

    async def wait_for(self, count: int, within: float = 20) -> None:
        async def enough() -> bool:
            return self.handled >= count

        await wait_until(enough, within=within)


def checks(count: int, prefix: str = "p") -> list[PaymentCheck]:
    return [PaymentCheck(id=f"{prefix}-{n}", order_id=n) for n in range(count)]


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


@dataclass
class PerEvent(NoMetrics, NoInstrumentation):
    """Metrics and instrumentation that note each event they see."""

    handled: list[tuple[str, Outcome]] = field(default_factory=list)
    scopes: list[tuple[str, str | None]] = field(default_factory=list)

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        self.handled.append((event_type, outcome))

    def handling(
        self, event_type: str, event_id: str, attempt: int, context: Mapping[str, str]
    ) -> AbstractContextManager[HandlingScope]:
        watcher = self

        class Scope:
            def finished(self, error: str | None) -> None:
                watcher.scopes.append((event_id, error))

            def __enter__(self) -> HandlingScope:
                return self

            def __exit__(self, *exc_info: object) -> None:
                return None

        return Scope()


async def test_metrics_and_instrumentation_see_each_event(service_builder: Builder) -> None:
    watcher = PerEvent()
    handler = Batches(lambda batch: {"p-0": True, "p-1": False})
    service = service_builder().metrics(watcher).instrumentation(watcher).retry_attempts(1).build()
    service.add_batch_handler(PaymentCheck, handler, max_size=10, max_wait=0.1)
    async with service:
        await service.enqueue_many(checks(2), 0)

        async def both() -> bool:
            return len(watcher.handled) == 2

        await wait_until(both)
    assert sorted(watcher.handled) == [("PaymentCheck", "dead"), ("PaymentCheck", "ok")]
    assert sorted(watcher.scopes) == [
        ("p-0", None),
        ("p-1", "batch handler Batches returned False for it on attempt 1"),
    ]


async def test_current_delivery_points_a_batch_handler_to_current_deliveries(
    service_builder: Builder,
) -> None:
    seen: list[str] = []

    async def handle(batch: list[PaymentCheck]) -> bool:
        try:
            current_delivery()
        except OutsideHandlerError as error:
            seen.append(str(error))
        return True

    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handle, max_size=10, max_wait=0.05)
    async with service:
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)

        async def called() -> bool:
            return bool(seen)

        await wait_until(called)
    assert "current_deliveries()" in seen[0]
    with pytest.raises(OutsideHandlerError):
        current_deliveries()


async def test_a_finished_batch_is_freed_and_describes_nothing_after_its_handler(
    service_builder: Builder, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loop timers scheduled during a batch call keep its context until their time comes,
    cancelled or not: the handler timeout's own does, for 30 s here. The batch's leases and
    envelopes must not stay alive with it: once 20 batches of 50 are handled and
    acknowledged, at most the last one's are. A task the handler left behind, which shares
    its context, finds no deliveries once the handler has returned."""
    alive = 0

    class CountedLease(Lease):
        """Counts itself: leases are not tracked by the garbage collector, so
        gc.get_objects() cannot find them."""

        def __post_init__(self) -> None:
            nonlocal alive
            alive += 1

        def __del__(self) -> None:
            nonlocal alive
            alive -= 1

    monkeypatch.setattr("aioqueue._delivery.leases.Lease", CountedLease)
    batches = 20
    handled = 0
    late_errors: list[str] = []
    released = anyio.Event()
    left_behind: list[asyncio.Task[None]] = []

    async def look_later() -> None:
        await released.wait()
        try:
            current_deliveries()
        except OutsideHandlerError as error:
            late_errors.append(str(error))

    async def handle(batch: list[PaymentCheck]) -> bool:
        nonlocal handled
        if not left_behind:
            left_behind.append(asyncio.get_running_loop().create_task(look_later()))
        handled += len(batch)
        return True

    service = service_builder().build()
    service.add_batch_handler(PaymentCheck, handle, max_size=50, max_wait=0.01)
    async with service:
        for n in range(batches):
            await service.enqueue_many(checks(50, f"b{n}"), 0)

        async def all_acknowledged() -> bool:
            return handled == batches * 50 and not await redis_client.hlen(
                queue_key("PaymentCheck", "events")
            )

        await wait_until(all_acknowledged)
        gc.collect()
        alive_after = alive
        released.set()
        await left_behind[0]
    assert 0 <= alive_after <= 50
    assert late_errors == [
        "current_deliveries() describes a batch while its handler runs; this batch handler "
        "has returned"
    ]


def test_the_records_of_each_event_in_flight_are_left_to_reference_counting() -> None:
    """A batch holds hundreds of each at once: tracked by the garbage collector, they were
    promoted through its young generations and brought on full collections of the whole
    process (docs/benchmarks.md). A worker holds them in sets and maps by identity, as it
    would dataclasses with eq=False; an envelope is a value."""

    def records() -> list[object]:
        envelope = Envelope.parse('{"p":"{}","v":1}', event_type="PaymentCheck", event_id="p-1")
        lease = Lease(
            store=None,  # type: ignore[arg-type]
            envelope=envelope,
            claimed_at_ms=0,
            claimed_at=0.0,
            held_until=0.0,
        )
        return [
            envelope,
            lease,
            Claim(partition=None, lease=lease),  # type: ignore[arg-type]
            _Call(lease, lateness=0.0, started=0.0, max_attempts=3),
            Succeeded(lease, duration=0.0, lateness=0.0),
        ]

    first, second = records(), records()
    assert [gc.is_tracked(record) for record in first] == [False] * 5
    same = [one == twin for one, twin in zip(first, second, strict=True)]
    assert same == [True, False, False, False, False]
    lease, twin = first[1], second[1]
    assert len({lease, twin, lease}) == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_size": 0}, "max_size must be an integer from 1 to 10000"),
        ({"max_size": True}, "max_size must be an integer"),
        ({"max_wait": -1}, "max_wait must be between 0 and 3600 s"),
        ({"max_wait": "soon"}, "invalid max_wait"),
        ({"parallelism": 0}, "parallelism must be an integer >= 1"),
    ],
)
def test_bad_batch_settings_are_refused_at_registration(
    service_builder: Builder, settings: dict[str, object], message: str
) -> None:
    service = service_builder().build()
    with pytest.raises(HandlerRegistrationError, match=message):
        service.add_batch_handler(PaymentCheck, Batches(), **settings)  # type: ignore[arg-type]


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
