"""A type's rate limit as recorded in Redis (the `rate` hash in the type's hash tag), which
dispatch.lua and claim.lua enforce for every service of the prefix."""

from __future__ import annotations

from functools import partial

from aioqueue._model.rate_limit import RateLimit
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._wire.keys import QueueLayout

__all__ = ["read_rate_limit", "record_rate_limit", "set_rate_limit"]


async def read_rate_limit(client: RedisClient, layout: QueueLayout) -> RateLimit | None:
    keys = layout.all_keys[0]
    limit, per_ms = await gated_call(client, lambda: client.hmget(keys.rate, ["limit", "per_ms"]))
    try:
        return RateLimit(int(limit), int(per_ms)) if limit and per_ms else None
    except ValueError:
        return None  # written by hand: the scripts ignore what is no number too


async def record_rate_limit(
    client: RedisClient, layout: QueueLayout, wanted: RateLimit
) -> RateLimit:
    """Records `wanted` unless a limit is recorded already; returns the one in force, and
    logs when that is not `wanted` (the recorded one wins: it holds for every service)."""
    recorded = await read_rate_limit(client, layout)
    if recorded is None:
        await set_rate_limit(client, layout, wanted)
        return wanted
    if recorded != wanted:
        logger.warning(
            "%s is configured with rate limit %s here, but %s is recorded in Redis and holds "
            "for every service; change it with `aioqueue rate-limit %s`",
            layout.event_type,
            wanted,
            recorded,
            layout.event_type,
        )
    return recorded


async def set_rate_limit(client: RedisClient, layout: QueueLayout, limit: RateLimit | None) -> None:
    """Sets (or, with None, removes) the type's rate limit for every service."""
    for keys in layout.all_keys:
        if limit is None:
            await gated_call(client, partial(client.delete, keys.rate))
        else:
            mapping: dict[str | bytes, int] = {"limit": limit.limit, "per_ms": limit.per_ms}
            await gated_call(client, partial(client.hset, keys.rate, mapping=mapping))  # type: ignore[arg-type]
