"""reschedule() and enqueue(replace=True, max_wait=...), on a real server: a pending event
moves in time with its payload and attempt count, never while an attempt runs; a debounce
storm is delivered within max_wait of the first enqueue of each series, latest version first."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import anyio
import orjson
import pytest

from aioqueue import EventServiceBuilder, InvalidEnqueueError
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import enqueue_items
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.store import QueueStore
from tests.support.common import PaymentCheck, Recorder, server_time_ms, wait_until

Builder = Callable[[], EventServiceBuilder]
KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")


@pytest.mark.backends("standalone", "cluster")
async def test_reschedule_moves_a_pending_event_later_and_earlier(service_builder: Builder) -> None:
    handler = Recorder()
    async with service_builder().build() as service:
        await service.enqueue(PaymentCheck(id="p-1", order_id=7), 0.5, context={"k": "v"})
        assert await service.reschedule(PaymentCheck, "p-1", timedelta(hours=2))
        info = await service.inspect(PaymentCheck, "p-1")
        assert info is not None
        assert info.due_at is not None
        later = info.due_at - datetime.now(timezone.utc)
        assert timedelta(hours=1, minutes=59) < later <= timedelta(hours=2)
        assert (info.state, info.attempt, info.payload) == ("waiting", 0, '{"order_id":7}')

        service.add_handler(PaymentCheck, handler)
        soon = datetime.now(timezone.utc) + timedelta(milliseconds=200)
        assert await service.reschedule(PaymentCheck, "p-1", at=soon)
        [delivery] = await handler.wait_for(1)
    assert delivery.event == PaymentCheck(id="p-1", order_id=7)
    assert delivery.context == {"k": "v"}
    assert time.time() >= soon.timestamp()


@pytest.mark.backends("standalone")
async def test_reschedule_refuses_unknown_dead_and_running_events(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    store = QueueStore(redis_client, KEYS, "PaymentCheck")
    async with service_builder().enable_scheduling(False).build() as service:
        assert not await service.reschedule(PaymentCheck, "nobody", 10)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await store.dispatch(batch_size=10, lease_ms=60_000, max_attempts=3, ready_capacity=10)
        # Dispatched: its attempt has started (the lease runs), so it stays where it is.
        assert not await service.reschedule(PaymentCheck, "p-1", 3600)
        [delivery] = (await store.claim(1, lease_ms=60_000)).envelopes
        assert not await service.reschedule(PaymentCheck, "p-1", 3600)
        envelope = Envelope.parse(delivery, event_type="PaymentCheck")
        await store.fail(envelope, "boom", retry_delay_ms=3_600_000, max_attempts=3)
        # Waiting for its retry: no attempt runs, so it can move, keeping its attempt count.
        assert await service.reschedule(PaymentCheck, "p-1", 7200)
        info = await service.inspect(PaymentCheck, "p-1")
        assert info is not None
        assert (info.state, info.attempt, info.last_error) == ("retry_wait", 1, "boom")
        await store.fail(envelope, "gave up", retry_delay_ms=0, max_attempts=3, bury=True)
        assert not await service.reschedule(PaymentCheck, "p-1", 0)  # dead: that is requeue


@pytest.mark.backends("standalone")
async def test_a_debounce_storm_is_delivered_within_max_wait_of_each_series(
    service_builder: Builder,
) -> None:
    """100 replacements 50 ms apart, each pushing the event 0.5 s ahead: without max_wait it
    would come only after the storm; with max_wait 1 s each series is delivered at most 1 s
    after its first enqueue, with the latest payload, and the last version arrives."""
    handler = Recorder()
    arrivals: list[float] = []

    async def timed(event: PaymentCheck) -> bool:
        arrivals.append(time.time())
        return await handler(event)

    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, timed)
        enqueued: list[float] = []
        for n in range(100):
            enqueued.append(time.time())
            await service.enqueue(
                PaymentCheck(id="debounced", order_id=n), 0.5, replace=True, max_wait=1
            )
            await anyio.sleep(0.05)  # the storm's own pace, not a wait for an outcome
        await handler.wait_for(1)
        while handler.deliveries[-1].event != PaymentCheck(id="debounced", order_id=99):
            await handler.wait_for(len(handler.deliveries) + 1)
    orders = [d.event.order_id for d in handler.deliveries]  # type: ignore[attr-defined]
    assert orders == sorted(set(orders))  # each version at most once, in order
    # A series begins at the first enqueue after the previous delivery started.
    series_start = enqueued[0]
    for arrival, order in zip(arrivals, orders, strict=True):
        assert arrival - series_start <= 1.0 + 0.25, (order, arrival - series_start)
        # The version delivered is the latest enqueued before its due time.
        assert enqueued[order] <= arrival
        series_start = next((t for t in enqueued if t > arrival), arrival)
    assert len(orders) <= 8  # about one per second of storm, not one per replacement


@pytest.mark.backends("standalone", "cluster")
async def test_a_replacement_keeps_its_series_until_a_handler_takes_the_version(
    redis_client: RedisClient,
) -> None:
    """A debounced version that came due and waits in the ready list has reached no handler:
    replacing it keeps the series' start, so the latest version is due by the bound however
    slow the consumers are (else replacements landing between dispatch and claim would start
    a series each time, and none would be delivered). Once a handler took the version, a
    replacement starts a new series."""
    store = QueueStore(redis_client, KEYS, "PaymentCheck")
    hour, max_wait = 3_600_000, 60_000

    async def replace(order_id: int, delay_ms: int) -> int:
        """Replaces event `d` with max_wait; returns the series start it was given."""
        item = EnqueueItem("d", f'{{"order_id":{order_id}}}', "{}", delay_ms, absolute=False)
        scheduled = await enqueue_items(
            redis_client,
            KEYS,
            "PaymentCheck",
            [item],
            mode=WriteMode(replace=True, max_wait_ms=max_wait),
        )
        assert scheduled == [True]
        since = int(orjson.loads(await redis_client.hget(KEYS.events, "d") or b"{}")["since"])

        async def clock_moved_on() -> bool:
            return await server_time_ms(redis_client) > since

        # Later calls happen on a later millisecond, so that a new series would show.
        await wait_until(clock_moved_on)
        return since

    async def dispatch() -> None:
        await store.dispatch(batch_size=10, lease_ms=hour, max_attempts=3, ready_capacity=10)

    start = await replace(1, 0)
    await dispatch()  # version 1's delivery waits in the ready list
    assert await replace(2, hour) == start
    # Due by the series' bound, not in an hour; the waiting copy is stale and is dropped.
    assert await redis_client.zscore(KEYS.schedule, "d") == start + max_wait
    assert (await store.claim(1, lease_ms=hour)).envelopes == []

    assert await replace(3, 0) == start
    await dispatch()
    [taken] = (await store.claim(1, lease_ms=hour)).envelopes  # a handler has version 3
    assert Envelope.parse(taken, event_type="PaymentCheck").payload == '{"order_id":3}'
    assert await replace(4, hour) > start


@pytest.mark.backends("standalone")
async def test_max_wait_needs_replace_and_a_sane_bound(service_builder: Builder) -> None:
    async with service_builder().build() as service:
        with pytest.raises(InvalidEnqueueError, match="needs replace=True"):
            await service.enqueue(PaymentCheck(id="p", order_id=1), 1, max_wait=5)
        with pytest.raises(InvalidEnqueueError, match="max_wait must be between"):
            await service.enqueue(PaymentCheck(id="p", order_id=1), 1, replace=True, max_wait=-1)
