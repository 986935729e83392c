"""Crashes and restarts: a killed worker and a restarted server lose no event."""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import signal
from collections.abc import Callable

import anyio
import orjson
import pytest
import redis.asyncio as redis

from aioqueue import (
    EventService,
    EventServiceBuilder,
    FixedDelays,
    ServiceState,
    current_delivery,
)
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck, Recorder, wait_until
from tests.support.worker_processes import blocking_worker, read_line, server_time_ms, worker_log

ServerFactory = Callable[..., EmbeddedServer]

KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")


async def pending_envelope(client: redis.Redis, event_id: str) -> Envelope:
    raw = await client.hget(KEYS.events, event_id)
    assert raw is not None, f"{event_id} is not pending"
    return Envelope.parse(raw, event_type="PaymentCheck", event_id=event_id)


async def server_keeping_every_write(
    server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> EmbeddedServer:
    """A server whose AOF is synced on every write, so that a claim survives its stop; with
    aioqueue's DEBUG records captured, where each failed try of a settlement is logged (the
    warnings are one per cause for all loops)."""
    caplog.set_level(logging.DEBUG, logger="aioqueue")
    server = server_factory(appendonly=True)
    async with redis.Redis.from_url(server.url) as setup:
        await setup.config_set("appendfsync", "always")
    return server


@pytest.mark.backends("standalone", "cluster")
async def test_worker_killed_mid_handler_loses_nothing(
    redis_client: redis.Redis,
    redis_url: str,
    service_builder: Callable[[], EventServiceBuilder],
    tmp_path: pathlib.Path,
) -> None:
    """An event whose worker dies by SIGKILL inside the handler is redelivered after its lease,
    as attempt 2, to another service."""
    async with service_builder().enable_scheduling(False).build() as producer:
        assert await producer.enqueue(PaymentCheck(id="p-crash", order_id=7), 0)

    marker = tmp_path / "handler-started"
    async with blocking_worker(redis_url, marker) as worker:
        assert await read_line(worker, worker_log(marker)) == "started p-crash"
        assert await anyio.Path(marker).read_text() == "p-crash"
        # The worker holds attempt 1; its retry is pre-scheduled at the end of the lease.
        held = await pending_envelope(redis_client, "p-crash")
        assert held.attempt == 1
        lease_ends_ms = await redis_client.zscore(KEYS.schedule, "p-crash")
        assert lease_ends_ms is not None
        assert lease_ends_ms > await server_time_ms(redis_client)

        os.kill(worker.pid, signal.SIGKILL)
        assert await worker.wait() == -signal.SIGKILL

    redelivered: list[tuple[PaymentCheck, int, int]] = []
    done = anyio.Event()

    async def record(event: PaymentCheck) -> bool:
        envelope = await pending_envelope(redis_client, event.id)
        redelivered.append((event, envelope.attempt, await server_time_ms(redis_client)))
        done.set()
        return True

    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, record)
        with anyio.fail_after(10):
            await done.wait()

    [(event, attempt, started_ms)] = redelivered
    assert event == PaymentCheck(id="p-crash", order_id=7)
    assert attempt == 2
    assert started_ms >= lease_ends_ms
    # Acknowledged: nothing of the event is left.
    assert await redis_client.hlen(KEYS.events) == 0
    assert await redis_client.zcard(KEYS.schedule) == 0


async def test_server_restart_with_aof_mid_run_loses_nothing(
    server_factory: ServerFactory,
) -> None:
    """A Redis restart (AOF on) while 200 events flow: every event is still delivered and
    acknowledged by the same service, which reconnects by itself."""
    server = server_factory(appendonly=True)
    expected = {f"p-{i}" for i in range(200)}
    handler = Recorder()
    async with redis.Redis.from_url(server.url) as setup:
        # The restart is a clean SIGTERM, which flushes the AOF anyway; fsync on every write
        # makes every acknowledged write durable even if the stop fell back to SIGKILL, so a
        # lost event can only be the library's fault, never the server's fsync timing.
        await setup.config_set("appendfsync", "always")
    service = (
        EventService.builder()
        .url(server.url)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(1.0)
        .shutdown_grace(2.0)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    async with service:
        service.add_handler(PaymentCheck, handler, parallelism=8)
        for i in range(200):
            await service.enqueue(PaymentCheck(id=f"p-{i}", order_id=i), i / 100)
        await handler.wait_for(40)
        old_pid = server.pid
        # In a thread, so deliveries go on (and fail) while the server is down.
        await anyio.to_thread.run_sync(server.restart)
        assert server.pid != old_pid
        assert len(handler.deliveries) < 200, "the restart came too late to prove anything"

        # A client of the test's own, connected after the restart (a pooled connection from
        # before it would fail once on first use).
        async with redis.Redis.from_url(server.url) as observer:
            with anyio.fail_after(20):
                while set(handler.ids) != expected:
                    await handler.wait_for(len(handler.deliveries) + 1)

            async def all_acknowledged() -> bool:
                return not (await observer.hlen(KEYS.events) or await observer.zcard(KEYS.schedule))

            # One whose acknowledgement was lost to the restart is delivered again after its
            # lease, then acknowledged.
            await wait_until(all_acknowledged, within=10)
            assert service.state is ServiceState.RUNNING
            assert await observer.hlen(KEYS.dead_letters) == 0
            assert await observer.llen(KEYS.ready) == 0


async def test_a_success_acknowledged_while_the_server_is_down_lands_once_it_is_back(
    server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that finishes while Redis is down (a restart, a failover) for longer than a
    lease: its acknowledgement rides the consumer's claims, which give up after a lease of
    failures, and then goes on its own, tried again until the server is back (within the
    settle bound). So the event is deleted then, handled once, rather than delivered again
    and its attempt spent; before, the acknowledgement on its own gave up after two tries at
    once."""
    server = await server_keeping_every_write(server_factory, caplog)
    attempts: list[int] = []
    handling = anyio.Event()
    server_down = anyio.Event()

    async def handle(event: PaymentCheck) -> bool:
        attempts.append(current_delivery().attempt)
        handling.set()
        await server_down.wait()
        return True

    service = (
        EventService.builder()
        .url(server.url)
        .scheduling_interval(0.05)
        # Shorter than the outage: the claims carrying the acknowledgement give it up.
        .lease(1)
        .handler_timeout(60)
        .build()
    )
    async with service:
        service.add_handler(PaymentCheck, handle)
        assert await service.enqueue(PaymentCheck(id="p-down", order_id=1), 0)
        with anyio.fail_after(10):
            await handling.wait()
        # Paused, nothing is dispatched: the lapsed attempt stays the stored one after the
        # restart, for the acknowledgement alone to settle (acknowledging ignores a pause).
        await service.pause(PaymentCheck)
        await anyio.to_thread.run_sync(functools.partial(server.stop, keep_data=True))
        server_down.set()

        async def acknowledgement_failed() -> bool:
            # A try that failed, tried again ("acknowledging ... failed") or given up.
            return any(
                "acknowledging PaymentCheck events failed" in message
                or "could not acknowledge" in message
                for message in (record.getMessage() for record in caplog.records)
            )

        await wait_until(acknowledgement_failed, within=5)
        await anyio.to_thread.run_sync(server.start)
        async with redis.Redis.from_url(server.url) as observer:

            async def deleted() -> bool:
                return not await observer.hexists(KEYS.events, "p-down")

            await wait_until(deleted, within=4)
            assert await observer.zscore(KEYS.schedule, "p-down") is None
            assert await observer.hlen(KEYS.dead_letters) == 0
        assert attempts == [1]
        assert service.state is ServiceState.RUNNING


async def test_a_hand_back_while_the_server_is_down_lands_once_it_is_back(
    server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A service stopping while Redis is down (a restart, a failover) gives back what its
    handlers were cut off in, tried again until the server is back (within the hand-back's
    bound): the event is then due at once, its error saying why, rather than parked until
    its lease ends. Before, the hand-back was given up after one try."""
    server = await server_keeping_every_write(server_factory, caplog)
    attempts: list[int] = []
    handling = anyio.Event()

    async def handle(event: PaymentCheck) -> bool:
        attempts.append(current_delivery().attempt)
        handling.set()
        await anyio.sleep_forever()  # cut off when the shutdown grace is over
        return True

    async def hand_back_failed() -> bool:
        return any(
            "giving back PaymentCheck events failed" in record.getMessage()
            for record in caplog.records
        )

    async def start_server_once_hand_back_failed() -> None:
        await wait_until(hand_back_failed, within=10)
        await anyio.to_thread.run_sync(server.start)

    lease_seconds = 60  # its end lies far beyond the test: an event due there is parked
    service = (
        EventService.builder()
        .url(server.url)
        .scheduling_interval(0.05)
        .lease(lease_seconds)
        .handler_timeout(120)
        .shutdown_grace(0.2)
        .build()
    )
    # The service is left (stopped) first, then the task group waits for the restart.
    async with anyio.create_task_group() as group, service:
        service.add_handler(PaymentCheck, handle)
        assert await service.enqueue(PaymentCheck(id="p-cut", order_id=1), 0)
        with anyio.fail_after(10):
            await handling.wait()
        await anyio.to_thread.run_sync(functools.partial(server.stop, keep_data=True))
        group.start_soon(start_server_once_hand_back_failed)
        # Leaving the block stops the service: the handler is cut off, and its hand-back
        # must outlast the server's absence.
    assert service.state is ServiceState.CLOSED
    assert attempts == [1]
    assert not any("could not give back" in record.getMessage() for record in caplog.records)
    async with redis.Redis.from_url(server.url) as observer:
        due_ms = await observer.zscore(KEYS.schedule, "p-cut")
        assert due_ms is not None
        assert due_ms <= await server_time_ms(observer), "parked until its lease's end"
        stored = orjson.loads(await observer.hget(KEYS.events, "p-cut") or b"null")
        assert stored["attempt"] == 1  # spent: its handler began
        assert "was cut off" in stored["error"]
