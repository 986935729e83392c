"""Published schemas: the JSON Schema of each event type's payload, beside the type registry.

Every service that enqueues a type or handles it publishes the schema its event class
implies, so producers without the class (the HTTP API, Spark, other languages) can check a
payload before writing it. The newest publication wins: during a deploy the services of the
new version overwrite the old schema, and a service that finds another schema than its own
logs both once.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.envelope import json_object, readable_text, text

__all__ = [
    "PublishedSchema",
    "PublishedSchemas",
    "SchemaField",
    "publish_schema",
    "publish_schema_steps",
    "read_schema",
    "read_schema_steps",
    "read_schemas",
    "resolved",
    "schema_fields",
    "schemas_key",
]


def schemas_key(prefix: str) -> str:
    """hash: event type wire name -> {"schema": ..., "digest": ..., "published_at": ms}."""
    return f"{prefix}:schemas"


@dataclass(frozen=True, slots=True)
class PublishedSchema:
    """A type's published payload schema; `published_at` is the publisher's clock, in ms."""

    event_type: str
    schema: dict[str, Any]
    digest: str
    published_at: int

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "digest": self.digest, "published_at": self.published_at}

    @classmethod
    def parse(cls, event_type: str, raw: bytes | str) -> PublishedSchema:
        """Raises ValueError for an entry that is not one this module wrote."""
        entry = json_object(raw)
        schema, digest, at = entry.get("schema"), entry.get("digest"), entry.get("published_at")
        if not isinstance(schema, dict) or not isinstance(digest, str):
            raise ValueError("needs an object 'schema' and a string 'digest'")
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise ValueError("needs a number 'published_at'")
        return cls(event_type, schema, digest, int(at))


def schema_digest(schema: dict[str, Any]) -> str:
    """Equal schemas get equal digests, whatever their key order."""
    return hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


async def publish_schema(
    client: RedisClient, prefix: str, event_type: str, schema: dict[str, Any]
) -> PublishedSchema:
    """Publishes `schema` for the type (see publish_schema_steps)."""
    return await run_steps(client, publish_schema_steps(prefix, event_type, schema))


def publish_schema_steps(
    prefix: str, event_type: str, schema: dict[str, Any]
) -> Steps[PublishedSchema]:
    """Publishes `schema` for the type unless it is the published one already; logs a
    warning with both versions when it replaces another. Returns what is published now."""
    digest = schema_digest(schema)
    key = schemas_key(prefix)
    current = _usable(event_type, (yield ("HGET", key, event_type)))
    if current is not None and current.digest == digest:
        return current
    published = PublishedSchema(event_type, schema, digest, int(time.time() * 1000))
    yield ("HSET", key, event_type, orjson.dumps(published.to_json()))
    if current is not None:
        logger.warning(
            "the schema of %s changed: %s was published, this service publishes %s (the "
            "newest publication wins; a deploy in progress looks like this). Published: %s. "
            "This service's: %s",
            event_type,
            current.digest,
            digest,
            orjson.dumps(current.schema).decode(),
            orjson.dumps(schema).decode(),
        )
    return published


async def read_schema(client: RedisClient, prefix: str, event_type: str) -> PublishedSchema | None:
    """The type's published schema (see read_schema_steps)."""
    return await run_steps(client, read_schema_steps(prefix, event_type))


def read_schema_steps(prefix: str, event_type: str) -> Steps[PublishedSchema | None]:
    """The type's published schema; None when none is, or the entry is unusable (logged)."""
    return _usable(event_type, (yield ("HGET", schemas_key(prefix), event_type)))


def _usable(event_type: str, raw: bytes | str | None) -> PublishedSchema | None:
    if raw is None:
        return None
    try:
        return PublishedSchema.parse(event_type, raw)
    except ValueError as exc:
        logger.warning("the published schema of %s is unusable, ignored: %s", event_type, exc)
        return None


class PublishedSchemas(NamedTuple):
    """Every published schema of a prefix (read_schemas)."""

    schemas: dict[str, PublishedSchema]
    """By event type."""
    problems: list[str]
    """A description of each unusable entry."""


async def read_schemas(client: RedisClient, prefix: str) -> PublishedSchemas:
    """Every published schema by type, and a description of each unusable entry."""
    entries = await gated_call(client, lambda: client.hgetall(schemas_key(prefix)))
    schemas, problems = {}, []
    for name, raw in entries.items():
        try:
            event_type = text(name)
            schemas[event_type] = PublishedSchema.parse(event_type, raw)
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"published schema of {readable_text(name)!r} is unusable: {exc}")
    return PublishedSchemas(schemas, problems)


@dataclass(frozen=True, slots=True)
class SchemaField:
    """One top-level field of a payload schema, as the operator tools show it."""

    name: str
    type: str
    required: bool
    default: Any = None


def schema_fields(schema: dict[str, Any]) -> list[SchemaField]:
    """The fields of the schema's object (following a top-level `$ref`), with a short type
    text such as `array of Item`, `string (date-time)` or `integer | null`."""
    root = resolved(schema, schema)
    properties = root.get("properties")
    if not isinstance(properties, dict):
        return []
    required = root.get("required") or []
    return [
        SchemaField(str(name), type_text(schema, spec), name in required, _default(spec))
        for name, spec in properties.items()
    ]


def type_text(schema: dict[str, Any], spec: Any, depth: int = 0) -> str:
    if not isinstance(spec, dict) or depth > 8:
        return "any"
    reference = spec.get("$ref")
    if isinstance(reference, str):
        return reference.rsplit("/", 1)[-1]
    for combinator in ("anyOf", "oneOf"):
        if isinstance(spec.get(combinator), list):
            return " | ".join(type_text(schema, item, depth + 1) for item in spec[combinator])
    if "enum" in spec and isinstance(spec["enum"], list):
        return "one of " + ", ".join(orjson.dumps(value).decode() for value in spec["enum"])
    if "const" in spec:
        return orjson.dumps(spec["const"]).decode()
    kind = spec.get("type", "any")
    if isinstance(kind, list):
        kind = " | ".join(map(str, kind))
    if kind == "array":
        items = spec.get("prefixItems") or spec.get("items")
        if isinstance(items, list):
            return "[" + ", ".join(type_text(schema, item, depth + 1) for item in items) + "]"
        return f"array of {type_text(schema, items, depth + 1)}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"object of {type_text(schema, spec['additionalProperties'], depth + 1)}"
    detail = spec.get("format")
    return f"{kind} ({detail})" if isinstance(detail, str) else str(kind)


def resolved(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with local `$ref`s (`#/$defs/Name`, the form msgspec and pydantic write)
    followed; {} (no constraint) for a reference the schema does not define."""
    followed = 0
    while isinstance(spec.get("$ref"), str) and followed < 16:
        reference: str = spec["$ref"]
        definitions = schema.get("$defs")
        if not reference.startswith("#/$defs/") or not isinstance(definitions, dict):
            return {}
        target = definitions.get(reference.removeprefix("#/$defs/"))
        if not isinstance(target, dict):
            return {}
        spec, followed = target, followed + 1
    return spec


def _default(spec: Any) -> Any:
    return spec.get("default") if isinstance(spec, dict) else None
