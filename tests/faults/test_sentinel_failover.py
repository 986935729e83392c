"""The primary behind Sentinel dies (SIGKILL) while events are due: the sentinels promote the
replica, and the service follows it by itself. Every event is delivered.

Real processes on loopback: one primary, one replica, three sentinels (down-after 500 ms).
Replication is asynchronous, so the test makes sure the replica has every enqueue before the
kill (a probe write and `WAIT 1` on the primary: the replication stream is ordered, so once
the replica acknowledged the probe it has everything before it). What the primary did after
that (dispatches, claims, acknowledgements) may die with it, which can only cause repeat
deliveries; that is the at-least-once promise, and the test bounds the repeats.
"""

from __future__ import annotations

import itertools
import pathlib
import time
from collections import Counter
from collections.abc import Iterator

import anyio
import pytest
import redis.asyncio as redis
from redis.exceptions import RedisError

from aioqueue import EventService, FixedDelays, ServiceState
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedSentinel
from tests.support.common import (
    PaymentCheck,
    Recorder,
    drained,
    wait_until,
)

KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")
BEFORE = 300  # enqueued before the kill, due over the next 3 s
AFTER = 50  # enqueued once the replica took over
HANDLER_TIMEOUT = 1.0  # a claimed event comes back 2 s after its claim (lease + 1 s)


@pytest.fixture
def sentinel_group(server_binary: pathlib.Path) -> Iterator[EmbeddedSentinel]:
    """A group of its own per test (its primary gets killed), of this run's server version."""
    with EmbeddedSentinel(binary=server_binary) as group:
        yield group


def builder(group: EmbeddedSentinel) -> EventService:
    return (
        EventService.builder()
        .sentinel(group.addresses, service_name=group.service_name)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(HANDLER_TIMEOUT)
        .shutdown_grace(2.0)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )


async def replica_has_everything(primary_url: str) -> None:
    """Returns once the replica acknowledged every write the primary executed so far."""
    async with redis.Redis.from_url(primary_url, single_connection_client=True) as primary:
        await primary.set("replication-probe", "1")
        assert await primary.wait(1, 5000) == 1


async def enqueue_until_stored(producer: EventService, event: PaymentCheck, due_in: float) -> int:
    """Enqueues through a failover: tries again until the primary of the moment takes it.
    Returns the failed tries."""
    failed = 0
    with anyio.fail_after(20):
        while True:
            try:
                # False would mean an earlier try was stored after all: stored either way.
                await producer.enqueue(event, due_in)
                return failed
            except RedisError:
                failed += 1
                # Nothing tells a client that the failover is over: it tries again soon.
                await anyio.sleep(0.05)


async def test_a_killed_primary_fails_over_and_every_event_is_delivered(
    sentinel_group: EmbeddedSentinel,
) -> None:
    group = sentinel_group
    recorder = Recorder()
    delivered_at: list[float] = []
    held = anyio.Event()
    failed_over = anyio.Event()

    async def handle(event: PaymentCheck) -> bool:
        delivered_at.append(time.monotonic())
        if event.id == "held" and not failed_over.is_set():
            # In a handler across the whole failover: its acknowledgement goes to the new
            # primary (or, lost, the event comes back when its lease ends).
            held.set()
            await failed_over.wait()
        return await recorder(event)

    worker, producer = builder(group), builder(group)
    old_primary = await anyio.to_thread.run_sync(group.primary)
    async with worker, producer:
        worker.add_handler(PaymentCheck, handle, parallelism=8)
        assert await producer.enqueue(PaymentCheck(id="held", order_id=-1), 0.3)
        events = [PaymentCheck(id=f"e-{n}", order_id=n) for n in range(BEFORE)]
        for n, event in enumerate(events):
            assert await producer.enqueue(event, 0.5 + n * 0.01)
        await replica_has_everything(old_primary.url)
        await held.wait()
        await recorder.wait_for(40)

        killed_at = time.monotonic()
        await anyio.to_thread.run_sync(group.kill, old_primary)
        await anyio.to_thread.run_sync(group.wait_for_failover, old_primary)
        failed_over_at = time.monotonic()
        failed_over.set()
        new_primary = await anyio.to_thread.run_sync(group.primary)
        assert new_primary is not old_primary

        failed_tries = 0
        later = [PaymentCheck(id=f"later-{n}", order_id=n) for n in range(AFTER)]
        for event in later:
            failed_tries += await enqueue_until_stored(producer, event, 0.1)
        every_id = {"held", *(e.id for e in events), *(e.id for e in later)}

        async def all_delivered() -> bool:
            return every_id <= set(recorder.ids)

        await wait_until(all_delivered, within=30)
        async with redis.Redis.from_url(new_primary.url) as observer:
            await wait_until(drained(observer, KEYS), within=10)
        assert worker.state is ServiceState.RUNNING

    delivered = Counter(recorder.ids)
    duplicated = sum(count - 1 for count in delivered.values())
    stall = max((b - a for a, b in itertools.pairwise(delivered_at)), default=0.0)
    print(
        f"\nfailover took {failed_over_at - killed_at:.2f} s; longest gap between deliveries "
        f"{stall:.2f} s; enqueues retried after the kill: {failed_tries}; "
        f"{len(delivered)} events delivered, {duplicated} repeat deliveries"
    )
    assert set(delivered) == every_id  # none lost, none invented
    # Repeats come only from what was under way at the kill: deliveries whose claim or
    # acknowledgement died with the primary.
    assert duplicated <= 40


async def test_a_manual_failover_moves_the_service_to_the_new_primary(
    sentinel_group: EmbeddedSentinel,
) -> None:
    """`SENTINEL FAILOVER` (as for maintenance): the old primary lives on as a replica, so the
    service's connections to it still work but may not write; they must let go of it."""
    group = sentinel_group
    recorder = Recorder()
    worker, producer = builder(group), builder(group)
    old_primary = await anyio.to_thread.run_sync(group.primary)
    async with worker, producer:
        worker.add_handler(PaymentCheck, recorder, parallelism=4)
        for n in range(20):
            assert await producer.enqueue(PaymentCheck(id=f"e-{n}", order_id=n), 0)
        await recorder.wait_for(20)
        # Consumers now wait inside the primary (BLMOVE), the dispatcher sleeps on its timer.
        sentinel = group.sentinels[0]
        async with redis.Redis(host=group.host, port=sentinel.port) as admin:
            assert await admin.sentinel_failover(group.service_name)
        await anyio.to_thread.run_sync(group.wait_for_failover, old_primary)
        failed_tries = 0
        for n in range(20, 40):
            failed_tries += await enqueue_until_stored(
                producer, PaymentCheck(id=f"e-{n}", order_id=n), 0
            )
        every_id = {f"e-{n}" for n in range(40)}

        async def all_delivered() -> bool:
            return every_id <= set(recorder.ids)

        await wait_until(all_delivered, within=30)
        assert worker.state is ServiceState.RUNNING
    print(f"\nenqueues retried after the failover: {failed_tries}")
    assert set(recorder.ids) == every_id
    assert old_primary.pid is not None  # it was never killed
