"""Delivery semantics end to end on a real server: duplicates, clocks, concurrency, cancel."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import orjson
import pytest
import redis.asyncio as redis
from pydantic import BaseModel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from aioqueue import Event, EventService, EventServiceBuilder, ServiceState
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import text
from tests.conftest import ServerFactory
from tests.support.common import (
    EVERY_TOPOLOGY,
    PaymentCheck,
    Recorder,
    all_keys,
    queue_key,
    server_time_ms,
    subscribed,
    wait_until,
)

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]

SCHEDULE = queue_key("PaymentCheck", "schedule")
EVENTS = queue_key("PaymentCheck", "events")
READY = queue_key("PaymentCheck", "ready")

# Long enough for a wrongly scheduled retry to show: the test services dispatch every 50 ms
# and retry after 50 ms. Used only to prove that something does NOT happen.
QUIET = 0.25


@dataclass
class Gate:
    """A handler that holds every event until `open()`, counting how many it holds at once."""

    recorder: Recorder = field(default_factory=Recorder)
    opened: anyio.Event = field(default_factory=anyio.Event)
    running: int = 0
    most_running: int = 0

    async def __call__(self, event: PaymentCheck) -> bool:
        await self.recorder(event)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.opened.wait()
        finally:
            self.running -= 1
        return True

    def open(self) -> None:
        self.opened.set()


async def due_ms(client: RedisClient, event_id: str) -> float:
    """The schedule score of a pending PaymentCheck: when its next attempt is due."""
    score = await client.zscore(SCHEDULE, event_id)
    assert score is not None, f"{event_id} is not scheduled"
    return score


async def stored_envelope(client: RedisClient, event_id: str) -> dict[str, Any]:
    raw = await client.hget(EVENTS, event_id)
    assert raw is not None, f"{event_id} is not pending"
    envelope: dict[str, Any] = orjson.loads(raw)
    return envelope


async def ready_ids(client: RedisClient) -> list[str]:
    """Ids of the PaymentCheck envelopes waiting in the ready list, head first."""
    return [orjson.loads(raw)["id"] for raw in await client.lrange(READY, 0, -1)]


def drained(client: RedisClient) -> Callable[[], Awaitable[bool]]:
    """True once PaymentCheck has nothing pending: every delivery was settled."""

    async def check() -> bool:
        return await client.hlen(EVENTS) == 0 and await client.zcard(SCHEDULE) == 0

    return check


def idle_and_subscribed(client: redis.Redis) -> Callable[[], Awaitable[bool]]:
    """True once nothing is pending and a service listens for wake-ups."""

    async def check() -> bool:
        return await subscribed(client) > 0 and await client.hlen(EVENTS) == 0

    return check


def ready_list_holds(client: RedisClient, ids: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return sorted(await ready_ids(client)) == sorted(ids)

    return check


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


async def stale_copy_ahead(service: EventService, gate: Gate, client: RedisClient) -> None:
    """With `gate` the only slot's handler, holding "blocker": "p-1" dispatched, then replaced,
    so that the ready list holds its stale copy ahead of its current one."""
    service.add_handler(PaymentCheck, gate, parallelism=1)
    await service.enqueue(PaymentCheck(id="blocker", order_id=0), 0)
    await gate.recorder.wait_for(1)
    await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
    await wait_until(ready_list_holds(client, ["p-1"]))
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


@pytest.mark.parametrize("skew", [3600.0, -3600.0], ids=["clock-ahead", "clock-behind"])
async def test_due_times_follow_the_server_clock_not_the_local_one(
    service_builder: Builder,
    redis_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
    skew: float,
) -> None:
    """A local wall clock an hour off must not move a 0.3 s delay: it counts on Redis's TIME."""
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + round(skew * 1e9))
    handler = Recorder()
    delivered_at: list[float] = []

    async def handle(event: PaymentCheck) -> bool:
        delivered_at.append(time.monotonic())
        return await handler(event)

    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handle)
        before = await server_time_ms(redis_client)
        started = time.monotonic()
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0.3)
        after = await server_time_ms(redis_client)
        due = await due_ms(redis_client, "p-1")
        await handler.wait_for(1, within=5.0)
    assert before + 300 <= due <= after + 300
    # The server stamps due times in whole ms (rounded down), hence 0.299 rather than 0.3.
    assert 0.299 <= delivered_at[0] - started < 1.5


@EVERY_TOPOLOGY
async def test_services_sharing_a_queue_deliver_each_event_exactly_once(
    service_builder: Builder, redis_url: str, redis_client: RedisClient
) -> None:
    """Three services dispatching and consuming one queue at once must never double-deliver."""
    recorder = Recorder()
    handled_by: dict[str, int] = Counter()
    services = [service_builder().url(redis_url).build() for _ in range(3)]
    for number, service in enumerate(services):

        async def handle(event: PaymentCheck, name: str = f"service-{number}") -> bool:
            handled_by[name] += 1
            await anyio.sleep(0.005)  # a little work, so that all three services get a share
            return await recorder(event)

        service.add_handler(PaymentCheck, handle, parallelism=4)
    ids = [f"p-{n}" for n in range(300)]
    # Scheduled before the three start, so all 300 are due the moment they do.
    async with service_builder().enable_scheduling(False).build() as producer:
        for event_id in ids:
            await producer.enqueue(PaymentCheck(id=event_id, order_id=0), 0)
    async with AsyncExitStack() as stack:
        for service in services:
            await stack.enter_async_context(service)
        await recorder.wait_for(300, within=20.0)
        await wait_until(drained(redis_client))
        await anyio.sleep(QUIET)
    assert Counter(recorder.ids) == Counter(ids)
    assert len([name for name, count in handled_by.items() if count]) >= 2


async def test_a_failing_dispatch_is_logged_and_retried(
    service_builder: Builder, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A type whose dispatch the server refuses must not end the dispatcher: it logs, sets
    the type aside, tries it again and recovers."""
    caplog.set_level(logging.INFO, logger="aioqueue")
    # A string where the ready list should be: dispatch.lua fails with WRONGTYPE on every pass.
    await redis_client.set(READY, "not a list")
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await wait_until(lambda: _logged(caplog, logging.ERROR, "cannot dispatch PaymentCheck"))
        assert handler.deliveries == []
        await redis_client.delete(READY)
        [delivery] = await handler.wait_for(1)
        # The dispatcher logs its recovery once its pass returns, which can be just after
        # the consumer already handed the event over.
        await wait_until(
            lambda: _logged(caplog, logging.INFO, "dispatching PaymentCheck recovered")
        )
        assert service.state is ServiceState.RUNNING
    assert delivery.event == PaymentCheck(id="p-1", order_id=1)


@pytest.mark.backends("standalone")  # it restarts a server of its own
async def test_delivery_resumes_after_the_server_restarts(
    service_builder: Builder, server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Losing the server must not end the dispatcher or consumers: they log and come back."""
    caplog.set_level(logging.WARNING, logger="aioqueue")
    server = server_factory()
    # No retries inside redis-py: its default (10 tries, about 4 s) would hide a short outage
    # from the service, and this test is about the service's own retry loop.
    client = redis.Redis.from_url(server.url, retry=Retry(NoBackoff(), 0))
    handler = Recorder()
    try:
        async with service_builder().client(client).build() as service:
            service.add_handler(PaymentCheck, handler)
            await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
            await handler.wait_for(1)
            async with redis.Redis.from_url(server.url) as observer:
                # Settled and listening for wake-ups: the kill must break that wait too.
                await wait_until(idle_and_subscribed(observer))
            server.kill()
            await wait_until(
                lambda: _logged(caplog, logging.WARNING, "listening for wake-ups failed")
            )
            await anyio.to_thread.run_sync(server.start)
            # A pooled connection that died with the server may fail this first call (no
            # retries in this client): enqueueing again is safe, as a producer would.
            with anyio.fail_after(10):
                while True:
                    try:
                        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)
                        break
                    except redis.ConnectionError:
                        await anyio.sleep(0.05)
            await handler.wait_for(2)
            assert service.state is ServiceState.RUNNING
    finally:
        await client.aclose()
    assert handler.ids == ["p-1", "p-2"]


async def _logged(caplog: pytest.LogCaptureFixture, level: int, message: str) -> bool:
    return any(r.levelno == level and message in r.getMessage() for r in caplog.records)


async def test_a_retry_never_overlaps_a_handler_cut_at_its_timeout(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """The next attempt must not start while the previous one may still run (handler timeout)."""
    recorder = Recorder()
    starts: list[float] = []
    ends: list[float] = []
    running = most_running = 0
    first_running = anyio.Event()

    async def handle(event: PaymentCheck) -> bool:
        nonlocal running, most_running
        starts.append(time.monotonic())
        running += 1
        most_running = max(most_running, running)
        try:
            await recorder(event)
            if len(starts) == 1:
                first_running.set()
                await anyio.sleep_forever()
            return True
        finally:
            running -= 1
            ends.append(time.monotonic())

    async with service_builder().handler_timeout(0.5).build() as service:
        # Two slots, so only the reservation in Redis keeps a second copy from starting early.
        service.add_handler(PaymentCheck, handle, parallelism=2)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await first_running.wait()
        reserved_for_ms = await due_ms(redis_client, "p-1") - await server_time_ms(redis_client)
        await recorder.wait_for(2)
    assert reserved_for_ms >= 500
    assert most_running == 1
    assert ends[0] - starts[0] >= 0.49  # cut at its timeout, give or take timer slack
    assert starts[1] >= ends[0]


async def test_a_consumer_takes_no_more_events_than_it_has_free_slots(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """With 2 busy slots, the other 18 due events must stay in Redis, not in this process."""
    gate = Gate()
    ids = [f"p-{n}" for n in range(20)]
    async with service_builder().handler_timeout(10.0).build() as service:
        service.add_handler(PaymentCheck, gate, parallelism=2)
        for event_id in ids:
            await service.enqueue(PaymentCheck(id=event_id, order_id=0), 0)
        await gate.recorder.wait_for(2)

        async def all_dispatched() -> bool:
            return await redis_client.llen(READY) == 18

        await wait_until(all_dispatched)
        await anyio.sleep(QUIET)
        taken = list(gate.recorder.ids)
        waiting = await ready_ids(redis_client)
        pending = await redis_client.hlen(EVENTS)
        gate.open()
        await gate.recorder.wait_for(20)
        await wait_until(drained(redis_client))
    assert len(taken) == 2
    assert sorted(waiting + taken) == sorted(ids)
    assert pending == 20
    assert gate.most_running == 2
    assert Counter(gate.recorder.ids) == Counter(ids)


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
        service.add_handler(PaymentCheck, gate, parallelism=1)
        await service.enqueue(PaymentCheck(id="blocker", order_id=0), 0)
        await gate.recorder.wait_for(1)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await wait_until(ready_list_holds(redis_client, ["p-1"]))
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


class Invoice(BaseModel, Event):
    id: str
    amount_cents: int
    issued_at: datetime


@dataclass
class Reminder(Event):
    __event_type__ = "custom-name"
    id: str
    text: str


async def test_pydantic_models_and_custom_wire_names_are_delivered(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A pydantic event must round-trip; `__event_type__` must name the keys, not the class."""
    invoices, reminders = Recorder(), Recorder()
    invoice = Invoice(
        id="i-1", amount_cents=1250, issued_at=datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    )
    async with service_builder().build() as service:
        service.add_handler(Invoice, invoices)
        service.add_handler(Reminder, reminders)
        await service.enqueue(invoice, 0.2)
        await service.enqueue(Reminder(id="r-1", text="pay"), 0.2)
        # The `recorded` mark follows the service's recording of each type, the worker
        # registry's keys its first heartbeat, and each consumer's claim receipt (named at
        # random) its first claim, any of which may still be under way; the rest is stable.
        keys = sorted(
            text(key)
            for key in await all_keys(redis_client)
            if not text(key).endswith(":recorded")
            and "{workers}" not in text(key)
            and ":claim_receipt:" not in text(key)
        )
        [invoice_delivery] = await invoices.wait_for(1)
        [reminder_delivery] = await reminders.wait_for(1)
    assert keys == sorted(
        [
            "aioqueue:schemas",
            "aioqueue:types",
            queue_key("Invoice", "events"),
            queue_key("Invoice", "schedule"),
            queue_key("Invoice", "sequence"),
            queue_key("custom-name", "events"),
            queue_key("custom-name", "schedule"),
            queue_key("custom-name", "sequence"),
        ]
    )
    assert invoice_delivery.event == invoice
    assert reminder_delivery.event == Reminder(id="r-1", text="pay")
