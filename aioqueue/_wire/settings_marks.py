"""Knowing that the server lost a type's settings, so that they are recorded again.

A type's settings live in Redis beside its events: its entry in the prefix's registry, its
published schema, its serial field and its rate limit. A service records them when it
starts. A server that loses its data (FLUSHALL, a restart without persistence, a failover to
a replica that had nothing yet) loses them too, while the services go on running, and
without them events of one serial key would run at once and a rate limit would not hold.
So once a service has recorded a type's settings it also sets the type's `recorded` key, in
each partition's hash tag where dispatch.lua can read it: a dispatch that finds it missing
takes nothing, and the dispatching service records the settings again (see
ServiceHandlers._settings_lost), then dispatches as before. An operator who clears a rate
limit leaves the key in place: only a loss of data brings a service's own limit back.
"""

from __future__ import annotations

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout

__all__ = ["mark_recorded"]


async def mark_recorded(client: RedisClient, layout: QueueLayout) -> None:
    """Notes, in every partition of the type, that its settings are recorded."""
    async with client.pipeline(transaction=False) as pipe:
        for keys in layout.all_keys:
            pipe.set(keys.recorded, 1)
        await gated_call(client, pipe.execute)
