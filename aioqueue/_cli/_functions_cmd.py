"""`aioqueue functions load`: loads this version's Lua code into the server, for services
whose ACL user may run it (FCALL, or EVALSHA on Redis 6) but not load it."""

from __future__ import annotations

import argparse

from redis.exceptions import ResponseError

from aioqueue._transport.client import RedisClient, within_reply_timeout
from aioqueue._wire.functions import LIBRARY
from aioqueue._wire.scripts import script_source

from ._common import Commands, add_command, connect, report

__all__ = ["add_functions_command"]


def add_functions_command(commands: Commands) -> None:
    functions = commands.add_parser(
        "functions", help="load aioqueue's Lua functions (run as an administrator per version)"
    )
    actions = functions.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(
        actions,
        "load",
        run_load,
        help_text="FUNCTION LOAD this version's library on the server (every primary); on a "
        "server without functions (Redis 6), SCRIPT LOAD its scripts instead",
    )


async def run_load(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        try:
            await LIBRARY.load(client)
            kind = "functions"
        except ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            await _load_scripts(client)
            kind = "scripts"
    if kind == "functions":
        text = f"loaded function library {LIBRARY.name}"
    else:
        text = (
            f"this server has no functions (Redis 6): loaded the {len(LIBRARY.scripts)} "
            "scripts of the library for EVALSHA; load them again after the server restarts "
            "without its AOF (the script cache is not kept otherwise)"
        )
    return report(args, {"library": LIBRARY.name, "loaded": True, "as": kind}, text)


async def _load_scripts(client: RedisClient) -> None:
    """SCRIPT LOAD of every script, as services run them (every primary of a cluster): the
    cache is replicated and kept in the AOF, and a user allowed EVALSHA but neither EVAL nor
    SCRIPT LOAD can then run these scripts and no others."""
    for name in LIBRARY.scripts:
        await within_reply_timeout(client.script_load(script_source(name)))
