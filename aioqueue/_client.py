"""The Redis clients aioqueue accepts."""

from __future__ import annotations

from typing import TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisClient", "client_from_url"]

RedisClient: TypeAlias = "Redis | RedisCluster"


def client_from_url(url: str) -> RedisClient:
    """A client for `url`; `redis+cluster://` or `rediss+cluster://` selects Redis Cluster."""
    for scheme in ("redis+cluster://", "rediss+cluster://"):
        if url.startswith(scheme):
            return RedisCluster.from_url(url.replace("+cluster", "", 1))
    return Redis.from_url(url)
