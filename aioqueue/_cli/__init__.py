"""The `aioqueue` command (also `python -m aioqueue`).

Its core is the standard library's argparse, so `aioqueue demo` runs with the base install;
`serve` needs the `http` extra.
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from collections.abc import Sequence

import anyio
import redis
from redis.exceptions import RedisError

from aioqueue import __version__
from aioqueue._admin.named_types import UndeclaredTypeError
from aioqueue._cli._common import (
    CONNECTION_ERRORS,
    INTERRUPTED,
    USAGE_ERROR,
    CommandError,
    Commands,
    UsageError,
    add_connection_options,
    display_url,
    resolve_connection_options,
    undeclared_hint,
    until_stop_signal,
)
from aioqueue._cli._dead_cmd import add_dead_command
from aioqueue._cli._events_cmd import add_cancel_command, add_events_command
from aioqueue._cli._flow_cmd import add_flow_commands, add_rate_limit_command
from aioqueue._cli._functions_cmd import add_functions_command
from aioqueue._cli._schedules_cmd import add_schedules_command
from aioqueue._cli._schema_cmd import add_schema_command
from aioqueue._cli._serve_cmd import add_serve_command
from aioqueue._cli._stats_cmd import add_stats_command
from aioqueue._cli._worker_cmd import add_worker_command
from aioqueue._cli._workers_cmd import add_workers_commands
from aioqueue._model.errors import AioqueueError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aioqueue",
        description="Delayed events for asyncio on Redis: run the demo, watch queues, "
        "handle dead letters, run workers and the HTTP API.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"aioqueue {__version__} (redis-py {redis.__version__}, "
        f"Python {platform.python_version()})",
    )
    # Also accepted before the command: `aioqueue --url redis://host:6379 stats`.
    add_connection_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo_command(commands)
    add_stats_command(commands)
    add_dead_command(commands)
    add_events_command(commands)
    add_schedules_command(commands)
    add_schema_command(commands)
    add_flow_commands(commands)
    add_rate_limit_command(commands)
    add_functions_command(commands)
    add_cancel_command(commands)
    add_worker_command(commands)
    add_workers_commands(commands)
    add_serve_command(commands)
    return parser


def _add_demo_command(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="schedule thousands of events on an embedded server and handle them",
        description="Schedules thousands of payment checks and handles them, some failing on "
        "purpose. Without --url on an embedded server it starts and removes; with --url under "
        "a prefix of its own (aioqueue-demo-XXXXXXXX), whose keys it deletes when it ends.",
    )
    demo.add_argument("--events", type=int, default=3000, help="how many events (default 3000)")
    demo.add_argument(
        "--spread", type=float, default=3.0, help="seconds to spread them over (default 3)"
    )
    # The demo starts a server of its own unless told to use one. On that one it works under
    # a fresh prefix and deletes it at the end: no --prefix, which could name real queues.
    add_connection_options(demo, url_default=False, prefix=False)
    demo.set_defaults(run=_run_demo)


async def _run_demo(args: argparse.Namespace) -> int:
    # The demo's failures are deliberate: show the library's warnings only when they matter.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    from aioqueue._cli._demo import run_demo

    return await until_stop_signal(
        lambda: run_demo(events=args.events, spread=args.spread, url=args.url)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code (0 done, 1 failed or refused, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_connection_options(args, parser)
    try:
        # uvloop (worker --loop): anyio runs asyncio on it when asked to.
        loop = args.event_loop(args) if hasattr(args, "event_loop") else "asyncio"
        code: int = anyio.run(args.run, args, backend_options={"use_uvloop": loop == "uvloop"})
    except KeyboardInterrupt:
        return INTERRUPTED
    except BaseException as error:
        reported = _reported_error(error)
        if reported is None:
            raise
        print(f"aioqueue {args.command}: {_describe(reported, args)}", file=sys.stderr)
        return USAGE_ERROR if isinstance(reported, UsageError) else 1
    return code


def _reported_error(error: BaseException) -> BaseException | None:
    """The error to print as one line, or None to let `error` go on with its traceback.

    Errors raised inside a task group (the demo's producers, a service's own tasks) arrive
    wrapped in an exception group, often holding one cause many times over: when every error
    in it is one a command reports in a line, the first stands for all. The group is read by
    its `exceptions` attribute because Python 3.10 has no ExceptionGroup class to name.
    """
    nested = getattr(error, "exceptions", None)
    if isinstance(nested, tuple) and nested:
        leaves = [_reported_error(inner) for inner in nested]
        return leaves[0] if all(leaf is not None for leaf in leaves) else None
    reported = (CommandError, UndeclaredTypeError, RedisError, *CONNECTION_ERRORS)
    return error if isinstance(error, reported) else None


def _describe(error: BaseException, args: argparse.Namespace) -> str:
    if isinstance(error, UndeclaredTypeError):
        return f"{error}{undeclared_hint(args)}"
    url: str | None = args.url
    # The library's own errors name what they are about (RedisUnavailableError the server).
    if isinstance(error, (CommandError, AioqueueError)):
        return str(error)
    if isinstance(error, CONNECTION_ERRORS):
        return f"cannot reach {display_url(url) if url else 'the server'}: {error}"
    return f"Redis answered with an error: {error}"


if __name__ == "__main__":
    sys.exit(main())
