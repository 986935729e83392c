"""What a handler can know of the delivery it is handling: `current_delivery()`."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Protocol

from .errors import OutsideHandlerError

__all__ = [
    "Delivery",
    "DeliverySource",
    "current_deliveries",
    "current_delivery",
    "delivery_under_way",
]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of an event to its handler (see `current_delivery()`)."""

    type: str
    """The event type's wire name."""
    id: str
    attempt: int
    """Which attempt this is: 1 for the first, `max_attempts` for the last."""
    max_attempts: int
    """The service's `retry_attempts`: after a failure of this attempt, the dead letters."""
    due_at: datetime
    """When this attempt was due, on the Redis server's clock (aware, UTC). A retry's is the
    end of its backoff; an attempt given back by a stopping worker keeps its original one."""
    claimed_at: datetime
    """When this service took the attempt for its handler (the claim), on the Redis server's
    clock (aware, UTC): the hand-out a rate limit counts, and the moment the attempt was
    spent. `claimed_at - due_at` is how long the event waited for a free handler slot (what
    the metrics report as lateness)."""
    lateness: timedelta
    """How long after `due_at` the handler started."""
    context: Mapping[str, str]
    """The context given at enqueue time (what `event_context` holds in a handler of one
    event; in a batch handler, each event's own is here)."""

    @property
    def is_last_attempt(self) -> bool:
        """Whether a failure of this attempt moves the event to the dead letters."""
        return self.attempt >= self.max_attempts


# Delivery is frozen, so its generated __init__ sets each field through object.__setattr__:
# 2.3 µs for seven fields, where a batch handler that reads current_deliveries() has one
# built per event. The slots' own descriptors set the same fields in a third of that. Taken from
# the fields themselves, in their order: a field added to Delivery stops the import here.
(
    _set_type,
    _set_id,
    _set_attempt,
    _set_max_attempts,
    _set_due_at,
    _set_claimed_at,
    _set_lateness,
    _set_context,
) = (getattr(Delivery, field.name).__set__ for field in fields(Delivery))


def describe_delivery(
    event_type: str,
    event_id: str,
    attempt: int,
    max_attempts: int,
    due_at: datetime,
    claimed_at: datetime,
    lateness: timedelta,
    context: Mapping[str, str],
) -> Delivery:
    """The Delivery `Delivery(...)` would make of these fields, in a third of its time (see
    the setters above): what a worker builds when a handler asks."""
    delivery: Delivery = object.__new__(Delivery)
    _set_type(delivery, event_type)
    _set_id(delivery, event_id)
    _set_attempt(delivery, attempt)
    _set_max_attempts(delivery, max_attempts)
    _set_due_at(delivery, due_at)
    _set_claimed_at(delivery, claimed_at)
    _set_lateness(delivery, lateness)
    _set_context(delivery, context)
    return delivery


class DeliverySource(Protocol):
    """What the worker keeps of a handler call anyway, able to describe it on demand: a
    Delivery (two datetimes among its fields) costs more to build than most handlers take,
    and most never ask for it."""

    def delivery(self) -> Delivery:
        """The delivery of a handler of one event; raises OutsideHandlerError in a batch."""
        ...

    def deliveries(self) -> list[Delivery]:
        """Every delivery the call handles, in the order of its events."""
        ...


delivery_under_way: ContextVar[DeliverySource] = ContextVar("aioqueue_delivery")
"""Set by the worker around each handler call, async and sync (threaded) alike."""


def current_delivery() -> Delivery:
    """The delivery the calling handler is handling: its event's type and id, the attempt
    (and how many there may be), when it was due, when this service claimed it and how late
    the handler started.

    Call it from inside a handler, async or sync (a plain function on a worker thread), or
    from anything the handler calls; elsewhere it raises OutsideHandlerError. Typical uses:
    an idempotency key of `f"{d.type}:{d.id}"`, a fallback on `d.is_last_attempt`, a
    lateness log.
    """
    try:
        source = delivery_under_way.get()
    except LookupError:
        raise OutsideHandlerError(
            "current_delivery() is only available while a handler runs (in the handler, or "
            "in code it calls); no delivery is under way here"
        ) from None
    return source.delivery()


def current_deliveries() -> list[Delivery]:
    """The deliveries the calling handler is handling: in a batch handler one per event, in
    the order of the list it was given; in a handler of one event, that one. Elsewhere it
    raises OutsideHandlerError."""
    try:
        source = delivery_under_way.get()
    except LookupError:
        raise OutsideHandlerError(
            "current_deliveries() is only available while a handler runs (in the handler, "
            "or in code it calls); no delivery is under way here"
        ) from None
    return source.deliveries()
