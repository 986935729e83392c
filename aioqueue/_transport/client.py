"""The Redis clients aioqueue accepts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import anyio
import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue._transport.own_connections import own_connections
from aioqueue._transport.sentinel import (
    SentinelSettings,
    is_sentinel_url,
    parse_sentinel_url,
    sentinel_client,
    sync_sentinel_client,
)

if TYPE_CHECKING:
    # typing's own from Python 3.13: unlike TypeGuard, it narrows the other branch too (a
    # client that is not a cluster is a plain Redis client).
    from typing_extensions import TypeIs

__all__ = [
    "REPLY_TIMEOUT",
    "RedisClient",
    "SyncRedisClient",
    "client_from_url",
    "ensure_slot_map",
    "is_cluster",
    "is_sync_cluster",
    "producer_client_from_url",
    "service_client_from_url",
    "service_client_of_sentinels",
    "sync_client_from_url",
    "text",
    "within_reply_timeout",
]

RedisClient: TypeAlias = "Redis | RedisCluster"
SyncRedisClient: TypeAlias = "redis.Redis | SyncRedisCluster"
"""The blocking clients aioqueue's producers accept."""
T = TypeVar("T")


def is_cluster(client: object) -> TypeIs[RedisCluster]:
    """Whether `client` is an asyncio cluster client (isinstance, answered once per class)."""
    return _cluster_kind(type(client)) is RedisCluster


def is_sync_cluster(client: object) -> TypeIs[SyncRedisCluster]:
    """Whether `client` is a blocking cluster client (isinstance, answered once per class)."""
    return _cluster_kind(type(client)) is SyncRedisCluster


def _cluster_kind(kind: type) -> type | None:
    # redis-py's cluster classes are Protocols, and isinstance against one took 1.7 µs for a
    # client that is not one: on every call of the hot paths that ask (a held connection's
    # every step, each call of a blocking producer). A class is looked up once.
    try:
        return _CLUSTER_KINDS[kind]
    except KeyError:
        found = next((c for c in (RedisCluster, SyncRedisCluster) if issubclass(kind, c)), None)
        _CLUSTER_KINDS[kind] = found
        return found


_CLUSTER_KINDS: dict[type, type | None] = {}


REPLY_TIMEOUT = 5.0
"""Seconds aioqueue's service waits for Redis to answer one call (a blocking wait: beyond
its own timeout) before it fails with redis.exceptions.TimeoutError."""


def text(value: bytes | str) -> str:
    """Redis replies are bytes or str depending on the client's decode_responses."""
    return value.decode() if isinstance(value, bytes) else value


def client_from_url(url: str, **options: Any) -> RedisClient:
    """A client for `url`; `redis+cluster://` or `rediss+cluster://` selects Redis Cluster,
    `redis+sentinel://` or `rediss+sentinel://` the primary of a Sentinel-monitored group
    (see sentinel.py). Options given in the URL's query win over `options`. Its connections
    are aioqueue's own (see own_connections.py)."""
    for scheme in ("redis+cluster://", "rediss+cluster://"):
        if url.startswith(scheme):
            cluster = _SlotMapFirstCluster.from_url(url.replace("+cluster", "", 1), **options)
            return own_connections(cluster)
    if is_sentinel_url(url):
        return own_connections(sentinel_client(parse_sentinel_url(url), **options))
    return own_connections(Redis.from_url(url, **options))


def sync_client_from_url(url: str, **options: Any) -> SyncRedisClient:
    """A blocking client for `url`, with the URL schemes of client_from_url (for the
    producers that run without an event loop: SyncProducer, Spark tasks)."""
    for scheme in ("redis+cluster://", "rediss+cluster://"):
        if url.startswith(scheme):
            return SyncRedisCluster.from_url(url.replace("+cluster", "", 1), **options)
    if is_sentinel_url(url):
        return sync_sentinel_client(parse_sentinel_url(url), **options)
    return redis.Redis.from_url(url, **options)


def producer_client_from_url(url: str, *, waits: float = 0.0) -> SyncRedisClient:
    """The blocking client a SyncProducer makes from its URL: REPLY_TIMEOUT to connect and
    for each reply, plus `waits` seconds a reply may spend in WAIT/WAITAOF (unless the URL
    sets `socket_timeout` / `socket_connect_timeout`), since a blocking call has no deadline
    but the socket's, and a request thread should not hang on a server that stopped
    answering."""
    return sync_client_from_url(
        url, socket_timeout=REPLY_TIMEOUT + waits, socket_connect_timeout=REPLY_TIMEOUT
    )


# Every call a service makes has a deadline of its own (see within_reply_timeout), so its
# clients go without redis-py's socket timeout unless told otherwise: on Python 3.11 that
# timeout wraps each command sent in an extra task (asyncio.wait_for), which at thousands of
# events a second is a large share of a consumer's time. Its pool is sized for what the
# service holds (call_gate.CONNECTIONS_NEEDED, passed in by the builder): a URL's own
# `max_connections` wins, and is checked like a client passed in.
_SERVICE_OPTIONS: dict[str, Any] = {"socket_timeout": None}


def service_client_from_url(url: str, max_connections: int | None = None) -> RedisClient:
    """The client a service makes from its URL (without a socket timeout, unless the URL
    sets one), with a pool of `max_connections` (per node on a cluster) if given."""
    return client_from_url(url, **_SERVICE_OPTIONS, **_pool_size(max_connections))


def service_client_of_sentinels(
    settings: SentinelSettings, max_connections: int | None = None
) -> RedisClient:
    """The client a service makes from `EventServiceBuilder.sentinel(...)`, as from a URL."""
    return own_connections(
        sentinel_client(settings, **_SERVICE_OPTIONS, **_pool_size(max_connections))
    )


def _pool_size(max_connections: int | None) -> dict[str, Any]:
    return {} if max_connections is None else {"max_connections": max_connections}


_asyncio_timeout = getattr(asyncio, "timeout", None)
"""asyncio.timeout where Python has it (3.11+), else None (see within_reply_timeout)."""


async def within_reply_timeout(
    call: Awaitable[T], limit: float | None = None, *, blocking: float = 0.0
) -> T:
    """Awaits one Redis call, failing as redis-py's socket timeout would if Redis does not
    answer within `limit` seconds (default REPLY_TIMEOUT, looked up at each call), plus
    `blocking`: how long the call may block on the server by design (WAIT)."""
    seconds = (REPLY_TIMEOUT if limit is None else limit) + blocking
    if _asyncio_timeout is not None:
        # asyncio's own timeout where there is one (3.11+): a deadline is set on every call,
        # and it costs a claim about 8 µs of Python against anyio's 14.
        deadline = _asyncio_timeout(seconds)
        try:
            async with deadline:
                return await call
        except TimeoutError:
            if not deadline.expired():
                raise  # the call's own TimeoutError
            raise RedisTimeoutError(f"no reply from Redis within {seconds:g} s") from None
    with anyio.move_on_after(seconds):
        return await call
    raise RedisTimeoutError(f"no reply from Redis within {seconds:g} s")


class _SlotMapFirstCluster(RedisCluster):
    """A RedisCluster that loads its slot map before it routes a command (see ensure_slot_map).

    redis-py picks a command's node before it loads a missing map, so without this, the
    blocking waits of a starting service, or of one whose client redis-py has just closed
    after a CLUSTERDOWN, go to random nodes and their MOVED replies close connections that
    other commands are using.
    """

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self.initialize()
        return await super().execute_command(*args, **kwargs)


async def ensure_slot_map(client: RedisClient) -> None:
    """Loads a cluster client's slot map unless it has one; does nothing on a standalone client.

    A RedisCluster without its slot map (never used yet, or closed by redis-py itself after a
    CLUSTERDOWN or a run of MOVED replies) sends keyed commands to a random node, and every
    fifth MOVED reply makes it close all its connections, commands in flight included: those
    fail, or are sent again and run twice. Its `initialize()` is a no-op once the map is loaded
    and runs once, under a lock, when many callers need it at the same time.
    """
    if is_cluster(client):
        await client.initialize()
