"""Batch handlers seen per event: metrics and instrumentation, the deliveries a batch handler
reads (`current_deliveries`, `current_delivery`), and the records of a finished batch freed
with it, against real servers."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import anyio
import pytest

from aioqueue import (
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
from tests.support.batches import Batches, checks
from tests.support.common import PaymentCheck, queue_key, wait_until

Builder = Callable[[], EventServiceBuilder]


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
            claimed_late=0.0,
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
