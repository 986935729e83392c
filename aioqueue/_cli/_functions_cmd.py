"""`aioqueue functions load`: loads this version's function library into the server, for
services whose ACL user may call the functions (FCALL) but not load them."""

from __future__ import annotations

import argparse

from aioqueue._engine.functions import LIBRARY

from ._common import Commands, add_connection_options, connect, print_json

__all__ = ["add_functions_command"]


def add_functions_command(commands: Commands) -> None:
    functions = commands.add_parser(
        "functions", help="load aioqueue's Lua functions (run as an administrator per version)"
    )
    actions = functions.add_subparsers(dest="action", metavar="ACTION", required=True)
    load = actions.add_parser(
        "load", help="FUNCTION LOAD this version's library on the server (every primary)"
    )
    add_connection_options(load)
    load.add_argument("--json", action="store_true", help="print only JSON")
    load.set_defaults(run=run_load)


async def run_load(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        await LIBRARY.load(client)
    if args.json:
        print_json({"library": LIBRARY.name, "loaded": True})
    else:
        print(f"loaded function library {LIBRARY.name}")
    return 0
