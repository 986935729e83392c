"""`aioqueue worker module:factory`: runs a service until SIGINT or SIGTERM.

This is the one place that handles signals: the library never takes over the process.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import inspect
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from aioqueue._service.service import EventService

from ._common import CommandError, Commands, UsageError, add_connection_options, check_reachable
from ._worker_processes import (
    SUPERVISED_FLAG,
    ignore_stop_signals,
    run_worker_processes,
    stop_requests_from_parent,
)

__all__ = ["add_worker_command", "load_factory"]

logger = logging.getLogger("aioqueue.worker")


def add_worker_command(commands: Commands) -> None:
    parser = commands.add_parser(
        "worker",
        help="run a service from your factory until SIGINT/SIGTERM, then shut down gracefully",
        description="Imports FACTORY (module:callable), calls it to get an EventService with "
        "its handlers added, and runs it. A factory that takes `url` and `prefix` parameters "
        "gets --url and --prefix, and the worker first checks that the server at --url "
        "answers. The first SIGINT or SIGTERM stops taking events and lets running handlers "
        "finish within the service's shutdown grace; a second one cancels them at once.",
    )
    add_connection_options(parser)
    parser.add_argument("factory", metavar="FACTORY", help="module:callable, e.g. app.jobs:service")
    parser.add_argument(
        "--app-dir", default=".", help="directory to import the module from (default: current)"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: uvloop (the `uvloop` extra) or asyncio's own; auto (the default) "
        "takes uvloop where it is installed",
    )
    parser.add_argument(
        "--processes",
        type=_process_count,
        default=1,
        help="run N worker processes, each with its own service from FACTORY, for handlers "
        "that need more than one core; the command stops them all on SIGINT/SIGTERM, and "
        "all of them, exiting non-zero, when one exits on its own (default 1)",
    )
    parser.add_argument(SUPERVISED_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(run=run_worker, event_loop=event_loop_of)


def _process_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return count


def event_loop_of(args: argparse.Namespace) -> str:
    """The event loop the worker runs on, as --loop asks: "uvloop" or "asyncio"."""
    if args.loop == "asyncio":
        return "asyncio"
    if importlib.util.find_spec("uvloop") is not None:
        return "uvloop"
    if args.loop == "uvloop":
        raise CommandError(
            "--loop uvloop needs uvloop: pip install 'aioqueue-redis[uvloop]' (or --loop asyncio)"
        )
    return "asyncio"


def load_factory(spec: str, app_dir: str = ".") -> Callable[..., Any]:
    """The callable FACTORY names. A FACTORY that names no importable module or no callable
    raises UsageError (exit 2); a module that exists but fails to import raises as it does."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"FACTORY must look like module:callable, got {spec!r}")
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if _names_the_module(exc, module_name):
            raise UsageError(f"cannot import {module_name!r}: {exc} (--app-dir {path})") from exc
        # The module is there; an import inside it failed (a dependency not installed):
        # the application is broken, not the command line.
        raise CommandError(f"cannot import {module_name!r}: {exc}") from exc
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError as exc:
            raise UsageError(f"{module_name!r} has no attribute {attribute!r}") from exc
    if not callable(target):
        raise UsageError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _names_the_module(error: ImportError, module_name: str) -> bool:
    """Whether `error` says that `module_name` itself (or a package above it) is missing."""
    missing = error.name if isinstance(error, ModuleNotFoundError) else None
    return missing is not None and (module_name == missing or module_name.startswith(f"{missing}."))


async def make_service(factory: Callable[..., Any], url: str, prefix: str) -> EventService:
    """Calls the factory (sync or async), passing url/prefix if it takes them."""
    parameters = inspect.signature(factory).parameters
    offered = {"url": url, "prefix": prefix}
    result = factory(**{name: value for name, value in offered.items() if name in parameters})
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, EventService):
        raise CommandError(f"the factory returned {type(result).__name__}, not an EventService")
    return result


async def run_worker(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.processes > 1:
        return await run_worker_processes(args)
    if args.stop_requests_from_stdin:
        ignore_stop_signals()
    factory = load_factory(args.factory, args.app_dir)
    if "url" in inspect.signature(factory).parameters:
        # A service retries an unreachable server for ever (a worker outlives outages), so a
        # wrong --url would only show as a warning every few seconds: refuse it at start.
        await check_reachable(args.url)
    service = await make_service(factory, args.url, args.prefix)
    async with (
        stop_requests(supervised=args.stop_requests_from_stdin) as requests,
        anyio.create_task_group() as watchers,
    ):
        stopping = anyio.Event()
        running = anyio.CancelScope()

        async def watch_signals() -> None:
            async for name in requests:
                if not stopping.is_set():
                    logger.info(
                        "%s: stopping; running handlers get up to %g s (again to force)",
                        name,
                        service.config.shutdown_grace,
                    )
                    stopping.set()
                else:
                    logger.warning("%s again: cancelling running handlers now", name)
                    running.cancel()

        watchers.start_soon(watch_signals)
        with running:
            async with service:
                logger.info(
                    "worker started: %r (pid %d, event loop %s)",
                    service,
                    os.getpid(),
                    type(asyncio.get_running_loop()).__module__.split(".")[0],
                )
                await stopping.wait()
        watchers.cancel_scope.cancel()
    logger.info("worker stopped%s", "" if not running.cancel_called else " (forced)")
    return 0


@asynccontextmanager
async def stop_requests(*, supervised: bool) -> AsyncIterator[AsyncIterator[str]]:
    """What asks this worker to stop, by name: SIGINT and SIGTERM, or, in a process of
    `--processes`, its parent (see _worker_processes.py)."""
    if supervised:
        yield stop_requests_from_parent()
        return
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        yield (signal.Signals(signum).name async for signum in signals)
