"""Envelopes: the JSON object stored per event, and the dead letters built from them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any

import msgspec
import orjson
from msgspec import UNSET, UnsetType

from aioqueue._model.event import Event
from aioqueue._transport.client import text

__all__ = [
    "DeadLetter",
    "Envelope",
    "EnvelopeError",
    "iso_or_none",
    "json_object",
    "stored_payload",
    "stored_version",
    "text",
]


class EnvelopeError(ValueError):
    """Raw bytes that are not an aioqueue envelope."""


def stored_payload(fields: dict[str, Any]) -> Any:
    """An envelope's payload: written under `p`, read under `payload` too (envelopes written
    before the short keys; see payload_of in lua/_prelude.lua)."""
    return fields["p"] if "p" in fields else fields.get("payload")


def stored_version(fields: dict[str, Any]) -> Any:
    """An envelope's version: written under `v`, read under `version` too."""
    return fields["v"] if "v" in fields else fields.get("version")


# An integer that orjson reads as one (it reads those beyond 64 bits as floats, which int()
# then rounds): the typed step below takes only these, so that it reads what the general
# reading does. msgspec bounds an int within int64.
_JsonInt = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Delivered(msgspec.Struct, gc=False):
    """The fields of an envelope as aioqueue's scripts write them, typed, for msgspec to read
    in one step: with the short keys (`p`, `v`), integer numbers, a context of strings."""

    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    p: str | UnsetType = UNSET
    v: _JsonInt | UnsetType = UNSET
    context: dict[str, str] | None = None
    attempt: _JsonInt = 0
    due_at: _JsonInt | None = None


_DELIVERED = msgspec.json.Decoder(_Delivered)


class Envelope(msgspec.Struct, gc=False):
    """One delivery of an event, as the dispatcher pushed it (see docs/wire-format.md).

    A msgspec Struct the garbage collector does not track (gc=False): one is made per
    delivery and a batch holds hundreds, and an envelope refers to text, integers and a dict
    of text only, so it can be part of no reference cycle."""

    id: str
    event_type: str
    payload: str
    context: dict[str, str]
    attempt: int
    version: int
    due_at: int
    """Due time of this attempt, ms on the server clock."""

    @classmethod
    def parse(cls, raw: bytes | str, *, event_type: str, event_id: str | None = None) -> Envelope:
        """Parses a delivery from the queue of `event_type`; pass `event_id` (the hash field)
        to parse a stored envelope, which leaves its id out.

        Envelopes written by aioqueue leave the type out too (the key says it); one that
        states a type keeps it, so a mismatch can be caught.

        An envelope as the scripts write it is read by msgspec in one typed step (about a
        third of the time of a decode and the checks after it); anything else (the long keys of
        older envelopes, a float where an integer belongs, a malformed envelope) by the
        general reading, which accepts and refuses exactly what it did before.
        """
        try:
            fields = _DELIVERED.decode(raw)
        except msgspec.DecodeError:  # ValidationError included
            return cls._parse_any(raw, event_type=event_type, event_id=event_id)
        delivered_id = event_id if fields.id is UNSET else fields.id
        if fields.p is UNSET or fields.v is UNSET or delivered_id is None:
            return cls._parse_any(raw, event_type=event_type, event_id=event_id)
        return cls(
            delivered_id,
            event_type if fields.type is UNSET else fields.type,
            fields.p,
            fields.context or {},
            fields.attempt,
            fields.v,
            fields.due_at or 0,
        )

    @classmethod
    def _parse_any(
        cls, raw: bytes | str, *, event_type: str, event_id: str | None = None
    ) -> Envelope:
        """parse() for any text: every field read and checked on its own."""
        fields = _load(raw)
        try:
            return cls(
                id=_str(fields.get("id", event_id), "id"),
                event_type=_str(fields.get("type", event_type), "type"),
                payload=_str(stored_payload(fields), "payload"),
                context=_context(fields),
                attempt=int(fields.get("attempt", 0)),  # left out while 0
                version=int(stored_version(fields)),
                due_at=int(fields.get("due_at") or 0),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvelopeError(f"envelope field missing or malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event that will not be retried, with why."""

    id: str
    event_type: str
    payload: str | None
    """The event's JSON payload, or None when even the envelope was unreadable."""
    event: Event | None
    """The decoded event, or None when the payload does not decode (see `error`)."""
    context: dict[str, str]
    error: str
    """The last error, as text."""
    attempts: int
    """How many times the event was handed to a handler."""
    died_at: datetime
    raw: str
    """The stored envelope as it is in Redis."""


def readable_text(value: bytes | str) -> str:
    """Text for people: bytes that are not UTF-8 (a dead letter can hold anything a producer
    wrote) are shown as backslash escapes instead of failing the whole listing."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def parse_dead_letter_fields(raw: bytes | str) -> dict[str, Any]:
    """The fields of a stored dead letter; unreadable ones become {'raw': ...}."""
    # U+FFFD for undecodable bytes keeps the JSON itself parseable (a backslash escape
    # would not be valid JSON), so the id and error still come through.
    parseable = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    try:
        return _load(parseable)
    except EnvelopeError:
        return {"raw": readable_text(raw)}


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def died_at_from_ms(milliseconds: float) -> datetime:
    """A time stored in ms (a score or a field) as an aware datetime; one that is no time
    (inf, NaN, out of datetime's range: written by hand) is read as the epoch, so that a
    listing still shows the record (see time_problem for the note that goes with it)."""
    try:
        return datetime.fromtimestamp(milliseconds / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return EPOCH


def iso_or_none(moment: datetime | None) -> str | None:
    """A time as the JSON of the CLI and the HTTP API shows it: ISO 8601 text, or None."""
    return moment.isoformat() if moment else None


def time_problem(milliseconds: float) -> str | None:
    """Why `milliseconds` is no time died_at_from_ms can show, or None."""
    return "no time" if died_at_from_ms(milliseconds) is EPOCH and milliseconds != 0 else None


def json_object(raw: bytes | str) -> dict[str, Any]:
    """`raw` read as a JSON object, else ValueError saying what it is not (every entry this
    package stores in Redis is one: envelopes, schema entries)."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise ValueError("not a JSON object")
    return fields


def _load(raw: bytes | str) -> dict[str, Any]:
    try:
        return json_object(raw)
    except ValueError as exc:
        raise EnvelopeError(f"envelope is {exc}") from exc


def _str(value: object, name: str) -> str:
    # Runs several times per delivered event: `type() is` rather than isinstance, since JSON
    # gives plain str only.
    if type(value) is not str:
        raise TypeError(f"{name} must be a string")
    return value


def _context(fields: dict[str, Any]) -> dict[str, str]:
    # Lua's cjson writes an empty table as {} (an object), so an empty context round-trips.
    context = fields.get("context")
    if not context:
        return {}
    if type(context) is not dict or any(type(value) is not str for value in context.values()):
        raise TypeError("context must be an object of strings")
    return context
