"""The service's lifecycle: shutdown phases, reuse, handlers while running (who closes the
client: test_client_ownership.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import orjson
import pytest

from aioqueue import (
    Event,
    EventServiceBuilder,
    HandlerRegistrationError,
    ServiceState,
    ServiceStateError,
)
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueKeys
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, server_time_ms, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")


async def pending_envelope(client: RedisClient, event_id: str) -> Envelope | None:
    """The stored envelope of a pending PaymentCheck, None when it is gone."""
    raw = await client.hget(KEYS.events, event_id)
    return (
        None if raw is None else Envelope.parse(raw, event_type="PaymentCheck", event_id=event_id)
    )


async def ready_length_is(client: RedisClient, length: int) -> bool:
    return int(await client.llen(KEYS.ready)) == length


async def is_gone(client: RedisClient, event_id: str) -> bool:
    return not await client.hexists(KEYS.events, event_id)


async def all_gone(client: RedisClient) -> bool:
    return not await client.hlen(KEYS.events)


# -- shutdown ----------------------------------------------------------------------------------


async def test_exit_lets_a_running_handler_finish_and_acknowledges_it(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """Leaving `async with` waits for a running handler, and its True is acknowledged."""
    started = anyio.Event()
    finished: list[str] = []

    async def slow(event: PaymentCheck) -> bool:
        started.set()
        await anyio.sleep(0.3)  # the handler's work
        finished.append(event.id)
        return True

    async with service_builder().shutdown_grace(2.0).build() as service:
        service.add_handler(PaymentCheck, slow)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        with anyio.fail_after(5):
            await started.wait()
        exit_started = time.monotonic()
    exit_took = time.monotonic() - exit_started

    assert finished == ["p-1"]
    # It waited for the handler, not for the whole grace period.
    assert exit_took < 1.5
    assert service.state is ServiceState.CLOSED
    assert await pending_envelope(redis_client, "p-1") is None
    assert await redis_client.zscore(KEYS.schedule, "p-1") is None


async def test_handler_outliving_the_grace_is_cancelled_and_its_event_kept(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """A handler still running after `shutdown_grace` is cancelled on time, and its event is
    given back at once, due now, its attempt spent and the cut recorded as its error."""
    started = anyio.Event()
    cancelled: list[str] = []

    async def stuck(event: PaymentCheck) -> bool:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(event.id)
            raise
        return True

    # The handler timeout (1 s) is longer than the grace, so only shutdown can cut it.
    async with service_builder().shutdown_grace(0.3).handler_timeout(1.0).build() as service:
        service.add_handler(PaymentCheck, stuck)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        with anyio.fail_after(5):
            await started.wait()
        exit_started = time.monotonic()
    exit_took = time.monotonic() - exit_started

    assert cancelled == ["p-1"]
    assert 0.3 <= exit_took < 0.3 + 0.5
    envelope = await pending_envelope(redis_client, "p-1")
    assert envelope is not None
    assert envelope.attempt == 1
    assert envelope.due_at == 0  # no attempt under way
    raw = await redis_client.hget(KEYS.events, "p-1")
    assert raw is not None
    stored = orjson.loads(raw)
    assert stored["error"].startswith("attempt 1 was cut off: its service stopped")
    next_attempt_ms = await redis_client.zscore(KEYS.schedule, "p-1")
    assert next_attempt_ms is not None
    assert next_attempt_ms <= await server_time_ms(redis_client)

    handler = Recorder()
    async with service_builder().build() as later:
        later.add_handler(PaymentCheck, handler)
        [delivery] = await handler.wait_for(1)
    assert delivery.event == PaymentCheck(id="p-1", order_id=1)
    assert await pending_envelope(redis_client, "p-1") is None


async def test_no_event_is_taken_once_shutdown_started(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """While the exit waits for a running handler, neither the dispatcher nor the consumer
    takes anything: an event already in the ready list stays there even when the handler
    slot frees up, and one that falls due meanwhile is not dispatched."""
    started = anyio.Event()
    handled: list[str] = []

    async def handle(event: PaymentCheck) -> bool:
        handled.append(event.id)
        if event.id == "p-slow":
            started.set()
            await anyio.sleep(0.5)  # the handler's work; the exit waits for it
        return True

    async with service_builder().shutdown_grace(3.0).build() as service:
        # One slot: while p-slow runs, p-next can only wait in the ready list.
        service.add_handler(PaymentCheck, handle, parallelism=1)
        await service.enqueue(PaymentCheck(id="p-slow", order_id=1), 0)
        with anyio.fail_after(5):
            await started.wait()
        await service.enqueue(PaymentCheck(id="p-next", order_id=2), 0)
        await wait_until(lambda: ready_length_is(redis_client, 1))
        # Due 0.1 s from now: during the exit, which lasts as long as p-slow's 0.5 s.
        await service.enqueue(PaymentCheck(id="p-late", order_id=3), 0.1)

    assert handled == ["p-slow"]
    # p-next: dispatched before the exit and never claimed, though the slot was free.
    assert await redis_client.llen(KEYS.ready) == 1
    next_envelope = await pending_envelope(redis_client, "p-next")
    assert next_envelope is not None
    assert next_envelope.attempt == 1
    # p-late: due before the exit ended, never dispatched (no attempt counted).
    late_envelope = await pending_envelope(redis_client, "p-late")
    assert late_envelope is not None
    assert late_envelope.attempt == 0
    late_due_ms = await redis_client.zscore(KEYS.schedule, "p-late")
    assert late_due_ms is not None
    assert late_due_ms <= await server_time_ms(redis_client)


# -- reuse -------------------------------------------------------------------------------------


async def test_closed_service_cannot_be_entered_or_used_again(
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    """A closed service refuses `async with`, enqueue and add_handler with ServiceStateError."""
    service = service_builder().build()
    async with service:
        pass
    assert service.state is ServiceState.CLOSED

    with pytest.raises(ServiceStateError, match="closed"):
        async with service:
            pass
    with pytest.raises(ServiceStateError, match="closed"):
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
    with pytest.raises(ServiceStateError, match="closed"):
        service.add_handler(PaymentCheck, Recorder())
    assert service.state is ServiceState.CLOSED


# -- handlers while running --------------------------------------------------------------------


class NeverRegistered(Event):
    id: str


async def test_handler_added_while_running_gets_events(
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    """A handler added after entering receives events; a second handler for the same class
    and the removal of an unknown class are refused."""
    payments = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, payments)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        [delivery] = await payments.wait_for(1)
        assert delivery.event == PaymentCheck(id="p-1", order_id=1)

        with pytest.raises(HandlerRegistrationError, match="already registered"):
            service.add_handler(PaymentCheck, Recorder())
        assert service.remove_handler(NeverRegistered) is False
        assert service.remove_handler(PaymentCheck) is True
        assert service.remove_handler(PaymentCheck) is False


async def test_removed_handler_gets_no_more_events(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """After remove_handler the running handler finishes and is acknowledged, but nothing
    more reaches it: an event already in the ready list stays there though the slot is free,
    a new one is not dispatched, and a handler added again gets both."""
    started = anyio.Event()
    release = anyio.Event()
    handled: list[str] = []

    async def gated(event: PaymentCheck) -> bool:
        handled.append(event.id)
        if event.id == "p-1":
            started.set()
            await release.wait()
        return True

    timeouts = Recorder()
    again = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, gated, parallelism=1)
        service.add_handler(OrderTimeout, timeouts)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        with anyio.fail_after(5):
            await started.wait()
        # p-1 holds the only slot, so p-2 is dispatched and waits in the ready list.
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)
        await wait_until(lambda: ready_length_is(redis_client, 1))

        assert service.remove_handler(PaymentCheck) is True
        release.set()
        await wait_until(lambda: is_gone(redis_client, "p-1"))
        await service.enqueue(PaymentCheck(id="p-3", order_id=3), 0)
        # Due after p-3, of a type still handled: when it arrives the dispatcher has passed
        # p-3's due time, and p-1's freed slot had 0.1 s to take p-2.
        await service.enqueue(OrderTimeout(id="o-1"), 0.1)
        await timeouts.wait_for(1)
        assert handled == ["p-1"]
        assert await redis_client.llen(KEYS.ready) == 1
        p3 = await pending_envelope(redis_client, "p-3")
        assert p3 is not None
        assert p3.attempt == 0

        service.add_handler(PaymentCheck, again)
        await again.wait_for(2)
    assert sorted(again.ids) == ["p-2", "p-3"]
    assert handled == ["p-1"]


# -- producer-only and consumer-only services --------------------------------------------------


async def test_producer_only_service_enqueues_for_another_service(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """A service with scheduling disabled and no handler enqueues; another one delivers."""
    handler = Recorder()
    async with service_builder().enable_scheduling(False).build() as producer:
        assert producer.config.enable_scheduling is False
        assert await producer.enqueue(PaymentCheck(id="p-1", order_id=1), 0.05)
        async with service_builder().build() as consumer:
            consumer.add_handler(PaymentCheck, handler)
            [delivery] = await handler.wait_for(1)
    assert delivery.event == PaymentCheck(id="p-1", order_id=1)
    assert await pending_envelope(redis_client, "p-1") is None


async def test_consumer_only_service_needs_a_dispatching_service(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """A service with scheduling disabled delivers nothing by itself; once another service
    dispatches, its consumer handles the events."""
    consumed = Recorder()
    release = anyio.Event()

    async def hold(event: PaymentCheck) -> bool:
        await release.wait()
        return True

    ids = {f"p-{i}" for i in range(10)}
    async with service_builder().enable_scheduling(False).build() as consumer_only:
        consumer_only.add_handler(PaymentCheck, consumed, parallelism=10)
        for i in range(10):
            await consumer_only.enqueue(PaymentCheck(id=f"p-{i}", order_id=i), 0)
        # Absence can only be seen over a window: ten scheduling intervals of a dispatcher.
        await anyio.sleep(0.5)
        assert consumed.deliveries == []
        assert await redis_client.llen(KEYS.ready) == 0
        for event_id in ids:
            envelope = await pending_envelope(redis_client, event_id)
            assert envelope is not None
            assert envelope.attempt == 0

        # The dispatching service's own consumer takes at most one event (its only slot is
        # held), so the consumer-only service must handle the other nine.
        async with service_builder().build() as dispatching:
            dispatching.add_handler(PaymentCheck, hold, parallelism=1)
            await consumed.wait_for(9)
            release.set()
            await wait_until(lambda: all_gone(redis_client))
    assert len(set(consumed.ids)) >= 9
    assert set(consumed.ids) <= ids
