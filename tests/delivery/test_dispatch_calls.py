"""How the dispatcher sizes its calls to the local consumer, keeps its ready list topped up
and calls only the queues whose time has come, through the public API on a real server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from aioqueue import EventServiceBuilder
from aioqueue._delivery import dispatcher
from tests.support.common import DispatchSizes, OrderTimeout, PaymentCheck, Recorder, wait_until
from tests.support.script_calls import ScriptCall

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


@pytest.mark.parametrize(
    ("parallelism", "batch_size", "largest_call"),
    [
        (2, 100, 16),  # three claims' worth is 6: the smallest call instead
        (10, 100, 30),  # three claims' worth
        (40, 100, 100),  # three claims' worth is 120: the batch size caps it
        (10, 8, 8),  # a batch size below three claims' worth caps it too
    ],
)
async def test_a_dispatch_call_moves_a_few_claims_worth_of_the_local_consumer(
    service_builder: Builder, parallelism: int, batch_size: int, largest_call: int
) -> None:
    """A call holds the server while the local consumer's next claim waits behind it, so a
    call moves about three of that consumer's claims (at least 16, at most the batch size),
    and more calls keep the ready list (two batches) topped up."""
    metrics = DispatchSizes()
    handler = Recorder()
    builder = service_builder().scheduling_batch_size(batch_size).metrics(metrics)
    async with builder.build() as service:
        events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(240)]
        assert all(await service.enqueue_many(events, 0))
        service.add_handler(PaymentCheck, handler, parallelism=parallelism)
        await handler.wait_for(240)
        # A call's events can be claimed and handled before the dispatcher has read the
        # call's reply (and counted them): leaving now could cancel it before it does.
        await wait_until(counted(metrics, 240))
    assert Counter(handler.ids) == Counter(event.id for event in events)
    assert max(metrics.sizes) == largest_call
    assert sum(metrics.sizes) == 240


async def test_claims_wake_a_dispatcher_that_a_full_ready_list_held_back(
    service_builder: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no pause that ends on its own (a full ready list's, the scheduling interval), a
    drain that needs many refills of the ready list ends only because the consumer's claims
    wake the dispatcher once the list has room for a call."""
    monkeypatch.setattr(dispatcher, "READY_FULL_PAUSE", 3600.0)
    metrics = DispatchSizes()
    handler = Recorder()
    builder = service_builder().scheduling_interval(3600).scheduling_batch_size(20).metrics(metrics)
    async with builder.build() as service:
        events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(500)]
        assert all(await service.enqueue_many(events, 0))
        service.add_handler(PaymentCheck, handler, parallelism=10)
        await handler.wait_for(500)
    assert Counter(handler.ids) == Counter(event.id for event in events)
    # The ready list holds two batches (40): most of the 500 came in refills of a call each.
    assert len(metrics.sizes) >= 500 // 20


async def test_a_pass_leaves_alone_a_queue_with_nothing_due(
    service_builder: Builder, script_calls: list[ScriptCall]
) -> None:
    """Events of one type due one after another bring a pass each; another handled type with
    nothing pending is not called in them (before, every pass called every queue), nor for
    this service's own enqueues of the first type (before, each called every queue).

    Judged pass by pass (the calls of one pipeline), not by counting the idle queue's calls:
    a pass of the idle queue alone may still come after the count is taken, for the message
    its own enqueue published (on a cluster it travels the cluster bus, and under load came
    after the event was handled) or for the subscription coming up."""

    def passes() -> dict[int, set[str]]:
        """The types each pass (pipeline) of dispatch calls called, by pipeline."""
        types: dict[int, set[str]] = {}
        for call in script_calls:
            if call.script == "dispatch":
                event_type = call.keys[0].split("{")[1].split("}")[0]
                types.setdefault(call.pipeline, set()).add(event_type)
        return types

    idle = Recorder()
    handler = Recorder()
    async with service_builder().scheduling_interval(3600).build() as service:
        service.add_handler(OrderTimeout, idle)
        service.add_handler(PaymentCheck, handler)
        # Once an event of the idle type is handled, the passes that adding the handlers
        # and recording the types bring are behind.
        await service.enqueue(OrderTimeout(id="o-1"), 0)
        await idle.wait_for(1)
        before = set(passes())
        for n in range(6):
            await service.enqueue(PaymentCheck(id=f"p-{n}", order_id=n), 0.1 + 0.06 * n)
        await handler.wait_for(6)
    since = [types for pipeline, types in passes().items() if pipeline not in before]
    assert handler.ids == [f"p-{n}" for n in range(6)]
    assert sum(1 for types in since if "PaymentCheck" in types) >= 3  # the passes were there
    assert [types for types in since if "PaymentCheck" in types and "OrderTimeout" in types] == []


def counted(metrics: DispatchSizes, events: int) -> Callable[[], Awaitable[bool]]:
    """A wait_until condition: the dispatcher has counted `events` dispatched events."""

    async def check() -> bool:
        return sum(metrics.sizes) >= events

    return check
