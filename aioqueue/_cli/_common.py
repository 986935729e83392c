"""What every command shares: connection options, the skeleton of a command about one event
type (its parser, connecting, finding the type's layout and refusing a type no service
declared, printing text or --json), JSON output, confirmation prompts."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, TextIO, TypeAlias, TypeVar

import anyio
import orjson
from anyio.abc import TaskStatus
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue._admin.named_types import resolve_declared, resolve_layouts
from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue._transport.reaching import display_url
from aioqueue._wire.keys import QueueLayout, validate_prefix

__all__ = [
    "CONNECTION_ERRORS",
    "DEFAULT_PREFIX",
    "DEFAULT_URL",
    "INTERRUPTED",
    "USAGE_ERROR",
    "CommandError",
    "Commands",
    "Run",
    "ShownEvent",
    "UsageError",
    "add_allow_undeclared",
    "add_command",
    "add_connection_options",
    "answering_in_time",
    "check_reachable",
    "confirm",
    "connect",
    "display_url",
    "on_type",
    "print_json",
    "print_table",
    "report",
    "report_table",
    "resolve_connection_options",
    "show_command",
    "undeclared_hint",
    "until_stop_signal",
]

DEFAULT_URL = "redis://localhost:6379"
DEFAULT_PREFIX = "aioqueue"
# The exit code of a command stopped by Ctrl-C, as a shell reports one killed by SIGINT.
INTERRUPTED = 128 + signal.SIGINT
# The exit code of a command line that asks for what cannot be, as argparse's own errors.
USAGE_ERROR = 2
# How long a command waits for a server's first answer before it says it cannot reach it.
REACH_TIMEOUT = 5.0
# What a server that is down, unreachable or refusing connections raises. RedisCluster
# raises RedisClusterException, which is no RedisError, when none of its nodes answers; the
# builtin ConnectionError and TimeoutError are what a socket raises past redis-py. Other
# OSErrors (a missing file in a worker's own code) keep their traceback.
CONNECTION_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    RedisClusterException,
    ConnectionError,
    TimeoutError,
)

# A string: argparse's class is not subscriptable at run time.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# What a command runs with its parsed arguments; it returns the exit code.
Run: TypeAlias = Callable[[argparse.Namespace], Awaitable[int]]

_T = TypeVar("_T")


class CommandError(Exception):
    """A command cannot do what was asked; the message is printed and the exit code is 1."""


class UsageError(CommandError):
    """The command line names something that does not exist (a worker's FACTORY module or
    callable), found only once the command runs: printed like a CommandError, exit code 2."""


def add_connection_options(
    parser: argparse.ArgumentParser, *, url_default: bool = True, prefix: bool = True
) -> None:
    """--url and --prefix (unless `prefix` is False), on the top-level parser and on each
    command's.

    They have no argparse default: a command's parser copies its defaults over whatever the
    top-level parser read, so `aioqueue --url U stats` would lose U. The defaults are filled
    in after parsing by `resolve_connection_options`.
    """
    parser.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="Redis URL: redis://, rediss://, redis+cluster://, redis+sentinel://h1:26379,"
        f"h2:26379/mymaster (env AIOQUEUE_URL; default {DEFAULT_URL if url_default else 'none'})",
    )
    if prefix:
        parser.add_argument(
            "--prefix",
            default=argparse.SUPPRESS,
            type=_prefix,
            help=f"key prefix (env AIOQUEUE_PREFIX; default {DEFAULT_PREFIX})",
        )
    parser.set_defaults(url_default=url_default)


def add_command(
    commands: Commands,
    name: str,
    run: Run,
    *,
    help_text: str,
    arguments: Sequence[str] = (),
    description: str | None = None,
    writes: bool = False,
) -> argparse.ArgumentParser:
    """A command (or an action of one) that `run` runs, taking --url and --prefix, the
    positional `arguments` (each shown as its name in capitals: TYPE, ID), --json, and if
    it `writes`, --allow-undeclared."""
    parser = commands.add_parser(name, help=help_text, description=description)
    add_connection_options(parser)
    for argument in arguments:
        parser.add_argument(argument, metavar=argument.upper())
    parser.add_argument("--json", action="store_true", help="print only JSON")
    if writes:
        add_allow_undeclared(parser)
    parser.set_defaults(run=run)
    return parser


def resolve_connection_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fills in --url and --prefix not given on the command line: the environment's
    AIOQUEUE_URL and AIOQUEUE_PREFIX, else the defaults (a command that starts a server of
    its own, like the demo, has no default URL)."""
    if "url" not in args:
        args.url = os.environ.get("AIOQUEUE_URL") or (DEFAULT_URL if args.url_default else None)
    if "prefix" not in args:
        try:
            args.prefix = validate_prefix(os.environ.get("AIOQUEUE_PREFIX") or DEFAULT_PREFIX)
        except ValueError as exc:
            parser.error(f"AIOQUEUE_PREFIX: {exc}")


async def check_reachable(url: str) -> None:
    """Fails with one line unless the server at `url` answers PING within REACH_TIMEOUT s."""
    async with connect(url) as client:
        with answering_in_time(url):
            await client.ping()


@contextlib.contextmanager
def answering_in_time(url: str) -> Iterator[None]:
    """A first call to the server at `url`: no answer within REACH_TIMEOUT s, or no
    connection, fails the command with one line (CommandError) instead of a traceback."""
    try:
        with anyio.fail_after(REACH_TIMEOUT):
            yield
    except TimeoutError as exc:
        raise CommandError(
            f"cannot reach {display_url(url)}: no answer within {REACH_TIMEOUT:g} s"
        ) from exc
    except CONNECTION_ERRORS as exc:
        raise CommandError(f"cannot reach {display_url(url)}: {exc}") from exc


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


async def on_type(
    args: argparse.Namespace,
    act: Callable[[RedisClient, QueueLayout], Awaitable[_T]],
    *,
    strict: bool = False,
    record: bool = False,
) -> _T:
    """Connects to --url and returns what `act` reads or does with the queues of TYPE under
    --prefix, in the layout the prefix's registry records.

    A type no service declared is refused (UndeclaredTypeError, printed with the known
    types) unless the command was given --allow-undeclared. A declared type the registry
    does not record (only its schema is published) is taken as unpartitioned; so is one
    whose entry is damaged (a warning is logged), unless `strict`: then that raises
    PartitionCountMismatchError, for the commands that change how every service treats the
    type, which with `record` also record it (see resolve_declared).
    """
    allowed = getattr(args, "allow_undeclared", False)
    async with connect(args.url) as client:
        if strict:
            layout = await resolve_declared(
                client, args.prefix, args.type, allow_undeclared=allowed, record=record
            )
        else:
            [layout] = await resolve_layouts(
                client, args.prefix, [args.type], allow_undeclared=allowed
            )
        return await act(client, layout)


def add_allow_undeclared(parser: argparse.ArgumentParser) -> None:
    """--allow-undeclared, for the commands that write: they refuse a type no service has
    declared (a misspelt name) unless told its consumers are not deployed yet."""
    parser.add_argument(
        "--allow-undeclared",
        action="store_true",
        help="take TYPE even though no service has declared it yet (a producer deployed "
        "before its consumers); without it, a type no service declared is refused",
    )


def undeclared_hint(args: argparse.Namespace) -> str:
    """What a command that refused an undeclared type can be told to do instead."""
    if "allow_undeclared" in args:
        return " (--allow-undeclared takes it all the same, for consumers not deployed yet)"
    return ""


def report(args: argparse.Namespace, as_json: Any, text: str, *, done: bool = True) -> int:
    """Prints `as_json` with --json, else `text` (on stderr unless `done`); returns the exit
    code, 0 when `done`, else 1."""
    if args.json:
        print_json(as_json)
    else:
        print(text, file=sys.stdout if done else sys.stderr)
    return 0 if done else 1


class ShownEvent(Protocol):
    """An event as a `show` command prints it (a pending event's info, a dead letter)."""

    @property
    def event_type(self) -> str: ...
    @property
    def id(self) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


_S = TypeVar("_S", bound=ShownEvent)


def show_command(
    read: Callable[[RedisClient, QueueLayout, str], Awaitable[_S | None]],
    missing: Callable[[argparse.Namespace], str],
    fields: Callable[[_S], list[tuple[str, object]]],
    *,
    width: int,
) -> Run:
    """A `show TYPE ID` command: `read` finds the event in TYPE's queues (see on_type), and it
    is printed as its type, its id and its `fields`, the values from column `width` on (its
    JSON with --json); when there is none, the command fails saying `missing(args)`."""

    async def run(args: argparse.Namespace) -> int:
        shown = await on_type(args, lambda client, layout: read(client, layout, args.id))
        if shown is None:
            raise CommandError(missing(args))
        every = [("type", shown.event_type), ("id", shown.id), *fields(shown)]
        lines = [f"{name + ':':<{width}}{value}" for name, value in every]
        return report(args, shown.to_json(), "\n".join(lines))

    return run


def report_table(
    args: argparse.Namespace,
    as_json: Any,
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    empty: str,
) -> int:
    """`report` of a listing: `as_json` with --json, else the table of `rows`, or `empty`
    when there are none; returns 0."""
    if args.json:
        print_json(as_json)
    elif rows:
        print_table(headers, rows)
    else:
        print(empty)
    return 0


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


async def until_stop_signal(command: Callable[[], Awaitable[int]]) -> int:
    """Runs `command` and returns its exit code, or 128 + the signal's number once SIGINT or
    SIGTERM has cancelled it (130 for Ctrl-C, as a shell shows a command it killed); a second
    signal gets the default handling (Ctrl-C raises KeyboardInterrupt).

    The signal cancels a cancel scope around the command instead of leaving Ctrl-C to
    asyncio, which cancels the main task once: a single cancellation is delivered to one
    await and is gone, while a cancelled scope cancels every await inside it until it
    exits, so nothing can carry on past it (a demo in the suite once ran on for 30 s
    after its SIGINT). Shielded clean-ups inside, such as the demo's key removal, still run.
    """
    received: list[int] = []
    code = INTERRUPTED
    async with anyio.create_task_group() as group:

        async def cancel_on_signal(*, task_status: TaskStatus[None]) -> None:
            # Closed after the first signal, so that the next one gets the default handling.
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for signum in signals:
                    received.append(signum)
                    break
            group.cancel_scope.cancel()

        await group.start(cancel_on_signal)
        code = await command()
        group.cancel_scope.cancel()
    return 128 + received[0] if received else code
