"""What a producer writes: enqueue, cancel and reschedule, validated and built in one place.

Every producer goes through here: the asyncio EventService, the blocking SyncProducer, the
HTTP API and the Spark writers. Arguments are checked the same way (`DueTime`, `max_wait_ms`,
`context_json`, `event_item`), and each script call is built by one function and run as
steps (see steps.py) on whichever client the producer has, so no producer can write an
envelope or a script argument another would not (an enqueue's calls are built by
enqueue_calls.py). Given a `Durability`, the enqueue steps return only once replicas
confirmed the write (see durability.py), whichever producer runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

import orjson

from aioqueue._model.config import Durability
from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import (
    InvalidEnqueueError,
    InvalidEventError,
    PayloadDecodeError,
    PayloadTooLargeError,
)
from aioqueue._model.event import Event
from aioqueue._model.serializer import Serializer
from aioqueue._producing.enqueue_calls import (
    EnqueueCall,
    EnqueueItem,
    WriteMode,
    enqueue_calls_steps,
    scheduled_flags,
)
from aioqueue._transport.client import RedisClient
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue._wire.scripts import ENQUEUE, LuaScript

__all__ = [
    "CHUNK_SIZE",
    "MAX_DELAY",
    "DueTime",
    "MoveResult",
    "RunNowResult",
    "cancel",
    "cancel_steps",
    "context_json",
    "enqueue_items",
    "enqueue_many_steps",
    "enqueue_steps",
    "event_item",
    "max_wait_ms",
    "queue_enqueue_steps",
    "reschedule",
    "reschedule_steps",
    "run_now",
]

CANCEL = LuaScript("cancel")
RESCHEDULE = LuaScript("reschedule")

MAX_DELAY = timedelta(days=36525)
"""The furthest ahead an event may be due: 100 years. A later due time is far more likely a
unit mistake (milliseconds given as seconds) than a plan, and an event never due would sit in
Redis forever; refusing it also keeps every score an exact integer of milliseconds."""
_MAX_DELAY_SECONDS = MAX_DELAY.total_seconds()

MoveResult = Literal["moved", "missing", "in_flight"]
RunNowResult = Literal["due", "missing", "in_flight"]

CHUNK_SIZE = 500
"""Events per enqueue script call: large enough to amortise the round trip, small enough that
one call never blocks the server for more than about a millisecond."""
CALLS_PER_PIPELINE = 16
"""Enqueue script calls per round trip in enqueue_many_steps: 8,000 events at most, so one
huge enqueue_many never piles up a pipeline's worth of replies without bound."""


@dataclass(frozen=True, slots=True)
class DueTime:
    """When an event is due: a delay on the server's clock, or an absolute time."""

    milliseconds: int
    absolute: bool
    due_in: float
    """Roughly how many seconds from now (a local hint for waking the dispatcher)."""

    @classmethod
    def of(cls, delay: Duration | None, at: datetime | None) -> DueTime:
        # The usual call, a delay in seconds, checked in one comparison: NaN, infinity and
        # out-of-range values fail it and get their errors below.
        if (
            at is None
            and (type(delay) is float or type(delay) is int)
            and 0 <= delay <= _MAX_DELAY_SECONDS
        ):
            return cls(round(delay * 1000), absolute=False, due_in=float(delay))
        if (delay is None) == (at is None):
            raise InvalidEnqueueError("give exactly one of delay and at=")
        if at is not None:
            if not isinstance(at, datetime) or at.utcoffset() is None:
                raise InvalidEnqueueError(f"at= must be a timezone-aware datetime, got {at!r}")
            ahead = at - datetime.now(timezone.utc)
            if ahead > MAX_DELAY:
                raise InvalidEnqueueError(
                    f"at= must be at most 100 years ahead ({MAX_DELAY.days} days), got {at}"
                )
            return cls(round(at.timestamp() * 1000), absolute=True, due_in=ahead.total_seconds())
        assert delay is not None
        try:
            seconds = to_seconds(delay, "delay")
        except (TypeError, ValueError) as exc:
            raise InvalidEnqueueError(str(exc)) from exc
        if seconds < 0:
            raise InvalidEnqueueError(f"delay must be >= 0, got {delay!r}; use at= for a past time")
        if seconds > _MAX_DELAY_SECONDS:
            raise InvalidEnqueueError(
                f"delay must be at most 100 years ({_MAX_DELAY_SECONDS:.0f} s), got {delay!r}"
            )
        return cls(round(seconds * 1000), absolute=False, due_in=seconds)


def max_wait_ms(max_wait: Duration | None, *, replace: bool) -> int | None:
    """The debounce bound in ms; max_wait only means something for a replacing enqueue."""
    if max_wait is None:
        return None
    if not replace:
        raise InvalidEnqueueError(
            "max_wait bounds a debounce: it needs replace=True (each enqueue replaces the "
            "pending version, and none pushes it past the first enqueue plus max_wait)"
        )
    try:
        seconds = to_seconds(max_wait, "max_wait")
    except (TypeError, ValueError) as exc:
        raise InvalidEnqueueError(str(exc)) from exc
    if not 0 <= seconds <= _MAX_DELAY_SECONDS:
        raise InvalidEnqueueError(f"max_wait must be between 0 and 100 years, got {max_wait!r}")
    return round(seconds * 1000)


def context_json(context: Mapping[str, str] | None) -> str:
    """The context as the JSON object the envelope stores; it must map strings to strings."""
    if not context:
        return "{}"
    if not isinstance(context, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in context.items()
    ):
        raise InvalidEnqueueError(f"context must map strings to strings, got {context!r}")
    return orjson.dumps(dict(context)).decode()


def event_item(
    serializer: Serializer, max_payload_bytes: int, event: Event, due: DueTime, context: str
) -> EnqueueItem:
    """Validates and encodes one event.

    The payload is read back by the very decoder a consumer uses before anything is
    written, so a value that does not fit the class (a str in an int field, a float that is
    NaN) is an InvalidEventError here, never a dead letter at delivery.
    """
    event_id = getattr(event, "id", None)
    if not isinstance(event_id, str) or not event_id:
        raise InvalidEnqueueError(
            f"{type(event).__qualname__}.id must be a non-empty string, got {event_id!r}"
        )
    payload = serializer.encode(event)
    size = len(payload.encode()) + len(context.encode())
    if size > max_payload_bytes:
        raise PayloadTooLargeError(
            f"{type(event).__qualname__} {event_id!r} is {size} bytes of payload and "
            f"context, more than max_payload_bytes={max_payload_bytes}"
        )
    try:
        serializer.decode(type(event), event_id, payload)
    except PayloadDecodeError as exc:
        raise InvalidEventError(
            f"{type(event).__qualname__} {event_id!r} does not fit its class, so its "
            f"handler could never decode it: {exc}"
        ) from exc
    return EnqueueItem(event_id, payload, context, due.milliseconds, due.absolute)


def enqueue_steps(
    client: object,
    keys: QueueKeys,
    event_type: str,
    items: Sequence[EnqueueItem],
    *,
    mode: WriteMode,
    durability: Durability | None = None,
) -> Steps[list[bool]]:
    """Schedules `items` in one script call; False for each id that was kept pending.

    With `durability`, returns only once the write (a kept event's included) is confirmed;
    raises DurabilityError otherwise."""
    call = EnqueueCall(keys, event_type, items, mode)
    if durability is None:
        return scheduled_flags((yield from ENQUEUE.steps(client, *call.script_call())))
    [scheduled] = yield from enqueue_calls_steps(client, [call], durability=durability)
    return scheduled


def queue_enqueue_steps(
    client: object,
    layout: QueueLayout,
    items: Sequence[EnqueueItem],
    *,
    mode: WriteMode,
    durability: Durability | None = None,
) -> Steps[list[bool]]:
    """Schedules `items` into one queue: one script call where it has one partition (and
    they fit in one), else a call per partition and chunk, pipelined. False for each id that
    was kept pending."""
    all_keys = layout.all_keys
    if len(all_keys) == 1 and len(items) <= CHUNK_SIZE:
        return enqueue_steps(
            client, all_keys[0], layout.event_type, items, mode=mode, durability=durability
        )
    writes = [(layout.keys_for(item.id), layout.event_type, item) for item in items]
    return enqueue_many_steps(client, writes, mode=mode, durability=durability)


def enqueue_many_steps(
    client: object,
    writes: Sequence[tuple[QueueKeys, str, EnqueueItem]],
    *,
    mode: WriteMode,
    durability: Durability | None = None,
) -> Steps[list[bool]]:
    """Schedules each item into the queue (keys, event type) it names (a plain tuple each:
    one is made per event, and a named one costs several times as much), grouped per queue
    (partition), CHUNK_SIZE items per script call, the calls pipelined (see
    LuaScript.pipelined_steps: one round trip on a single server, one per node on a cluster).
    Returns, per item in order, whether it was scheduled; with `durability`, once each round
    trip's calls are confirmed (one WAIT per connection of it, not per call or item)."""
    by_queue: dict[tuple[QueueKeys, str], list[int]] = {}
    items: list[EnqueueItem] = []
    for index, (keys, event_type, item) in enumerate(writes):
        by_queue.setdefault((keys, event_type), []).append(index)
        items.append(item)
    chunks = [
        (keys, event_type, indices[start : start + CHUNK_SIZE])
        for (keys, event_type), indices in by_queue.items()
        for start in range(0, len(indices), CHUNK_SIZE)
    ]
    if len(chunks) == 1:  # the usual batch: one call, no pipeline around it
        keys, event_type, _ = chunks[0]
        return (
            yield from enqueue_steps(
                client, keys, event_type, items, mode=mode, durability=durability
            )
        )
    results = [False] * len(writes)
    for first in range(0, len(chunks), CALLS_PER_PIPELINE):
        batch = chunks[first : first + CALLS_PER_PIPELINE]
        calls = [
            EnqueueCall(keys, event_type, [items[index] for index in chunk], mode)
            for keys, event_type, chunk in batch
        ]
        replies = yield from enqueue_calls_steps(client, calls, durability=durability)
        for (_, _, chunk), flags in zip(batch, replies, strict=True):
            for index, scheduled in zip(chunk, flags, strict=True):
                results[index] = scheduled
    return results


async def enqueue_items(
    client: RedisClient,
    keys: QueueKeys,
    event_type: str,
    items: Sequence[EnqueueItem],
    *,
    mode: WriteMode,
) -> list[bool]:
    """Schedules `items` of one queue in one script call; False for each id that was kept
    pending."""
    return await run_steps(client, enqueue_steps(client, keys, event_type, items, mode=mode))


async def cancel(client: RedisClient, keys: QueueKeys, event_id: str) -> bool:
    """Removes a pending event (cancel.lua); False if none with that id was pending."""
    return await run_steps(client, cancel_steps(client, keys, event_id))


def cancel_steps(client: object, keys: QueueKeys, event_id: str) -> Steps[bool]:
    """Removes a pending event; False when none with that id was pending."""
    script_keys = [keys.schedule, keys.events, *keys.settling]
    return int((yield from CANCEL.steps(client, script_keys, [event_id]))) == 1


def reschedule_steps(
    client: object, layout: QueueLayout, event_id: str, due: DueTime
) -> Steps[MoveResult]:
    """Moves a pending event to `due`, keeping payload, context and attempt count (see
    reschedule.lua)."""
    keys = layout.keys_for(event_id)
    reply = yield from RESCHEDULE.steps(
        client,
        [keys.schedule, keys.events, keys.wake, keys.counts],
        [event_id, "at" if due.absolute else "delay", due.milliseconds],
    )
    result = text(reply)
    if result not in ("moved", "missing", "in_flight"):
        raise RuntimeError(f"reschedule.lua returned {result!r}")
    return result  # type: ignore[return-value]


# A delay of 0: due at the server's now.
_NOW = DueTime(0, absolute=False, due_in=0.0)


async def run_now(client: RedisClient, layout: QueueLayout, event_id: str) -> RunNowResult:
    """Makes a pending event due now, keeping its attempt count (see reschedule.lua)."""
    result = await reschedule(client, layout, event_id, _NOW)
    return "due" if result == "moved" else result


async def reschedule(
    client: RedisClient, layout: QueueLayout, event_id: str, due: DueTime
) -> MoveResult:
    """Moves a pending event to `due`, keeping payload, context and attempt count (see
    reschedule.lua)."""
    return await run_steps(client, reschedule_steps(client, layout, event_id, due))
