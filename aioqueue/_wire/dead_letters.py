"""Reading a type's dead-letter set: as stored (for tools) and decoded (for the service)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aioqueue._model.errors import PayloadDecodeError
from aioqueue._model.event import Event
from aioqueue._model.serializer import Serializer
from aioqueue._wire.envelope import (
    DeadLetter,
    died_at_from_ms,
    parse_dead_letter_fields,
    readable_text,
    stored_payload,
    time_problem,
)
from aioqueue._wire.queues import TypeQueue
from aioqueue._wire.store import DeadLetterEntry

__all__ = ["DeadLetterRecord", "newest_dead_letters", "read_dead_letters"]


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """A dead letter as stored, read without the event's class."""

    event_type: str
    id: str
    error: str
    attempts: int
    died_at: datetime
    payload: str | None
    """The payload's JSON text; None when the envelope itself was unreadable."""
    context: dict[str, str]
    raw: str
    """The stored dead letter, as it is in Redis (undecodable bytes as escapes)."""
    damage: str | None = None
    """What in the stored record is not as aioqueue writes it (written by hand or by a broken
    producer); the record is still listed, with what could be read."""

    @classmethod
    def parse(cls, event_type: str, raw: bytes | str, died_at_ms: float) -> DeadLetterRecord:
        """Never fails: one damaged record must not hide the others from a listing."""
        fields = parse_dead_letter_fields(raw)
        payload = stored_payload(fields)
        context = fields.get("context")
        attempt = fields.get("attempt", 0)
        damage = []
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            damage.append(f"attempt {readable_text(str(attempt))[:40]!r} is no count")
            attempt = 0
        if time_problem(died_at_ms):
            damage.append(f"its time in dead_letter_times ({died_at_ms}) is no time")
        if context is not None and not (
            isinstance(context, dict) and all(isinstance(v, str) for v in context.values())
        ):
            damage.append("context is not an object of strings")
            context = {}
        return cls(
            event_type=event_type,
            id=str(fields.get("id", "")),
            error=str(fields.get("error", "")),
            attempts=attempt,
            died_at=died_at_from_ms(died_at_ms),
            payload=payload if isinstance(payload, str) else None,
            context=context or {},
            raw=readable_text(raw),
            damage="; ".join(damage) or None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.event_type,
            "id": self.id,
            "error": self.error,
            "attempts": self.attempts,
            "died_at": self.died_at.isoformat(),
            "payload": self.payload,
            "context": self.context,
            "raw": self.raw,
            "damage": self.damage,
        }


async def newest_dead_letters(queue: TypeQueue, limit: int) -> list[DeadLetterRecord]:
    """The newest `limit` dead letters of a type, over all its partitions."""
    if limit < 1:
        return []
    entries: list[DeadLetterEntry] = []
    for store in queue.stores:
        entries += await store.dead_letter_entries(limit)
    entries.sort(key=lambda entry: entry.died_at_ms, reverse=True)
    return [
        DeadLetterRecord.parse(queue.event_type, entry.stored, entry.died_at_ms)
        for entry in entries[:limit]
    ]


async def read_dead_letters(
    queue: TypeQueue, event_class: type[Event], serializer: Serializer, limit: int
) -> list[DeadLetter]:
    """The newest `limit` dead letters, each decoded into an event where the payload allows."""
    letters = []
    for record in await newest_dead_letters(queue, limit):
        event = None
        if record.payload is not None:
            # An undecodable payload is why many dead letters died; `error` says so.
            with contextlib.suppress(PayloadDecodeError):
                event = serializer.decode(event_class, record.id, record.payload)
        letters.append(
            DeadLetter(
                id=record.id,
                event_type=record.event_type,
                payload=record.payload,
                event=event,
                context=record.context,
                error=record.error,
                attempts=record.attempts,
                died_at=record.died_at,
                raw=record.raw,
            )
        )
    return letters
