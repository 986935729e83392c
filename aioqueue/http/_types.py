"""Event types and their published schemas over HTTP: `GET /types`, `GET /types/{type}`, and
the check `POST /events` runs on a payload before writing it."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import jsonschema
import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._engine.client import RedisClient
from aioqueue._engine.recovery import logger
from aioqueue._engine.registry import read_registry
from aioqueue._engine.schemas import PublishedSchema, read_schema, read_schemas, schema_fields

__all__ = ["PayloadMismatch", "SchemaChecks", "type_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]
# Compiled validators kept at once; a schema changes with a deploy, so a handful is plenty.
MAX_COMPILED = 256


class _Connected(Protocol):
    client: RedisClient
    prefix: str


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


def type_routes(state: _Connected, api: Callable[[Endpoint], Endpoint]) -> list[Route]:
    """`GET /types` (every type: partitions, published schema, fields) and `GET
    /types/{type}`, each wrapped by `api`."""

    async def listing(request: Request) -> Response:
        registry = await read_registry(state.client, state.prefix)
        schemas, problems = await read_schemas(state.client, state.prefix)
        partitions = {layout.event_type: layout.partitions for layout in registry.layouts}
        names = sorted(set(partitions) | set(schemas))
        types = [_described(name, partitions.get(name), schemas.get(name)) for name in names]
        return JSONResponse({"types": types, "problems": registry.problems + problems})

    async def one(request: Request) -> Response:
        event_type = request.path_params["type"]
        published = await read_schema(state.client, state.prefix, event_type)
        if published is None:
            return JSONResponse(
                {"error": f"no schema is published for {event_type}"}, status_code=404
            )
        return JSONResponse(_described(event_type, None, published))

    return [
        Route("/types", api(listing), methods=["GET"]),
        Route("/types/{type}", api(one), methods=["GET"]),
    ]


def _described(
    event_type: str, partitions: int | None, published: PublishedSchema | None
) -> dict[str, Any]:
    described: dict[str, Any] = {"type": event_type}
    if partitions is not None:
        described["partitions"] = partitions
    if published is None:
        return {**described, "schema": None, "fields": []}
    fields = [
        {"name": f.name, "type": f.type, "required": f.required, "default": f.default}
        for f in schema_fields(published.schema)
    ]
    return {**described, **published.to_json(), "fields": fields}
