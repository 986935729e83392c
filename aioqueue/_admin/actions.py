"""Operator actions on queues by type NAME, without the event's Python class.

Dead letters are listed, shown, requeued and purged, and pending events cancelled, through
the same scripts the library runs (requeue.lua, cancel.lua) plus purge.lua, so the wire
format has one definition. Used by the CLI and the HTTP API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import cast

from aioqueue._producing.writes import cancel
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.dead_letters import DeadLetterRecord, newest_dead_letters
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.queues import TypeQueue
from aioqueue._wire.scripts import LuaScript
from aioqueue._wire.store import QueueStore, Requeued

__all__ = [
    "DeadLetterRecord",
    "cancel_event",
    "count_dead_letters",
    "dead_letter_ids",
    "get_dead_letter",
    "list_dead_letters",
    "purge_dead_letters",
    "requeue_dead_letters",
]

PURGE = LuaScript("purge")
# Dead letters one purge.lua call deletes: bounded so a purge never blocks the server long.
PURGE_CHUNK = 500

Progress = Callable[[int], None]
"""Called with how many items are done so far."""


async def list_dead_letters(
    client: RedisClient, layout: QueueLayout, limit: int = 100
) -> list[DeadLetterRecord]:
    """The newest `limit` dead letters of a type, over all its partitions."""
    return await newest_dead_letters(TypeQueue(client, layout), limit)


async def get_dead_letter(
    client: RedisClient, layout: QueueLayout, event_id: str
) -> DeadLetterRecord | None:
    keys = layout.keys_for(event_id)
    raw = await gated_call(client, lambda: client.hget(keys.dead_letters, event_id))
    if raw is None:
        return None
    died_at = await gated_call(client, lambda: client.zscore(keys.dead_letter_times, event_id))
    return DeadLetterRecord.parse(layout.event_type, raw, died_at or 0.0)


async def count_dead_letters(client: RedisClient, layout: QueueLayout) -> int:
    total = 0
    for keys in layout.all_keys:
        total += int(await gated_call(client, partial(client.hlen, keys.dead_letters)))
    return total


async def dead_letter_ids(client: RedisClient, layout: QueueLayout) -> list[str]:
    """Every dead letter's id, oldest first within each partition (a snapshot)."""
    ids: list[str] = []
    for keys in layout.all_keys:
        members = cast(
            "list[bytes | str]",
            await gated_call(client, partial(client.zrange, keys.dead_letter_times, 0, -1)),
        )
        ids += [text(member) for member in members]
    return ids


async def requeue_dead_letters(
    client: RedisClient,
    layout: QueueLayout,
    event_ids: Iterable[str],
    progress: Progress | None = None,
) -> dict[str, Requeued]:
    """Puts dead letters back, due now, with a fresh attempt count (requeue.lua); returns
    each id's outcome: requeued, missing, pending (kept both) or unreadable (left dead)."""
    queue = TypeQueue(client, layout)
    outcomes: dict[str, Requeued] = {}
    for event_id in event_ids:
        outcomes[event_id] = await queue.store_for(event_id).requeue(event_id)
        if progress is not None:
            progress(len(outcomes))
    return outcomes


async def purge_dead_letters(
    client: RedisClient,
    layout: QueueLayout,
    event_ids: Sequence[str],
    progress: Progress | None = None,
) -> int:
    """Deletes dead letters for good; returns how many existed."""
    queue = TypeQueue(client, layout)
    by_store: dict[int, tuple[QueueStore, list[str]]] = {}
    for event_id in event_ids:
        store = queue.store_for(event_id)
        by_store.setdefault(id(store), (store, []))[1].append(event_id)
    deleted = done = 0
    for store, ids in by_store.values():
        keys = [store.keys.dead_letters, store.keys.dead_letter_times]
        for start in range(0, len(ids), PURGE_CHUNK):
            chunk: list[str | int] = list(ids[start : start + PURGE_CHUNK])
            deleted += int(await PURGE.run(client, keys, chunk))
            done += len(chunk)
            if progress is not None:
                progress(done)
    return deleted


async def cancel_event(client: RedisClient, layout: QueueLayout, event_id: str) -> bool:
    """Removes a pending event (cancel.lua); False if none with that id was pending."""
    return await cancel(client, layout.keys_for(event_id), event_id)
