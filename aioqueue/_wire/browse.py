"""Looking into a queue: pending events page by page, one event in full, and run-now.

Read by type name and layout, without the event's class, so the library, the CLI and the
HTTP API share it. Each read is one script call per partition (page.lua, inspect.lua), so
what it shows is one consistent moment of each partition, and a page costs O(log N + page
size) on the server however large the backlog.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from aioqueue._model.errors import InvalidCursorError
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import (
    died_at_from_ms,
    iso_or_none,
    parse_dead_letter_fields,
    readable_text,
    stored_payload,
    text,
)
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue._wire.scripts import LuaScript

__all__ = [
    "MAX_PAGE",
    "EventInfo",
    "EventState",
    "InvalidCursorError",
    "PendingEvent",
    "PendingPage",
    "inspect_event",
    "pending_page",
]

PAGE = LuaScript("page")
INSPECT = LuaScript("inspect")

# Most events one page holds, whatever a caller asks for.
MAX_PAGE = 1000

EventState = Literal["waiting", "due", "ready", "in_flight", "retry_wait", "parked", "dead"]
"""waiting: scheduled for later; due: its time has come, a dispatcher takes it next; ready:
dispatched, its delivery waits in the ready list; in_flight: a handler has it, until its
lease ends; retry_wait: an attempt failed, the retry is scheduled; parked: due, but another
event holds its serial key (it is out of the schedule, so `pending` does not list it, until
that event settles); dead: in the dead letters."""


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """One pending event as a page lists it."""

    id: str
    state: EventState
    due_at: datetime
    """When the event is, or was, due: for an event dispatched, the due time of its attempt."""
    lease_ends_at: datetime | None
    """For a dispatched event, when its next attempt comes if this one never settles."""
    attempt: int
    """Attempts started so far (the one under way included)."""
    payload_bytes: int

    def to_json(self) -> dict[str, Any]:
        """The event as the CLI's `--json` and `GET /events/{type}` show it: times as ISO
        8601 text, `lease_ends_at` None while no attempt is under way."""
        return {
            "id": self.id,
            "state": self.state,
            "due_at": self.due_at.isoformat(),
            "lease_ends_at": iso_or_none(self.lease_ends_at),
            "attempt": self.attempt,
            "payload_bytes": self.payload_bytes,
        }


@dataclass(frozen=True, slots=True)
class PendingPage:
    """Pending events in schedule order, and the cursor of the page after them (None when
    this is the last page). Events are ordered by when the queue acts on them next: a
    dispatched event at its lease end. A page may hold fewer events than asked for, even
    none, and still have a next page: see pending_page."""

    events: list[PendingEvent]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        """The page as `GET /events/{type}` answers it: its events and the cursor of the next
        page (None on the last page of a walk)."""
        return {
            "events": [event.to_json() for event in self.events],
            "next_cursor": self.next_cursor,
        }


@dataclass(frozen=True, slots=True)
class EventInfo:
    """Everything the queue knows of one event, pending or dead."""

    id: str
    event_type: str
    state: EventState
    due_at: datetime | None
    """When it is, or was, due (see PendingEvent.due_at); None for a dead letter."""
    lease_ends_at: datetime | None
    attempt: int
    last_error: str | None
    payload: str | None
    """The payload's JSON text; None when the stored envelope is unreadable."""
    context: dict[str, str]
    died_at: datetime | None = None
    retries_left: int | None = None
    """Attempts still allowed; only the library knows its retry_attempts setting."""

    def to_json(self) -> dict[str, Any]:
        """The event as `aioqueue events show --json` and `GET /events/{type}/{id}` show it:
        times as ISO 8601 text, None where the event has no such time."""

        return {
            "id": self.id,
            "type": self.event_type,
            "state": self.state,
            "due_at": iso_or_none(self.due_at),
            "lease_ends_at": iso_or_none(self.lease_ends_at),
            "attempt": self.attempt,
            "retries_left": self.retries_left,
            "last_error": self.last_error,
            "died_at": iso_or_none(self.died_at),
            "context": self.context,
            "payload": self.payload,
        }


async def pending_page(
    client: RedisClient,
    layout: QueueLayout,
    *,
    limit: int = 50,
    cursor: str | None = None,
    due_before: datetime | None = None,
    due_after: datetime | None = None,
) -> PendingPage:
    """Pending events after `cursor` (or from `due_after` on), in schedule order, due before
    `due_before`. A cursor keeps the `due_before` of the first page.

    The pages of one walk (a first page, then each page's `next_cursor`) list an event at
    most once, however the queue moves meanwhile. An event that stays where it is (pending
    all along, neither dispatched, claimed, retried, rescheduled nor replaced) is listed
    exactly once. One that was written or moved after the walk's first page may be missing
    from the pages after it: the queue moves events to later scores (dispatch to the lease
    end, a failure to the retry), where the walk would meet them a second time (see
    page.lua). A page that meets more than a thousand such events in a row stops short, with
    fewer events than `limit` (even none) and a `next_cursor` past them."""
    limit = max(1, min(MAX_PAGE, limit))
    highest = "" if due_before is None else repr(_ms(due_before))
    partitions = layout.all_keys
    began: list[str] = [""] * len(partitions)
    if cursor is not None:
        score, after_id, cursor_highest, walk = _decode_cursor(cursor)
        highest = highest or cursor_highest
        if walk is not None:
            if len(walk) != len(partitions):
                raise InvalidCursorError(f"not a cursor of this type's pages: {cursor!r}")
            began = walk
    elif due_after is not None:
        score, after_id = repr(_ms(due_after)), ""
    else:
        score, after_id = "-inf", ""
    entries: list[tuple[float, bytes, str, str, Any, int]] = []
    # The least (score, id) up to which a partition examined its events without reaching
    # the end: up to there every partition told what it holds, past it not yet.
    examined_to: tuple[float, bytes, str, str] | None = None
    for index, keys in enumerate(partitions):
        # One more than a page: whether another page exists is then known without a call.
        args: list[str | int] = [score, after_id, highest, limit + 1, began[index]]
        reply = await PAGE.run(client, _page_keys(keys), args)
        now = int(reply[0])
        began[index] = text(reply[1])
        if int(reply[2]) != 1 and reply[3]:
            stop_score, stop_id = text(reply[3]), text(reply[4])
            stop = (float(stop_score), stop_id.encode(), stop_id, stop_score)
            examined_to = stop if examined_to is None else min(examined_to, stop)
        for i in range(5, len(reply), 4):
            member, member_score = text(reply[i]), text(reply[i + 1])
            order = (float(member_score), member.encode())
            entries.append((*order, member, member_score, reply[i + 2], int(reply[i + 3])))
    entries.sort(key=lambda entry: (entry[0], entry[1]))
    if examined_to is not None:
        entries = [entry for entry in entries if (entry[0], entry[1]) <= examined_to[:2]]
    taken = entries[:limit]
    events = [
        _pending_event(member, float(member_score), stored, bool(in_ready), now)
        for _, _, member, member_score, stored, in_ready in taken
    ]
    next_cursor = None
    if len(entries) > limit:
        last = taken[-1]
        next_cursor = _encode_cursor(last[3], last[2], highest, began)
    elif examined_to is not None:
        # Short of a page: events past this point are still to examine.
        next_cursor = _encode_cursor(examined_to[3], examined_to[2], highest, began)
    return PendingPage(events, next_cursor)


async def inspect_event(
    client: RedisClient, layout: QueueLayout, event_id: str
) -> EventInfo | None:
    """The event with this id, pending or dead; None if the queue has neither."""
    keys = layout.keys_for(event_id)
    script_keys = [
        keys.schedule, keys.events, keys.ready, keys.dead_letters, keys.dead_letter_times
    ]  # fmt: skip
    now, stored, score, in_ready, dead, died_at = await INSPECT.run(client, script_keys, [event_id])
    if stored:
        fields = _fields(stored)
        parked_at = fields.get("parked")
        state: EventState
        if score is None and isinstance(parked_at, int):
            state, due_at, lease_ends_at = "parked", died_at_from_ms(parked_at), None
        else:
            state, due_at, lease_ends_at = _state(fields, float(score or 0), bool(in_ready), now)
        return _event_info(event_id, layout, fields, state, due_at, lease_ends_at)
    if dead:
        died = died_at_from_ms(float(died_at or 0))
        return _event_info(event_id, layout, parse_dead_letter_fields(dead), "dead", died_at=died)
    return None


def _page_keys(keys: QueueKeys) -> list[str]:
    return [keys.schedule, keys.events, keys.ready, keys.sequence, keys.counts]


def _pending_event(
    event_id: str, score: float, stored: Any, in_ready: bool, now: int
) -> PendingEvent:
    fields = _fields(stored) if stored else {}
    state, due_at, lease_ends_at = _state(fields, score, in_ready, now)
    payload = stored_payload(fields)
    return PendingEvent(
        id=event_id,
        state=state,
        due_at=due_at,
        lease_ends_at=lease_ends_at,
        attempt=_int(fields.get("attempt")),
        payload_bytes=len(payload.encode()) if isinstance(payload, str) else 0,
    )


def _event_info(
    event_id: str,
    layout: QueueLayout,
    fields: dict[str, Any],
    state: EventState,
    due_at: datetime | None = None,
    lease_ends_at: datetime | None = None,
    *,
    died_at: datetime | None = None,
) -> EventInfo:
    """An event as inspect_event shows it, from its stored (or dead letter's) fields."""
    return EventInfo(
        id=event_id,
        event_type=layout.event_type,
        state=state,
        due_at=due_at,
        lease_ends_at=lease_ends_at,
        attempt=_int(fields.get("attempt")),
        last_error=_str_or_none(fields.get("error")),
        payload=_str_or_none(stored_payload(fields)),
        context=_context(fields),
        died_at=died_at,
    )


def _state(
    fields: dict[str, Any], score: float, in_ready: bool, now: int
) -> tuple[EventState, datetime, datetime | None]:
    """(state, due at, lease end) from the stored envelope and its schedule score."""
    attempt_due = fields.get("due_at")
    if isinstance(attempt_due, int | float) and score > now:
        # Dispatched, and its lease runs: the score is when the next attempt would come.
        state: EventState = "ready" if in_ready else "in_flight"
        return state, died_at_from_ms(attempt_due), died_at_from_ms(score)
    if score <= now:
        return "due", died_at_from_ms(score), None
    state = "retry_wait" if fields.get("error") is not None else "waiting"
    return state, died_at_from_ms(score), None


def _fields(stored: Any) -> dict[str, Any]:
    fields = parse_dead_letter_fields(stored)
    return fields if "raw" not in fields or len(fields) > 1 else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _context(fields: dict[str, Any]) -> dict[str, str]:
    context = fields.get("context")
    if not isinstance(context, dict):
        return {}
    return {str(key): readable_text(str(value)) for key, value in context.items()}


def _ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"give an aware datetime (with a time zone), got {moment!r}")
    return round(moment.timestamp() * 1000)


_WALK_BEGAN = re.compile(r"\d+:\d+:\d*")


def _encode_cursor(score: str, event_id: str, highest: str, began: list[str]) -> str:
    """Opaque, URL-safe: the last listed (score, id), the listing's upper bound, and where
    the walk began in each partition (page.lua)."""
    fields = [score, event_id, highest, began]
    return base64.urlsafe_b64encode(orjson.dumps(fields)).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str, str, list[str] | None]:
    """(score, id, upper bound, where the walk began); a cursor of a release before walks
    has no beginning: its next page begins one."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        fields = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(fields, list) or len(fields) not in (3, 4):
            raise TypeError("not a list of three or four fields")
        score, event_id, highest = fields[:3]
        if not all(isinstance(field, str) for field in (score, event_id, highest)):
            raise TypeError("not three strings")
        if not math.isfinite(float(score)) or not (highest == "" or math.isfinite(float(highest))):
            raise ValueError("not a finite score")
        began = fields[3] if len(fields) == 4 else None
        if began is not None and not (
            isinstance(began, list)
            and all(isinstance(b, str) and _WALK_BEGAN.fullmatch(b) for b in began)
        ):
            raise ValueError("not where a walk began")
    except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
        raise InvalidCursorError(f"not a cursor this API handed out: {cursor!r}") from exc
    return score, event_id, highest, began
