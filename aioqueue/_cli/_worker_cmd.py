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
from typing import Any, TypeVar

import anyio

from aioqueue._model.errors import ServiceFailedError
from aioqueue._service.health import PING_BOUND
from aioqueue._service.health_server import HealthServer
from aioqueue._service.service import EventService, replace_shutdown_grace

from ._common import CommandError, Commands, UsageError, add_connection_options, check_reachable
from ._worker_processes import (
    SUPERVISED_FLAG,
    ignore_stop_signals,
    run_worker_processes,
    stop_requests_from_parent,
)

__all__ = ["add_worker_command", "load_factory"]

logger = logging.getLogger("aioqueue.worker")

_N = TypeVar("_N", int, float)


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
    parser.add_argument(
        "--health-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve GET /livez, /readyz and /metrics on PORT for Kubernetes' probes (with "
        "--processes, each process takes the next port: PORT, PORT+1, ...)",
    )
    parser.add_argument(
        "--health-host",
        default="0.0.0.0",
        help="the address the health port listens on (default 0.0.0.0)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="on SIGTERM, how long running handlers may finish before they are cut off and "
        "their events given back; replaces the service's own shutdown_grace (default: that "
        "one, 10 s unless the factory set another, which with the cut-off and the hand-back "
        "fits inside Kubernetes' default terminationGracePeriodSeconds of 30)",
    )
    parser.add_argument(SUPERVISED_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(run=run_worker, event_loop=event_loop_of)


def _number_from(
    convert: Callable[[str], _N], low: _N, high: _N | None, what: str
) -> Callable[[str], _N]:
    """An argparse type: `convert` of the text, from `low` to `high` (None: no bound), else
    an error that says which `what` was wanted."""

    def parse(text: str) -> _N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not (low <= value and (high is None or value <= high)):  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


_port = _number_from(int, 0, 65535, "a port from 0 to 65535")
_seconds = _number_from(float, 0.0, 3600.0, "seconds from 0 to 3600")
_process_count = _number_from(int, 1, None, "a whole number >= 1")


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
    if args.shutdown_grace is not None:
        replace_shutdown_grace(service, args.shutdown_grace)
    failure: Exception | None = None
    async with (
        stop_requests(supervised=args.stop_requests_from_stdin) as requests,
        health_port(service, args.health_host, args.health_port),
        anyio.create_task_group() as watchers,
    ):
        stopping = anyio.Event()
        running = anyio.CancelScope()

        async def watch_service() -> None:
            # A service whose dispatcher or consumer died takes no more events: the worker
            # exits (non-zero), for whatever runs it to start a new one.
            nonlocal failure
            failure = await service.wait_failed()
            logger.critical("%s; stopping the worker", failure)
            stopping.set()

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
            try:
                async with service:
                    watchers.start_soon(watch_service)
                    logger.info(
                        "worker started: %r (pid %d, event loop %s, shutdown grace %g s)",
                        service,
                        os.getpid(),
                        type(asyncio.get_running_loop()).__module__.split(".")[0],
                        service.config.shutdown_grace,
                    )
                    await stopping.wait()
            except ServiceFailedError as exc:
                failure = exc
        watchers.cancel_scope.cancel()
    if failure is not None:
        raise CommandError(f"the worker stopped: {failure}")
    logger.info("worker stopped%s", "" if not running.cancel_called else " (forced)")
    return 0


@asynccontextmanager
async def health_port(service: EventService, host: str, port: int | None) -> AsyncIterator[None]:
    """Serves the service's probes on `port`, if given, for as long as the worker runs: from
    before the service starts (not ready yet) until after it has stopped (alive while it
    stops, so that a liveness probe does not kill a worker finishing its handlers)."""
    if port is None:
        yield
        return
    try:
        server = HealthServer(service, host, port, ping_bound=PING_BOUND)
        await server.__aenter__()
    except OSError as exc:
        raise CommandError(f"cannot serve the health port on {host}:{port}: {exc}") from exc
    try:
        yield
    finally:
        await server.__aexit__(None, None, None)


@asynccontextmanager
async def stop_requests(*, supervised: bool) -> AsyncIterator[AsyncIterator[str]]:
    """What asks this worker to stop, by name: SIGINT and SIGTERM, or, in a process of
    `--processes`, its parent (see _worker_processes.py)."""
    if supervised:
        yield stop_requests_from_parent()
        return
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        yield (signal.Signals(signum).name async for signum in signals)
