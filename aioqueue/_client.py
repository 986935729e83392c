"""The Redis clients aioqueue accepts."""

from __future__ import annotations

from typing import TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisClient", "blocking_wait_limit", "client_from_url"]

RedisClient: TypeAlias = "Redis | RedisCluster"


def client_from_url(url: str) -> RedisClient:
    """A client for `url`; `redis+cluster://` or `rediss+cluster://` selects Redis Cluster."""
    for scheme in ("redis+cluster://", "rediss+cluster://"):
        if url.startswith(scheme):
            return RedisCluster.from_url(url.replace("+cluster", "", 1))
    return Redis.from_url(url)


def blocking_wait_limit(client: RedisClient, wanted: float) -> float:
    """How long a blocking command may wait on `client`: `wanted`, cut below the client's
    socket timeout (redis-py gives new connections one of 5 s), which would otherwise end
    every long wait in a TimeoutError and a dropped connection."""
    if isinstance(client, RedisCluster):
        socket_timeout = client.nodes_manager.connection_kwargs.get("socket_timeout")
    else:
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    if not socket_timeout:
        return wanted
    return max(0.01, min(wanted, float(socket_timeout) * 0.8))
