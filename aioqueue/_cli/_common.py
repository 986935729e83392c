"""What every command shares: connection options, JSON output, confirmation prompts."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO, TypeAlias

import orjson

from aioqueue._engine.client import RedisClient, client_from_url
from aioqueue._engine.keys import validate_prefix

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_URL",
    "CommandError",
    "Commands",
    "add_connection_options",
    "confirm",
    "connect",
    "print_json",
    "print_table",
]

DEFAULT_URL = "redis://localhost:6379"
DEFAULT_PREFIX = "aioqueue"

# A string: argparse's class is not subscriptable at run time.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CommandError(Exception):
    """A command cannot do what was asked; the message is printed and the exit code is 1."""


def add_connection_options(parser: argparse.ArgumentParser, *, url_default: bool = True) -> None:
    env_url = os.environ.get("AIOQUEUE_URL")
    parser.add_argument(
        "--url",
        default=env_url or (DEFAULT_URL if url_default else None),
        help=f"Redis URL (env AIOQUEUE_URL; default {DEFAULT_URL if url_default else 'none'})",
    )
    parser.add_argument(
        "--prefix",
        default=os.environ.get("AIOQUEUE_PREFIX") or DEFAULT_PREFIX,
        type=_prefix,
        help=f"key prefix (env AIOQUEUE_PREFIX; default {DEFAULT_PREFIX})",
    )


def _prefix(value: str) -> str:
    try:
        return validate_prefix(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@contextlib.asynccontextmanager
async def connect(url: str) -> AsyncIterator[RedisClient]:
    """A client for one command, closed when it is done."""
    try:
        client = client_from_url(url)
    except ValueError as exc:
        raise CommandError(f"invalid --url {url!r}: {exc}") from exc
    try:
        yield client
    finally:
        await client.aclose()


def print_json(value: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(orjson.dumps(value).decode() + "\n")
    out.flush()


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO | None = None
) -> None:
    """Columns padded to their widest cell; numbers are right-aligned."""
    out = out or sys.stdout
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line(headers), file=out)
    for row in cells:
        print(line(row), file=out)


def confirm(question: str, *, assume_yes: bool) -> bool:
    """Asks on the terminal; without one, only `--yes` says yes (nothing is done otherwise)."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        print(f"{question} Not confirmed: no terminal to ask on; pass --yes.", file=sys.stderr)
        return False
    # The question goes to stderr so that stdout stays clean for --json.
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")
