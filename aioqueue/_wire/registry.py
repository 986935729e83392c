"""The type registry: which event types a prefix has, and how many partitions each has.

Services, producers (the HTTP API, Spark) and tools all go through `resolve_layout`, the one
owner of a type's partition count: the first to touch a type records its count, and anyone
configured with another count is refused, since events written to other keys than the
consumers read would never be delivered. Tools list every queue of a prefix from it without
scanning the keyspace, skipping (and reporting) entries that are not a partition count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aioqueue._model.errors import PartitionCountMismatchError
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.envelope import readable_text, text
from aioqueue._wire.keys import MAX_PARTITIONS, QueueLayout

__all__ = [
    "Registry",
    "known_layouts",
    "read_registry",
    "registry_key",
    "resolve_layout",
    "resolve_layout_steps",
]


def registry_key(prefix: str) -> str:
    """hash: event type wire name -> partition count (decimal text)."""
    return f"{prefix}:types"


async def resolve_layout(
    client: RedisClient,
    prefix: str,
    event_type: str,
    partitions: int | None,
    *,
    record: bool = True,
) -> QueueLayout:
    """The type's layout as the registry records it (see resolve_layout_steps)."""
    return await run_steps(
        client, resolve_layout_steps(prefix, event_type, partitions, record=record)
    )


def resolve_layout_steps(
    prefix: str, event_type: str, partitions: int | None, *, record: bool = True
) -> Steps[QueueLayout]:
    """The type's layout as the registry records it. A type not recorded yet is recorded
    with `partitions` (1 when None), unless `record` is False (a reader). Raises
    PartitionCountMismatchError when `partitions` is given and the registry records another
    count, or records something that is no count."""
    key = registry_key(prefix)
    wanted = 1 if partitions is None else partitions
    if record and (yield ("HSETNX", key, event_type, str(wanted))):
        return QueueLayout(prefix, event_type, wanted)
    stored = yield ("HGET", key, event_type)
    if stored is None and not record:
        return QueueLayout(prefix, event_type, wanted)
    count = _count(stored)
    if count is None:
        raise PartitionCountMismatchError(
            f"the registry {key!r} records {readable_text(stored or b'')!r} for {event_type}, "
            "which is no partition count; fix the entry (HSET it to the count the type's "
            "services use)"
        )
    if partitions is not None and partitions != count:
        raise PartitionCountMismatchError(
            f"{event_type} has {count} partition(s) under prefix {prefix!r} (registry "
            f"{key!r}), but {partitions} were asked for: configure every service and producer "
            f"of the type with {count} (EventService.builder().partitions({event_type}, "
            f"{count})); change a type's count only on an empty queue"
        )
    return QueueLayout(prefix, event_type, count)


@dataclass(frozen=True)
class Registry:
    """The registry as read: the usable entries, and what was wrong with the others."""

    layouts: list[QueueLayout]
    problems: list[str] = field(default_factory=list)


async def read_registry(client: RedisClient, prefix: str) -> Registry:
    """Every type recorded under `prefix`, sorted by name; an entry that is no partition
    count is left out and described in `problems`, so one bad record never hides the rest."""
    entries = await gated_call(client, lambda: client.hgetall(registry_key(prefix)))
    layouts, problems = [], []
    for name, value in entries.items():
        count = _count(value)
        if count is None:
            problems.append(
                f"registry entry {readable_text(name)!r} = {readable_text(value)!r} is no "
                f"partition count (1 to {MAX_PARTITIONS}); the type is left out"
            )
            continue
        try:
            layouts.append(QueueLayout(prefix, text(name), count))
        except ValueError as exc:
            problems.append(f"registry entry {readable_text(name)!r}: {exc}")
    layouts.sort(key=lambda layout: layout.event_type)
    return Registry(layouts, problems)


async def known_layouts(client: RedisClient, prefix: str) -> list[QueueLayout]:
    """Every usable type recorded under `prefix`, sorted by name; bad entries are logged."""
    registry = await read_registry(client, prefix)
    for problem in registry.problems:
        logger.warning("%s", problem)
    return registry.layouts


def _count(value: bytes | str | None) -> int | None:
    if value is None:
        return None
    try:
        count = int(text(value))
    except (ValueError, UnicodeDecodeError):
        return None
    return count if 1 <= count <= MAX_PARTITIONS else None
