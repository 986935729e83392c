"""The check `POST /events` runs on a payload against its type's published JSON Schema."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import jsonschema
import msgspec

from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._wire.schemas import PublishedSchema, read_schema

__all__ = ["PayloadMismatch", "SchemaChecks"]

# Compiled validators kept at once; a schema changes with a deploy, so a handful is plenty.
MAX_COMPILED = 256


class PayloadMismatch(ValueError):
    """A payload that does not fit its type's published schema; `errors` has one
    {"path", "reason"} per problem found."""

    def __init__(self, event_type: str, errors: list[dict[str, str]]) -> None:
        first = errors[0]
        super().__init__(
            f"payload does not fit the published schema of {event_type}: "
            f"{first['path']}: {first['reason']}"
        )
        self.errors = errors


def _decodes_as(kind: type) -> Callable[[object], bool]:
    """A format check that agrees with the decoder: a string in this format is what msgspec
    turns into `kind` (JSON Schema's own `duration`, for one, refuses "PT3.5S")."""

    def check(value: object) -> bool:
        if not isinstance(value, str):
            return True  # formats constrain strings only
        try:
            msgspec.convert(value, kind)
        except msgspec.ValidationError:
            return False
        return True

    return check


FORMATS = jsonschema.FormatChecker(formats=())
for _name, _kind in {
    "date-time": dt.datetime,
    "date": dt.date,
    "time": dt.time,
    "duration": dt.timedelta,
    "uuid": uuid.UUID,
    "decimal": decimal.Decimal,
}.items():
    FORMATS.checks(_name)(_decodes_as(_kind))


class SchemaChecks:
    """Validates payloads against their type's published schema; each schema version (by
    digest) is checked and compiled once. Why jsonschema: msgspec and pydantic write JSON
    Schema 2020-12 (`prefixItems` for tuples, `$defs`), which fastjsonschema (up to draft 7)
    misreads."""

    def __init__(self) -> None:
        self._compiled: dict[str, jsonschema.protocols.Validator | None] = {}

    async def check(
        self, client: RedisClient, prefix: str, event_type: str, event_id: str, payload: Any
    ) -> str | None:
        """Raises PayloadMismatch when the payload does not fit; returns the digest of the
        schema it was checked against, or None when the type has no usable schema."""
        published = await read_schema(client, prefix, event_type)
        if published is None:
            return None
        validator = self._validator(published)
        if validator is None:
            return None
        errors = sorted(
            validator.iter_errors({**payload, "id": event_id}),
            key=lambda error: [str(part) for part in error.absolute_path],
        )
        if errors:
            raise PayloadMismatch(
                event_type,
                [{"path": error.json_path, "reason": error.message} for error in errors[:20]],
            )
        return published.digest

    def _validator(self, published: PublishedSchema) -> jsonschema.protocols.Validator | None:
        if published.digest in self._compiled:
            return self._compiled[published.digest]
        if len(self._compiled) >= MAX_COMPILED:
            self._compiled.clear()
        try:
            jsonschema.Draft202012Validator.check_schema(published.schema)
            validator: jsonschema.protocols.Validator | None = jsonschema.Draft202012Validator(
                published.schema, format_checker=FORMATS
            )
        except jsonschema.SchemaError as exc:
            logger.warning(
                "the published schema of %s (%s) is no valid JSON Schema, payloads of the "
                "type are not checked: %s",
                published.event_type,
                published.digest,
                exc.message,
            )
            validator = None
        self._compiled[published.digest] = validator
        return validator
