"""Event classes and recording handlers shared by the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import anyio
import pytest
import redis.asyncio as redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from aioqueue import Event, NoMetrics, event_context
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedServer

T = TypeVar("T")

EVERY_TOPOLOGY = pytest.mark.backends("standalone", "cluster", "sentinel")
"""Runs a test on one server, on the session's cluster and through the session's Sentinel
group (see tests/conftest.py): for the core behaviour, on every topology a user may run."""


@dataclass
class PaymentCheck(Event):
    id: str
    order_id: int


@dataclass
class OrderStep(Event):
    """Steps of one order run one at a time, in due order (a serial key)."""

    __serial_key__ = "order_id"
    id: str
    order_id: int


@dataclass
class OrderTimeout(Event):
    id: str
    reason: str = "unpaid"


@dataclass
class Delivery:
    event: Event
    context: dict[str, str]


@dataclass
class Recorder:
    """A handler that records what it is handed; tests await counts instead of sleeping.

    `outcome` decides what the handler returns for each event (True by default); raising
    from it makes the handler raise.
    """

    outcome: Callable[[Event], bool] = lambda event: True
    deliveries: list[Delivery] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, event: Event) -> bool:
        self.deliveries.append(Delivery(event, dict(event_context.get())))
        self._changed.set()
        self._changed = anyio.Event()
        return self.outcome(event)

    @property
    def ids(self) -> list[str]:
        return [delivery.event.id for delivery in self.deliveries]

    async def wait_for(self, count: int, within: float = 10.0) -> list[Delivery]:
        """Waits until at least `count` deliveries happened; fails the test after `within` s."""
        with anyio.fail_after(within):
            while len(self.deliveries) < count:
                await self._changed.wait()
        return self.deliveries

    async def wait_for_id(self, event_id: str, within: float = 10.0) -> None:
        """Waits until `event_id` was delivered; fails the test after `within` s."""
        with anyio.fail_after(within):
            while event_id not in self.ids:
                await self._changed.wait()


class KeyWatch:
    """A handler of OrderStep events (serial key `order_id`) that holds each call `seconds`,
    records each call's start and end per key, and counts calls of one key that overlapped
    (must stay 0)."""

    def __init__(self, seconds: float = 0.03) -> None:
        self.seconds = seconds
        self.running: dict[int, str] = {}
        self.overlaps = 0
        self.most_keys_at_once = 0
        self.started: dict[int, list[str]] = {}
        self.first_start = self.last_end = 0.0
        self.recorder = Recorder()

    async def __call__(self, event: OrderStep) -> bool:
        if event.order_id in self.running:
            self.overlaps += 1
        self.running[event.order_id] = event.id
        self.most_keys_at_once = max(self.most_keys_at_once, len(self.running))
        self.started.setdefault(event.order_id, []).append(event.id)
        self.first_start = self.first_start or time.monotonic()
        await anyio.sleep(self.seconds)
        del self.running[event.order_id]
        self.last_end = time.monotonic()
        return await self.recorder(event)


class DispatchSizes(NoMetrics):
    """Metrics that record how many events each dispatch call moved."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def events_dispatched(self, event_type: str, count: int) -> None:
        self.sizes.append(count)


def queue_key(event_type: str, part: str, prefix: str = "aioqueue") -> str:
    """A key as docs/wire-format.md spells it, e.g. `aioqueue:{PaymentCheck}:ready`."""
    return f"{prefix}:{{{event_type}}}:{part}"


async def all_keys(client: RedisClient) -> list[bytes]:
    """Every key of the server, or of every master of a cluster (where KEYS asks one node)."""
    return [key async for key in client.scan_iter()]


async def server_time_ms(client: RedisClient) -> int:
    """Now on the server's clock, the one every due time is on."""
    seconds, microseconds = await client.time()
    return int(seconds) * 1000 + int(microseconds) // 1000


async def flush_everything(client: RedisClient) -> None:
    """FLUSHALL on the server, or on every master of a cluster (where it would reach one)."""
    if isinstance(client, RedisCluster):
        await client.flushall(target_nodes=RedisCluster.PRIMARIES)
    else:
        await client.flushall()


def key_on(client: RedisCluster, node: ClusterNode, name: str) -> str:
    """A key `node` serves: `name` with the first hash tag that lands there."""
    for salt in range(10_000):
        key = f"{{{name}.{salt}}}"
        if client.get_node_from_key(key) == node:
            return key
    raise AssertionError(f"no key of {name!r} on {node.name}")


async def restart_empty(server: EmbeddedServer) -> None:
    """SIGKILL, then start again on the same port (in a thread, so clients go on meanwhile):
    every connection is closed by the server, and without AOF it comes back empty."""
    server.kill()
    await anyio.to_thread.run_sync(server.start)


def drained(client: RedisClient, keys: QueueKeys) -> Callable[[], Awaitable[bool]]:
    """A wait_until condition: nothing of the queue at `keys` is pending any more."""

    async def check() -> bool:
        return await client.hlen(keys.events) == 0 and await client.zcard(keys.schedule) == 0

    return check


async def wait_until(condition: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Polls `condition` until it holds; fails the test after `within` s.

    For Redis state, which offers nothing to await: prefer `Recorder.wait_for` where it fits.
    """
    with anyio.fail_after(within):
        while True:
            if await condition():
                return
            await anyio.sleep(0.01)


def wait_until_sync(condition: Callable[[], bool], within: float = 10.0) -> None:
    """`wait_until` for threads: polls `condition` (a thread's state, which offers nothing to
    wait on) every millisecond until it holds; fails the test after `within` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not true within {within} s"
        time.sleep(0.001)


async def subscribed(client: RedisClient) -> int:
    """How many connections, on all nodes, listen for wake-ups (pub/sub mode: a service
    subscribes on one connection, whatever number of queues it waits on)."""
    if isinstance(client, RedisCluster):
        by_node = cast(
            "dict[str, list[dict[str, str]]]",
            await client.client_list(target_nodes=RedisCluster.ALL_NODES),
        )
        entries = [entry for node_entries in by_node.values() for entry in node_entries]
    else:
        entries = await client.client_list()
    return sum(1 for entry in entries if "P" in entry["flags"])


async def blocked_in(client: RedisClient, command: str) -> int:
    """How many connections, on all nodes, are blocked in `command` (e.g. "blmove": each
    partition's consumer waits for ready events with it)."""
    if isinstance(client, RedisCluster):
        # Typed as one node's list; sent to several nodes, the reply is a list per node.
        by_node = cast(
            "dict[str, list[dict[str, str]]]",
            await client.client_list(target_nodes=RedisCluster.ALL_NODES),
        )
        entries = [entry for node_entries in by_node.values() for entry in node_entries]
    else:
        entries = await client.client_list()
    return sum(1 for entry in entries if "b" in entry["flags"] and entry["cmd"] == command)


class SteppedRedis:
    """A client of a flushed server on an event loop of its own, for models whose steps are
    synchronous (Hypothesis runs them): each step runs its Redis calls to completion here
    (asyncio.Runner would do, but the package still supports Python 3.10)."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client: redis.Redis = self.run(self._connect(url))

    @staticmethod
    async def _connect(url: str) -> redis.Redis:
        client = redis.Redis.from_url(url)
        await client.flushall()
        return client

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


def drop_cluster_node(client: RedisCluster, node: ClusterNode) -> None:
    """Does to `node` what redis-py's slot-map refresh does to a node missing from CLUSTER
    SLOTS (after a failover, a node that answered without it): marks its connections in use,
    closes its idle ones, and forgets it as a node and as a startup node."""
    manager = client.nodes_manager
    for known in (manager.nodes_cache, manager.startup_nodes):
        others = {name: other for name, other in known.items() if name != node.name}
        manager.set_nodes(known, others, remove_old=True)
