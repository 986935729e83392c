"""`POST /events`: a JSON request validated into exactly what the library's enqueue writes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import orjson

from aioqueue._model.config import Durability
from aioqueue._model.errors import InvalidEnqueueError
from aioqueue._model.event import _WIRE_NAME
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import DueTime, context_json, enqueue_steps
from aioqueue._transport.client import RedisClient
from aioqueue._transport.steps import run_steps
from aioqueue._wire.registry import resolve_layout

__all__ = ["EnqueueRequest", "RequestError", "enqueue"]

_FIELDS = {"type", "id", "delay", "at", "payload", "context", "replace", "allow_undeclared"}
# orjson.dumps refuses to encode deeper nesting than this.
MAX_PAYLOAD_DEPTH = 254


class RequestError(ValueError):
    """The request body does not describe an event; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    event_type: str
    item: EnqueueItem
    replace: bool
    payload: dict[str, Any]
    """The payload as decoded, for the check against the type's published schema."""
    allow_undeclared: bool = False
    """Written even if no service declared the type yet (its consumers deploy later)."""

    @classmethod
    def parse(cls, body: Any) -> EnqueueRequest:
        """Validates a decoded JSON body; raises RequestError."""
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        unknown = sorted(set(body) - _FIELDS)
        if unknown:
            raise RequestError(f"unknown fields {unknown}; allowed: {sorted(_FIELDS)}")
        event_type = body.get("type")
        if not isinstance(event_type, str) or not _WIRE_NAME.fullmatch(event_type):
            raise RequestError(
                "type must be an event type's wire name: 1-128 letters, digits, '_', '.' or '-'"
            )
        event_id = body.get("id")
        if not isinstance(event_id, str) or not event_id:
            raise RequestError("id must be a non-empty string")
        payload = body.get("payload", {})
        if not isinstance(payload, dict):
            raise RequestError("payload must be a JSON object of the event's fields")
        if "id" in payload:
            raise RequestError("payload must not contain id: the id goes beside it")
        replace = body.get("replace", False)
        if not isinstance(replace, bool):
            raise RequestError("replace must be true or false")
        allow_undeclared = body.get("allow_undeclared", False)
        if not isinstance(allow_undeclared, bool):
            raise RequestError("allow_undeclared must be true or false")
        try:
            due = DueTime.of(_delay(body.get("delay")), _at(body.get("at")))
            context = context_json(_context(body.get("context")))
        except InvalidEnqueueError as exc:
            raise RequestError(str(exc)) from exc
        # The library's serializer writes the fields with orjson too, so the envelope is
        # exactly the one an EventService would have written for these fields.
        item = EnqueueItem(
            id=event_id,
            payload=_payload_json(payload),
            context_json=context,
            due_ms=due.milliseconds,
            absolute=due.absolute,
        )
        return cls(
            event_type=event_type,
            item=item,
            replace=replace,
            payload=payload,
            allow_undeclared=allow_undeclared,
        )


def _delay(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError("delay must be a number of seconds")
    return float(value)


def _at(value: Any) -> datetime | None:
    """`at`: ISO 8601 with a time zone, or Unix epoch seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return datetime.fromtimestamp(value, timezone.utc)
        except (OverflowError, OSError, ValueError) as exc:
            raise RequestError(
                f"at is out of range: epoch seconds must fall in the years 1 to 9999, got {value}"
            ) from exc
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise RequestError(f"at is not an ISO 8601 time: {value!r}") from exc
        if at.utcoffset() is None:
            raise RequestError("at must include a time zone, e.g. 2026-01-01T12:00:00Z")
        return at
    raise RequestError("at must be an ISO 8601 time with a time zone, or epoch seconds")


def _payload_json(payload: dict[str, Any]) -> str:
    try:
        return orjson.dumps(payload).decode()
    except orjson.JSONEncodeError as exc:
        # Whatever orjson.loads produced encodes again, except nesting past orjson.dumps'
        # limit (the payload object itself being the first level).
        raise RequestError(
            f"payload is nested too deeply: at most {MAX_PAYLOAD_DEPTH} levels of objects "
            f"and arrays ({exc})"
        ) from exc


def _context(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise RequestError("context must be an object whose values are strings")
    return value


async def enqueue(
    client: RedisClient,
    prefix: str,
    request: EnqueueRequest,
    durability: Durability | None = None,
) -> bool:
    """Runs the library's enqueue script for the request; False when a pending event with
    that id was kept. A type nobody recorded yet (the caller checked that it may be
    written) is recorded unpartitioned. With `durability`, returns once the replicas
    confirmed it (else DurabilityError)."""
    # The registry's count, whatever it is: the HTTP API has no count of its own.
    layout = await resolve_layout(client, prefix, request.event_type, None)
    steps = enqueue_steps(
        client,
        layout.keys_for(request.item.id),
        request.event_type,
        [request.item],
        mode=WriteMode(replace=request.replace),
        durability=durability,
    )
    [scheduled] = await run_steps(client, steps)
    return scheduled
