"""The `aioqueue` command (also `python -m aioqueue`).

Its core is the standard library's argparse, so `aioqueue demo` runs with the base install;
`serve` needs the `http` extra.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio
from redis.exceptions import RedisError

from aioqueue._cli._common import CommandError, Commands, add_connection_options
from aioqueue._cli._dead_cmd import add_cancel_command, add_dead_command
from aioqueue._cli._events_cmd import add_events_command
from aioqueue._cli._serve_cmd import add_serve_command
from aioqueue._cli._stats_cmd import add_stats_command
from aioqueue._cli._worker_cmd import add_worker_command

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aioqueue",
        description="Delayed events for asyncio on Redis: run the demo, watch queues, "
        "handle dead letters, run workers and the HTTP API.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo_command(commands)
    add_stats_command(commands)
    add_dead_command(commands)
    add_events_command(commands)
    add_cancel_command(commands)
    add_worker_command(commands)
    add_serve_command(commands)
    return parser


def _add_demo_command(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo", help="schedule thousands of events on an embedded server and handle them"
    )
    demo.add_argument("--events", type=int, default=3000, help="how many events (default 3000)")
    demo.add_argument(
        "--spread", type=float, default=3.0, help="seconds to spread them over (default 3)"
    )
    # The demo starts a server of its own unless told to use one.
    add_connection_options(demo, url_default=False)
    demo.set_defaults(run=_run_demo)


async def _run_demo(args: argparse.Namespace) -> int:
    # The demo's failures are deliberate: show the library's warnings only when they matter.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    from aioqueue._cli._demo import run_demo

    return await run_demo(events=args.events, spread=args.spread, url=args.url, prefix=args.prefix)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code (0 done, 1 failed or refused, 2 usage)."""
    args = build_parser().parse_args(argv)
    try:
        code: int = anyio.run(args.run, args)
    except CommandError as exc:
        print(f"aioqueue {args.command}: {exc}", file=sys.stderr)
        return 1
    except (RedisError, OSError) as exc:
        url = getattr(args, "url", None) or "the server"
        print(f"aioqueue {args.command}: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
