"""Serial keys on a real server: events with the same `__serial_key__` value run one at a
time across services, in due order; a retry keeps its place; other values are not held back;
a key is freed when its event settles, is cancelled, dies, or its worker is killed and the
lease ends."""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import (
    ConfigurationError,
    Event,
    EventDefinitionError,
    EventServiceBuilder,
    FixedDelays,
)
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys
from tests.support.common import EVERY_TOPOLOGY, KeyWatch, OrderStep, Recorder, wait_until
from tests.support.worker_processes import blocking_worker, read_line, worker_log

Builder = Callable[[], EventServiceBuilder]
KEYS = QueueKeys.for_type("aioqueue", "OrderStep")


def step_id(order: int, step: int) -> str:
    return f"o{order}-s{step:02d}"


@pytest.mark.backends("standalone", "cluster")
async def test_two_services_run_one_call_per_key_in_due_order_and_keys_in_parallel(
    service_builder: Builder,
) -> None:
    orders, steps = 5, 40
    watch = KeyWatch()
    async with service_builder().build() as one, service_builder().build() as other:
        start = datetime.now(timezone.utc) + timedelta(seconds=0.5)
        # Step s of every order is due s ms after the start: per key, due order is step order.
        for step in range(steps):
            for order in range(orders):
                event = OrderStep(id=step_id(order, step), order_id=order)
                await one.enqueue(event, at=start + timedelta(milliseconds=step))
        one.add_handler(OrderStep, watch, parallelism=16)
        other.add_handler(OrderStep, watch, parallelism=16)
        await watch.recorder.wait_for(orders * steps, within=30)
    assert watch.overlaps == 0
    for order in range(orders):
        assert watch.started[order] == [step_id(order, step) for step in range(steps)]
    # The keys ran side by side: one chain of 40 calls, not 200 calls one after another.
    assert watch.most_keys_at_once >= 3
    assert watch.last_end - watch.first_start < orders * steps * watch.seconds / 2


@EVERY_TOPOLOGY
async def test_a_retry_keeps_its_place_before_later_events_of_its_key(
    service_builder: Builder,
) -> None:
    attempts: list[str] = []
    finished = anyio.Event()

    async def fail_first_attempt(event: OrderStep) -> bool:
        attempts.append(event.id)
        if event.id == "late":
            finished.set()
        return event.id != "first" or attempts.count("first") > 1

    builder = service_builder().retry_policy(FixedDelays([0.3]))
    async with builder.build() as service:
        await service.enqueue(OrderStep(id="first", order_id=1), 0)
        await service.enqueue(OrderStep(id="late", order_id=1), timedelta(milliseconds=50))
        await service.enqueue(OrderStep(id="other", order_id=2), timedelta(milliseconds=100))
        service.add_handler(OrderStep, fail_first_attempt)
        with anyio.fail_after(10):
            await finished.wait()
    # "late" waited for the retry of "first"; order 2 did not wait for order 1.
    assert attempts == ["first", "other", "first", "late"]


@pytest.mark.parametrize("settle", ["cancel", "dead"])
async def test_a_key_is_freed_when_its_event_is_cancelled_or_dies(
    service_builder: Builder, settle: str
) -> None:
    recorder = Recorder(outcome=lambda event: event.id != "holder")
    # The holder's retry would come after a minute: only settling it can free the key.
    builder = service_builder().retry_policy(FixedDelays([60]))
    builder = builder.retry_attempts(1 if settle == "dead" else 2)
    async with builder.build() as service:
        await service.enqueue(OrderStep(id="holder", order_id=1), 0)
        await service.enqueue(OrderStep(id="next", order_id=1), timedelta(milliseconds=50))
        service.add_handler(OrderStep, recorder)
        await recorder.wait_for(1)
        if settle == "cancel":

            async def parked() -> bool:
                info = await service.inspect(OrderStep, "next")
                return info is not None and info.state == "parked"

            await wait_until(parked)
            assert await service.cancel(OrderStep, "holder")
        await recorder.wait_for(2, within=5)
    assert recorder.ids == ["holder", "next"]


async def test_a_killed_worker_frees_its_key_when_the_lease_ends(
    redis_client: redis.Redis,
    redis_url: str,
    service_builder: Builder,
    tmp_path: pathlib.Path,
) -> None:
    async with service_builder().enable_scheduling(False).build() as producer:
        await producer.enqueue(OrderStep(id="held", order_id=7), 0)
    marker = tmp_path / "handler-started"
    recorder = Recorder()
    async with blocking_worker(redis_url, marker, "OrderStep") as worker:
        assert await read_line(worker, worker_log(marker)) == "started held"
        async with service_builder().build() as service:
            service.add_handler(OrderStep, recorder)
            await service.enqueue(OrderStep(id="after", order_id=7), 0)
            await service.enqueue(OrderStep(id="elsewhere", order_id=8), 0)
            # Order 8 runs while the worker holds order 7; order 7's next step is parked.
            await recorder.wait_for(1)
            info = await service.inspect(OrderStep, "after")
            assert info is not None
            assert info.state == "parked"
            os.kill(worker.pid, signal.SIGKILL)
            assert await worker.wait() == -signal.SIGKILL
            # After the lease, "held" runs again here (its retry keeps the key), then "after".
            await recorder.wait_for(3, within=15)
    assert recorder.ids == ["elsewhere", "held", "after"]
    assert await redis_client.hlen(KEYS.serial_holders) == 0
    assert await redis_client.zcard(KEYS.serial_waiting) == 0


async def test_the_serial_field_is_recorded_and_checked(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    async with service_builder().build() as service:
        await service.enqueue(OrderStep(id="o-1", order_id=1), timedelta(hours=1))
    assert await redis_client.get(KEYS.serial_field) in (b"order_id", "order_id")

    class NoSuchField(Event):
        __serial_key__ = "missing"
        id: str

    async with service_builder().build() as service:
        with pytest.raises(EventDefinitionError, match=r"__serial_key__ of .*NoSuchField"):
            service.add_handler(NoSuchField, Recorder())
    with pytest.raises(ConfigurationError, match="cannot be partitioned"):
        service_builder().partitions(OrderStep, 4)
