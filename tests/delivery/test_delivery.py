"""Delivery semantics end to end on a real server: clocks, services sharing a queue, a failing
dispatch, restarts, timeouts, free slots, event classes. Replacing and cancelling are in
test_replace_and_cancel.py."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, timezone

import anyio
import pytest
import redis.asyncio as redis
from pydantic import BaseModel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from aioqueue import Event, EventServiceBuilder, ServiceState
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
from tests.support.payment_checks import (
    EVENTS,
    QUIET,
    READY,
    Gate,
    drained,
    due_ms,
    ready_ids,
)

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


def idle_and_subscribed(client: redis.Redis) -> Callable[[], Awaitable[bool]]:
    """True once nothing is pending and a service listens for wake-ups."""

    async def check() -> bool:
        return await subscribed(client) > 0 and await client.hlen(EVENTS) == 0

    return check


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
