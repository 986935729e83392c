"""Reaching the server at start, and naming it when it cannot be reached.

A service that starts against a wrong URL or a server that is down must say so once, in a
line that names the server and the cause, rather than start and leave its loops to retry
for ever: the loops ride out outages of a server that was there (recovery.py), which is
another matter. The name shown is the URL with its passwords masked, or for a client the
caller made, the addresses in its connection settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import BusyLoadingError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue._model.errors import RedisUnavailableError
from aioqueue._transport.client import (
    RedisClient,
    SyncRedisClient,
    is_cluster,
    is_sync_cluster,
    within_reply_timeout,
)
from aioqueue._transport.recovery import logger

__all__ = ["client_address", "display_url", "reach", "unavailable", "unavailable_as_one_error"]

# What a server that is down, unreachable or refusing the connection raises: redis-py's
# connection and timeout errors, RedisCluster's own when no startup node answers (it is no
# RedisError), and the OS's socket errors that redis-py did not wrap.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError)

# A cluster's start reads its slot map this many times at most, this many seconds apart
# (see _read_slot_map): a closed port's error comes 0.4 s later than at once.
CLUSTER_START_TRIES = 3
CLUSTER_START_PAUSE = 0.2


def display_url(url: str) -> str:
    """The URL without its passwords (the user's, and any `...password=` query option), for
    messages and logs."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user = f"{parts.username}:" if parts.username else ":"
            netloc = f"{user}***@{netloc.rpartition('@')[2]}"
    except ValueError:  # not a URL urlsplit can read: show none of it, it may hold a secret
        return "(an unreadable URL)"
    query = "&".join(_masked_option(option) for option in parts.query.split("&"))
    return urlunsplit(parts._replace(netloc=netloc, query=query if parts.query else ""))


def _masked_option(option: str) -> str:
    name, equals, _ = option.partition("=")
    return f"{name}=***" if equals and "password" in name.lower() else option


def client_address(client: RedisClient | SyncRedisClient) -> str:
    """Where a client connects, from its connection settings (it has no URL): `host:port`,
    a Unix socket's path, a Sentinel group or a cluster's startup nodes."""
    if is_cluster(client) or is_sync_cluster(client):
        nodes = ", ".join(client.nodes_manager.startup_nodes) or "no startup node"
        return f"the Redis Cluster of {nodes}"
    pool: Any = client.connection_pool
    service_name = getattr(pool, "service_name", None)
    if service_name is not None:  # a Sentinel-managed pool
        sentinels = [
            _host_port(sentinel.connection_pool.connection_kwargs)
            for sentinel in pool.sentinel_manager.sentinels
        ]
        return f"the primary {service_name!r} of the sentinels {', '.join(sentinels)}"
    return _host_port(pool.connection_kwargs)


def _host_port(settings: dict[str, Any]) -> str:
    if settings.get("path"):
        return f"unix:{settings['path']}"
    return f"{settings.get('host', 'localhost')}:{settings.get('port', 6379)}"


def unavailable(address: str, error: BaseException) -> RedisUnavailableError:
    """The error that says Redis at `address` cannot be reached, and why; the cause's
    traceback goes to DEBUG, as the retry warnings' do."""
    logger.debug("reaching Redis at %s failed", address, exc_info=error)
    cause = str(error) or "no reason given"
    return RedisUnavailableError(
        f"cannot reach Redis at {address}: {type(error).__name__}: {cause}"
    )


def _unreachable(error: BaseException) -> bool:
    # A server still loading its data answered: it is there, and serves once loaded.
    return isinstance(error, UNREACHABLE) and not isinstance(error, BusyLoadingError)


async def reach(client: RedisClient, address: str | None) -> None:
    """Raises RedisUnavailableError, naming `address` (else the client's own), unless the
    server answers within the reply timeout. A server that answers with an error (an ACL
    without PING, a cluster still settling) counts as reached."""
    try:
        if is_cluster(client):
            await _read_slot_map(client)
        else:
            await within_reply_timeout(client.ping())
    except UNREACHABLE as error:
        if not _unreachable(error):
            return
        # The message has the cause; one exception, not a chain of redis-py's internals.
        raise unavailable(address or client_address(client), error) from None
    except RedisError:
        return  # the server answered, if with an error: it is there


async def _read_slot_map(client: RedisCluster) -> None:
    """Reads a cluster's slot map (and command table), tried again after a pause on a
    connection error (not on a reply timeout), up to CLUSTER_START_TRIES times in all.

    The slot map, read from any startup node, proves the cluster answers; a PING would go to
    every node, and one replica down must not stop a start. redis-py sends a standalone
    client's PING again on a connection error (its retries), but not a cluster's first
    reads: without these tries, one connection cut during them (a failover, a node closing
    clients, a proxy's reset) failed the start of a cluster that was there.
    """
    for tries_left in reversed(range(CLUSTER_START_TRIES)):
        try:
            await within_reply_timeout(client.initialize())
            return
        except UNREACHABLE as error:
            # A cluster that does not answer within the reply deadline is not asked again:
            # the start would wait three deadlines to say what one says.
            if tries_left == 0 or isinstance(error, RedisTimeoutError) or not _unreachable(error):
                raise
            logger.debug("reading the cluster's slot map failed; trying again", exc_info=error)
        await anyio.sleep(CLUSTER_START_PAUSE)


@contextmanager
def unavailable_as_one_error(
    client: RedisClient | SyncRedisClient, address: str | None
) -> Iterator[None]:
    """Turns a connection error of the block into RedisUnavailableError naming `address`
    (else the client's own), for a blocking producer's first conversation with Redis."""
    try:
        yield
    except UNREACHABLE as error:
        if not _unreachable(error):
            raise
        raise unavailable(address or client_address(client), error) from None
