"""Reading a type's dead-letter set into DeadLetter objects."""

from __future__ import annotations

import contextlib

from ._envelope import DeadLetter, died_at_from_ms, parse_dead_letter_fields, readable_text
from ._errors import PayloadDecodeError
from ._event import Event
from ._queue import TypeQueue
from ._serializer import Serializer

__all__ = ["read_dead_letters"]


async def read_dead_letters(
    queue: TypeQueue, event_class: type[Event], serializer: Serializer, limit: int
) -> list[DeadLetter]:
    """The newest `limit` dead letters of all partitions, each decoded into an event where
    the payload allows."""
    if limit < 1:
        return []
    entries = []
    for store in queue.stores:
        entries += await store.dead_letter_entries(limit)
    entries.sort(key=lambda entry: entry[1], reverse=True)
    letters = []
    for raw, died_at_ms in entries[:limit]:
        fields = parse_dead_letter_fields(raw)
        event_id = str(fields.get("id", ""))
        payload = fields.get("payload")
        event = None
        if isinstance(payload, str):
            # An undecodable payload is why many dead letters died; `error` says so.
            with contextlib.suppress(PayloadDecodeError):
                event = serializer.decode(event_class, event_id, payload)
        context = fields.get("context")
        letters.append(
            DeadLetter(
                id=event_id,
                event_type=queue.event_type,
                payload=payload if isinstance(payload, str) else None,
                event=event,
                context=context if isinstance(context, dict) else {},
                error=str(fields.get("error", "")),
                attempts=int(fields.get("attempt") or 0),
                died_at=died_at_from_ms(died_at_ms),
                raw=readable_text(raw),
            )
        )
    return letters
