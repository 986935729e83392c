"""Replacing and cancelling events on their way to a handler, end to end on a real server: a
pending event kept unless told to replace it, a replaced event's stale copy in the ready list
never handed out, a success deleting only the version it handled, and cancels while pending,
waiting in the ready list, and while a failing handler runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import anyio
import orjson
import pytest

from aioqueue import EventService, EventServiceBuilder
from aioqueue._transport.client import RedisClient
from tests.support.common import (
    EVERY_TOPOLOGY,
    PaymentCheck,
    Recorder,
    server_time_ms,
    wait_until,
)
from tests.support.payment_checks import (
    EVENTS,
    QUIET,
    SCHEDULE,
    Gate,
    drained,
    due_ms,
    ready_list_holds,
    stored_envelope,
)

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


async def test_enqueue_keeps_a_pending_event_unless_replace_is_given(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A duplicate enqueue must not touch the pending event; replace= swaps payload and due time."""
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), timedelta(hours=1))
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=2), 0) is False
        kept = await stored_envelope(redis_client, "p-1")
        assert orjson.loads(kept["p"]) == {"order_id": 1}
        assert await due_ms(redis_client, "p-1") > await server_time_ms(redis_client) + 3_500_000

        before = await server_time_ms(redis_client)
        replaced = await service.enqueue(
            PaymentCheck(id="p-1", order_id=3), timedelta(milliseconds=200), replace=True
        )
        after = await server_time_ms(redis_client)
        new_due = await due_ms(redis_client, "p-1")
        [delivery] = await handler.wait_for(1)
        await wait_until(drained(redis_client))
        await anyio.sleep(QUIET)
    assert replaced is True
    assert before + 200 <= new_due <= after + 200
    assert delivery.event == PaymentCheck(id="p-1", order_id=3)
    assert handler.ids == ["p-1"]


async def waiting_behind_a_blocker(service: EventService, gate: Gate, client: RedisClient) -> None:
    """With `gate` the only slot's handler, holding "blocker": "p-1" (order 1) dispatched,
    waiting in the ready list, unclaimed."""
    service.add_handler(PaymentCheck, gate, parallelism=1)
    await service.enqueue(PaymentCheck(id="blocker", order_id=0), 0)
    await gate.recorder.wait_for(1)
    await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
    await wait_until(ready_list_holds(client, ["p-1"]))


async def stale_copy_ahead(service: EventService, gate: Gate, client: RedisClient) -> None:
    """With `gate` the only slot's handler, holding "blocker": "p-1" dispatched, then replaced,
    so that the ready list holds its stale copy ahead of its current one."""
    await waiting_behind_a_blocker(service, gate, client)
    assert await service.enqueue(PaymentCheck(id="p-1", order_id=2), 0, replace=True)
    # Both versions are now due and waiting; only the new one may be handed out.
    await wait_until(ready_list_holds(client, ["p-1", "p-1"]))


async def test_replacing_an_event_already_in_the_ready_list_delivers_only_the_new_version(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """The stale copy of a replaced event left in the ready list must never reach a handler."""
    gate = Gate()
    async with service_builder().build() as service:
        await stale_copy_ahead(service, gate, redis_client)
        gate.open()
        await gate.recorder.wait_for(2)
        await wait_until(drained(redis_client))
        await anyio.sleep(QUIET)
    assert [d.event for d in gate.recorder.deliveries] == [
        PaymentCheck(id="blocker", order_id=0),
        PaymentCheck(id="p-1", order_id=2),
    ]


async def test_a_claim_that_finds_only_a_stale_copy_claims_again_at_once(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A claim that took only a stale copy (dropped) while the ready list still holds the
    current one claims again rather than waiting for a wake-up: with a 5 s scheduling
    interval, nothing else would wake the consumer (the pushes' messages came while it was
    busy, before its last claim), so the new version would wait for the next sweep."""
    gate = Gate()
    async with service_builder().scheduling_interval(5).build() as service:
        await stale_copy_ahead(service, gate, redis_client)
        started = time.monotonic()
        gate.open()  # the blocker's success rides a claim of one: the stale copy, first
        await gate.recorder.wait_for(2, within=6)
        elapsed = time.monotonic() - started
    assert [d.event for d in gate.recorder.deliveries][1] == PaymentCheck(id="p-1", order_id=2)
    assert elapsed < 1.0


@EVERY_TOPOLOGY
async def test_success_deletes_only_the_version_that_was_delivered(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """Acknowledging the old version must not delete a replacement enqueued while it ran."""
    gate = Gate()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, gate, parallelism=1)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await gate.recorder.wait_for(1)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=2), 0, replace=True)
        gate.open()
        await gate.recorder.wait_for(2)
        await wait_until(drained(redis_client))
        await anyio.sleep(QUIET)
    assert [d.event for d in gate.recorder.deliveries] == [
        PaymentCheck(id="p-1", order_id=1),
        PaymentCheck(id="p-1", order_id=2),
    ]


async def test_cancel_removes_a_pending_event(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A cancelled event must leave Redis and never be delivered; unknown ids give False."""
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0.2)
        assert await service.cancel(PaymentCheck, "p-1") is True
        assert await redis_client.hexists(EVENTS, "p-1") is False
        assert await redis_client.zscore(SCHEDULE, "p-1") is None
        assert await service.cancel(PaymentCheck, "p-1") is False
        assert await service.cancel(PaymentCheck, "unknown") is False
        # Due after the cancelled one would have been: once it arrives, p-1 had its chance.
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0.3)
        await handler.wait_for(1)
        await anyio.sleep(QUIET)
    assert handler.ids == ["p-2"]


async def test_cancel_drops_an_event_already_waiting_in_the_ready_list(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """An event dispatched but not yet claimed must not reach a handler once cancel returns."""
    gate = Gate()
    async with service_builder().build() as service:
        await waiting_behind_a_blocker(service, gate, redis_client)
        assert await service.cancel(PaymentCheck, "p-1") is True
        gate.open()
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)
        await gate.recorder.wait_for(2)
        await wait_until(ready_list_holds(redis_client, []))
        await anyio.sleep(QUIET)
    assert gate.recorder.ids == ["blocker", "p-2"]


@EVERY_TOPOLOGY
async def test_cancel_during_a_failing_handler_leaves_no_retry(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A failure recorded after cancel() must not bring the cancelled event back."""
    recorder = Recorder()
    release = anyio.Event()

    async def fail_when_released(event: PaymentCheck) -> bool:
        await recorder(event)
        if event.id == "p-1":
            await release.wait()
            return False
        return True

    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, fail_when_released, parallelism=1)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await recorder.wait_for(1)
        assert await service.cancel(PaymentCheck, "p-1") is True
        release.set()
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0.2)
        await recorder.wait_for(2)
        await wait_until(drained(redis_client))
        await anyio.sleep(QUIET)
    assert recorder.ids == ["p-1", "p-2"]
