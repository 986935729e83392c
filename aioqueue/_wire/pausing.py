"""Pausing and resuming an event type for every service of a prefix (pause.lua, resume.lua).

The pause lives in Redis, one flag per partition in the partition's hash tag, so dispatch
and claim read it inside their own scripts: it holds for every service within one script
call, and survives restarts.
"""

from __future__ import annotations

from functools import partial

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.registry import known_layouts
from aioqueue._wire.scripts import LuaScript

__all__ = ["is_paused", "pause", "paused_types", "resume"]

PAUSE = LuaScript("pause")
RESUME = LuaScript("resume")


async def pause(client: RedisClient, layout: QueueLayout) -> int:
    """Pauses the type; returns how many waiting deliveries went back to the schedule."""
    returned = 0
    for keys in layout.all_keys:
        returned += int(
            await PAUSE.run(
                client, [keys.paused, keys.ready, keys.schedule, keys.events, keys.counts], []
            )
        )
    return returned


async def resume(client: RedisClient, layout: QueueLayout) -> bool:
    """Resumes the type; False when it was not paused."""
    was_paused = False
    for keys in layout.all_keys:
        was_paused |= int(await RESUME.run(client, [keys.paused, keys.wake], [])) == 1
    return was_paused


async def is_paused(client: RedisClient, layout: QueueLayout) -> bool:
    """True when any partition of the type is paused (a pause covers them all)."""
    for keys in layout.all_keys:
        if await gated_call(client, partial(client.hexists, keys.paused, "paused")):
            return True
    return False


async def paused_types(client: RedisClient, prefix: str) -> set[str]:
    """The wire names of the prefix's paused types (those in its type registry)."""
    return {
        layout.event_type
        for layout in await known_layouts(client, prefix)
        if await is_paused(client, layout)
    }
