"""The event classes of aioqueue's scenarios, and the event each variant enqueues.

`BenchEvent(id, index)` is the minimal event every scenario uses. `--variant serial_keys`
makes events of a serial-key type spread over DISTINCT_KEYS key values, and `--variant
realistic` events written the way applications write theirs: several fields of several types
(a Decimal amount, an aware datetime, a list), optional ones set on some events and left out
on others. Every event's id is `e-<index>`, which is how a handler of any shape tells the
scenario which event it saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

from aioqueue import Event

SERIAL_KEYS = "serial_keys"
DISTINCT_KEYS = 1000
REALISTIC = "realistic"
KINDS = ("signup", "renewal", "refund", "invoice")
ID_PREFIX = "e-"


@dataclass
class BenchEvent(Event):
    id: str
    index: int


@dataclass
class KeyedBenchEvent(BenchEvent):
    """A BenchEvent type of its own whose events run one at a time per `key`."""

    __serial_key__ = "key"
    key: int = 0


@dataclass
class RealisticEvent(Event):
    """An event as people write them: ids, a money amount, a timestamp, tags, optional notes."""

    id: str
    user_id: int
    kind: str
    amount: Decimal
    created: datetime
    tags: list[str]
    note: str | None = None
    due: float | None = None


def event_class(variant: str) -> type[Event]:
    """The class whose events `variant` enqueues and handles."""
    if variant == SERIAL_KEYS:
        return KeyedBenchEvent
    if variant == REALISTIC:
        return RealisticEvent
    return BenchEvent


def make_event(index: int, variant: str) -> Event:
    """Event number `index` of the class `variant` uses."""
    event_id = f"{ID_PREFIX}{index}"
    if variant == SERIAL_KEYS:
        return KeyedBenchEvent(id=event_id, index=index, key=index % DISTINCT_KEYS)
    if variant == REALISTIC:
        return RealisticEvent(
            id=event_id,
            user_id=100_000 + index % 7919,
            kind=KINDS[index % len(KINDS)],
            amount=Decimal(index % 10_000) / 100,
            created=datetime.now(timezone.utc),
            tags=["web", "eu"] if index % 2 else ["api"],
            note="first order" if index % 3 == 0 else None,
        )
    return BenchEvent(id=event_id, index=index)


def index_of(event: Event) -> int:
    """The number of an event made by make_event."""
    return int(event.id.removeprefix(ID_PREFIX))
