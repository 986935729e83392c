"""The type registry: which event types a prefix has, and how many partitions each has.

Services record every type they touch, so tools (the CLI, the HTTP API, Spark readers) can
find all queues of a prefix without scanning the keyspace.
"""

from __future__ import annotations

from .client import RedisClient, ensure_slot_map, within_reply_timeout
from .envelope import text
from .keys import QueueLayout

__all__ = ["known_layouts", "record_layout", "registry_key"]


def registry_key(prefix: str) -> str:
    """hash: event type wire name -> partition count (decimal text)."""
    return f"{prefix}:types"


async def record_layout(client: RedisClient, layout: QueueLayout) -> None:
    # Often a service's first command, and concurrent enqueues all start here.
    await ensure_slot_map(client)
    record = client.hset(registry_key(layout.prefix), layout.event_type, str(layout.partitions))
    await within_reply_timeout(record)


async def known_layouts(client: RedisClient, prefix: str) -> list[QueueLayout]:
    """Every type recorded under `prefix`, sorted by name."""
    entries = await within_reply_timeout(client.hgetall(registry_key(prefix)))
    return sorted(
        (QueueLayout(prefix, text(name), int(partitions)) for name, partitions in entries.items()),
        key=lambda layout: layout.event_type,
    )
