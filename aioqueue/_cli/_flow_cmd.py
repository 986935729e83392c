"""`aioqueue pause TYPE` and `aioqueue resume TYPE`: stop and restart delivery of a type for
every service of the prefix."""

from __future__ import annotations

import argparse

from aioqueue._engine.pausing import pause, resume
from aioqueue._engine.registry import resolve_layout

from ._common import Commands, add_connection_options, connect, print_json

__all__ = ["add_flow_commands"]


def add_flow_commands(commands: Commands) -> None:
    paused = commands.add_parser(
        "pause", help="stop every service from taking a type's events (they wait in Redis)"
    )
    resumed = commands.add_parser(
        "resume", help="let every service take a paused type's events again, in due order"
    )
    for parser, run in ((paused, run_pause), (resumed, run_resume)):
        add_connection_options(parser)
        parser.add_argument("type", metavar="TYPE")
        parser.add_argument("--json", action="store_true", help="print only JSON")
        parser.set_defaults(run=run)


async def run_pause(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        layout = await resolve_layout(client, args.prefix, args.type, None, record=False)
        returned = await pause(client, layout)
    if args.json:
        print_json({"type": args.type, "paused": True, "returned_to_schedule": returned})
    else:
        print(f"paused {args.type} ({returned} waiting deliveries back in the schedule)")
    return 0


async def run_resume(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        layout = await resolve_layout(client, args.prefix, args.type, None, record=False)
        was_paused = await resume(client, layout)
    if args.json:
        print_json({"type": args.type, "resumed": was_paused})
    else:
        print(f"resumed {args.type}" if was_paused else f"{args.type} was not paused")
    return 0
