"""Hundreds of event types and partitions in one service: connections and idle cost that do
not grow with them. A service's calls share a few connections (call_gate.py) and it waits
for work on one subscription (wake_ups.py), so 300 types cost what one does; a producer of a
thousand types waits its turn for a connection instead of failing; a client whose pool has
no room for a service is refused at build, naming the number it needs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import make_dataclass
from typing import cast

import anyio
import pytest
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection

from aioqueue import ConfigurationError, Event, EventService, EventServiceBuilder
from aioqueue._transport.call_gate import CONNECTIONS_NEEDED
from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue._wire.keys import QueueKeys
from tests.support.common import EVERY_TOPOLOGY, PaymentCheck, Recorder, wait_until

Builder = Callable[[], EventServiceBuilder]

# One server: the bound. A cluster: the same bound on each node.
MOST_CONNECTIONS = 20
MOST_PRODUCER_CONNECTIONS = 40


def event_classes(count: int, name: str = "Many") -> list[type[Event]]:
    """`count` event types of their own: Many0, Many1, ..."""
    return [
        cast("type[Event]", make_dataclass(f"{name}{n}", [("id", str)], bases=(Event,)))
        for n in range(count)
    ]


def _of_clients(entries: list[dict[str, str]]) -> int:
    """The connections of clients (services, this test): not a replica's link nor a
    sentinel's, which come and go on their own on a loaded machine."""
    return sum(
        1
        for entry in entries
        if not entry.get("name", "").startswith("sentinel-")
        and not {"S", "M"} & set(entry.get("flags", ""))
    )


async def connections_per_node(client: RedisClient) -> list[int]:
    """The clients connected to each node (on one server: a list of one)."""
    if isinstance(client, RedisCluster):
        by_node = cast(
            "dict[str, list[dict[str, str]]]",
            await client.client_list(target_nodes=RedisCluster.PRIMARIES),
        )
        return [_of_clients(entries) for entries in by_node.values()]
    return [_of_clients(await client.client_list())]


class MostConnections:
    """Samples the connections of each node while a test runs, less what was there before."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._baseline: list[int] = []
        self.most = 0

    async def __aenter__(self) -> MostConnections:
        self._baseline = await connections_per_node(self._client)
        return self

    async def sample(self) -> None:
        now = await connections_per_node(self._client)
        added = [after - before for after, before in zip(now, self._baseline, strict=True)]
        self.most = max(self.most, *added)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.sample()


def service_on(redis_url: str) -> EventServiceBuilder:
    """A service that makes its own client from the URL, as an application's would, at the
    default settings (the idle cost depends on the scheduling interval)."""
    return EventService.builder().url(redis_url)


@EVERY_TOPOLOGY
async def test_a_service_with_handlers_for_300_types_holds_a_few_connections(
    redis_url: str, redis_client: RedisClient
) -> None:
    """300 types, one event of each: all delivered, at most 20 connections on the server (on
    each node of a cluster), and idle afterwards at under 5 % of a core."""
    classes = event_classes(300)
    handled = Recorder()
    async with (
        MostConnections(redis_client) as connections,
        service_on(redis_url).build() as service,
    ):
        for event_class in classes:
            service.add_handler(event_class, handled)
        await service.enqueue_many([cls(id="e-1") for cls in classes], 0)  # type: ignore[call-arg]
        with anyio.fail_after(60):
            while len(handled.deliveries) < 300:
                await connections.sample()
                await handled.wait_for(min(300, len(handled.deliveries) + 1), within=60)
        await connections.sample()
        # Idle: every event acknowledged, nothing due, every consumer waiting. Two seconds
        # of it, on the clock of this thread, which runs the event loop and so the service
        # (the process's clock would also count threads other tests left in this worker).
        events = [QueueKeys.for_type(service.config.prefix, cls.__name__).events for cls in classes]

        async def all_acknowledged() -> bool:
            return int(await redis_client.exists(*events)) == 0

        await wait_until(all_acknowledged)
        cpu_before, wall_before = time.thread_time(), time.monotonic()
        await anyio.sleep(2.0)
        idle_share = (time.thread_time() - cpu_before) / (time.monotonic() - wall_before)
        await connections.sample()
    assert sorted(type(d.event).__name__ for d in handled.deliveries) == sorted(
        cls.__name__ for cls in classes
    )
    assert connections.most <= MOST_CONNECTIONS, connections.most
    assert idle_share < 0.05, idle_share


@pytest.mark.backends("standalone", "cluster")
async def test_one_type_in_64_partitions_holds_a_few_connections(
    redis_url: str, redis_client: RedisClient
) -> None:
    """One type spread over 64 partitions (a queue each), 500 events due now, a handler at
    parallelism 10: every event delivered once, within the same bound of connections."""
    handled = Recorder()
    events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(500)]
    partitioned = service_on(redis_url).partitions(PaymentCheck, 64)
    async with MostConnections(redis_client) as connections, partitioned.build() as service:
        service.add_handler(PaymentCheck, handled, parallelism=10)
        assert all(await service.enqueue_many(events, 0))
        with anyio.fail_after(60):
            while len(handled.deliveries) < 500:
                await connections.sample()
                await handled.wait_for(min(500, len(handled.deliveries) + 1), within=60)
    assert sorted(handled.ids) == sorted(event.id for event in events)
    assert connections.most <= MOST_CONNECTIONS, connections.most


@pytest.mark.backends("standalone", "cluster")
async def test_a_producer_enqueuing_a_thousand_types_at_once_succeeds(
    redis_url: str, redis_client: RedisClient
) -> None:
    """1,000 enqueues of 1,000 types at once, from a service that only produces: every one
    succeeds (before, 900 raised MaxConnectionsError), on at most 40 connections."""
    classes = event_classes(1000, "Produced")
    results: list[bool] = []
    producing = service_on(redis_url).enable_scheduling(False)
    async with MostConnections(redis_client) as connections, producing.build() as producer:

        async def enqueue(event_class: type[Event]) -> None:
            results.append(await producer.enqueue(event_class(id="e-1"), 3600))  # type: ignore[call-arg]

        async with anyio.create_task_group() as enqueues:
            for event_class in classes:
                enqueues.start_soon(enqueue, event_class)
            for _ in range(20):
                await connections.sample()
    assert results == [True] * 1000
    assert connections.most <= MOST_PRODUCER_CONNECTIONS, connections.most


@pytest.mark.backends("standalone", "cluster")
async def test_a_client_whose_pool_has_no_room_for_a_service_is_refused(redis_url: str) -> None:
    """A client passed in with max_connections below what a service holds fails at build,
    with the number needed; one with exactly that many works."""
    small = client_from_url(redis_url, max_connections=5)
    try:
        with pytest.raises(ConfigurationError, match=rf"at least {CONNECTIONS_NEEDED}\b"):
            EventService.builder().client(small).build()
    finally:
        await small.aclose()


async def test_a_full_shared_pool_makes_an_enqueue_wait_not_fail(redis_url: str) -> None:
    """The application shares the service's client and holds every connection of its pool
    for a moment: an enqueue waits its turn and succeeds (it never raises redis-py's
    MaxConnectionsError)."""
    client = redis.Redis.from_url(redis_url, max_connections=CONNECTIONS_NEEDED)
    try:
        service = EventService.builder().client(client).enable_scheduling(False).build()
        async with service:
            pool = client.connection_pool
            taken: list[AbstractConnection] = []
            while len(pool._in_use_connections) < pool.max_connections:
                taken.append(await pool.get_connection())  # type: ignore[no-untyped-call]
            done = anyio.Event()

            async def enqueue() -> None:
                assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
                done.set()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(enqueue)
                # Refused, it would end the task group with its error; it waits instead.
                await anyio.sleep(0.1)
                assert not done.is_set()
                for connection in taken:
                    await pool.release(connection)
                with anyio.fail_after(5):
                    await done.wait()
    finally:
        await client.aclose()
