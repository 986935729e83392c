"""`aioqueue pause TYPE`, `aioqueue resume TYPE` and `aioqueue rate-limit TYPE`: flow control
of a type, for every service of the prefix."""

from __future__ import annotations

import argparse

from aioqueue._model.rate_limit import RateLimit
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.pausing import pause, resume
from aioqueue._wire.rate_limits import read_rate_limit, set_rate_limit

from ._common import (
    CommandError,
    Commands,
    add_allow_undeclared,
    add_command,
    add_connection_options,
    on_type,
    report,
)

__all__ = ["add_flow_commands", "add_rate_limit_command"]


def add_flow_commands(commands: Commands) -> None:
    for name, run, help_text in (
        ("pause", run_pause, "stop every service from taking a type's events (they wait in Redis)"),
        ("resume", run_resume, "let every service take a paused type's events again, in due order"),
    ):
        add_command(commands, name, run, help_text=help_text, arguments=("type",), writes=True)


async def run_pause(args: argparse.Namespace) -> int:
    # Recorded: a pause of a type the registry lacked would hold it with nobody seeing it.
    returned = await on_type(args, pause, strict=True, record=True)
    return report(
        args,
        {"type": args.type, "paused": True, "returned_to_schedule": returned},
        f"paused {args.type} ({returned} waiting deliveries back in the schedule)",
    )


async def run_resume(args: argparse.Namespace) -> int:
    was_paused = await on_type(args, resume, strict=True)
    return report(
        args,
        {"type": args.type, "resumed": was_paused},
        f"resumed {args.type}" if was_paused else f"{args.type} was not paused",
    )


def add_rate_limit_command(commands: Commands) -> None:
    parser = commands.add_parser(
        "rate-limit", help="show, set or clear a type's rate limit (for every service)"
    )
    add_connection_options(parser)
    parser.add_argument("type", metavar="TYPE")
    parser.add_argument("limit", metavar="LIMIT", type=int, nargs="?", help="handler starts")
    parser.add_argument("--per", type=float, default=1.0, help="window in seconds (default 1)")
    parser.add_argument("--clear", action="store_true", help="remove the limit")
    parser.add_argument("--json", action="store_true", help="print only JSON")
    add_allow_undeclared(parser)
    parser.set_defaults(run=run_rate_limit)


async def run_rate_limit(args: argparse.Namespace) -> int:
    if args.limit is not None and not (args.limit >= 1 and 0.001 <= args.per <= 86400):
        raise CommandError("LIMIT must be at least 1 and --per from 0.001 to 86400 seconds")

    async def change(client: RedisClient, layout: QueueLayout) -> RateLimit | None:
        if args.clear:
            await set_rate_limit(client, layout, None)
        elif args.limit is not None:
            await set_rate_limit(client, layout, RateLimit(args.limit, round(args.per * 1000)))
        return await read_rate_limit(client, layout)

    # A limit set is recorded with its type, as a pause is, so that `stats` shows it.
    current = await on_type(args, change, strict=True, record=args.limit is not None)
    shown = None if current is None else {"limit": current.limit, "per": current.per_ms / 1000}
    return report(
        args,
        {"type": args.type, "rate_limit": shown},
        f"{args.type}: {current if current else 'no rate limit'}",
    )
