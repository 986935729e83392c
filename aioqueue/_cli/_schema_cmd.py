"""`aioqueue schema [TYPE]`: the payload schemas services published, per event type."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

import orjson

from aioqueue._admin.named_types import require_declared
from aioqueue._wire.schemas import read_schema, read_schemas, schema_fields

from ._common import (
    Commands,
    add_connection_options,
    connect,
    print_json,
    print_table,
    report_table,
)

__all__ = ["add_schema_command"]


def add_schema_command(commands: Commands) -> None:
    schema = commands.add_parser(
        "schema", help="show an event type's published payload schema (or list them all)"
    )
    add_connection_options(schema)
    schema.add_argument("event_type", metavar="TYPE", nargs="?", help="the type's wire name")
    schema.add_argument("--json", action="store_true", help="print only the raw JSON Schema")
    schema.set_defaults(run=run_schema)


async def run_schema(args: argparse.Namespace) -> int:
    if args.event_type is None:
        return await _run_list(args)
    async with connect(args.url) as client:
        published = await read_schema(client, args.prefix, args.event_type)
        if published is None:
            # A misspelt name is told apart from a type whose services publish no schema.
            await require_declared(client, args.prefix, [args.event_type])
    if published is None:
        print(f"no schema is published for {args.event_type}", file=sys.stderr)
        return 1
    if args.json:
        print_json(published.schema)
        return 0
    print(
        f"{args.event_type}: schema {published.digest}, published {_when(published.published_at)}"
    )
    rows = [
        (f.name, f.type, "yes" if f.required else "no",
         "-" if f.required else orjson.dumps(f.default).decode())
        for f in schema_fields(published.schema)
    ]  # fmt: skip
    print_table(("FIELD", "TYPE", "REQUIRED", "DEFAULT"), rows)
    return 0


async def _run_list(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        schemas, problems = await read_schemas(client, args.prefix)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    rows = [
        (name, p.digest, str(len(schema_fields(p.schema))), _when(p.published_at))
        for name, p in sorted(schemas.items())
    ]
    headers = ("TYPE", "SCHEMA", "FIELDS", "PUBLISHED")
    as_json = {name: published.schema for name, published in sorted(schemas.items())}
    return report_table(args, as_json, headers, rows, empty="no schemas published")


def _when(milliseconds: int) -> str:
    try:
        moment = datetime.fromtimestamp(milliseconds / 1000, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{milliseconds} ms"  # written by something else than a service
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
