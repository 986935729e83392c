"""`aioqueue worker FACTORY --processes N`: N worker processes under one command.

A service runs its handlers on one event loop, so on one core; handlers that spend CPU (parse,
render, compute) need more processes, not more tasks. Each process here is a plain `aioqueue
worker` with its own service from the same factory, so nothing is shared but the queues in
Redis, which already serve any number of workers.

The parent only supervises, and it alone takes signals. A terminal's Ctrl-C reaches every
process of its group, and systemd's stop every process of the unit, so a child that took
signals too would see each of them twice, and a second one forces the stop. The children
ignore SIGINT and SIGTERM and read their stop requests from a pipe the parent holds
instead: a byte per request (the first stops taking events, a second cancels running
handlers, as a signal does for a single worker), and the end of the pipe, which also comes
when the parent was killed, stops them as a first request would: no worker outlives its
command.

A child that exits while the others run (a crash, a factory that fails) stops the rest, and
the command exits non-zero: restarting belongs to whatever runs the command (systemd,
Kubernetes), which sees one failed unit rather than a set quietly short of a process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
from anyio.abc import Process

__all__ = [
    "SUPERVISED_FLAG",
    "ignore_stop_signals",
    "run_worker_processes",
    "stop_requests_from_parent",
]

logger = logging.getLogger("aioqueue.worker")

SUPERVISED_FLAG = "--stop-requests-from-stdin"
"""How the parent starts its children (a hidden option of `aioqueue worker`)."""


def child_command(args: argparse.Namespace, index: int) -> list[str]:
    """The command line of child number `index` (from 0): the same worker, one process,
    stopped by the parent, with the health port after the previous child's. The URL and
    prefix travel in the environment instead, where a password in the URL is not shown to
    every user of the machine by `ps`."""
    options = [] if args.shutdown_grace is None else ["--shutdown-grace", str(args.shutdown_grace)]
    if args.health_port is not None:
        port = str(args.health_port + index)
        options += ["--health-port", port, "--health-host", args.health_host]
    return [
        sys.executable, "-m", "aioqueue", "worker", args.factory,
        "--app-dir", os.path.abspath(args.app_dir),
        "--log-level", args.log_level,
        "--loop", args.loop,
        *options,
        SUPERVISED_FLAG,
    ]  # fmt: skip


async def run_worker_processes(args: argparse.Namespace) -> int:
    """Runs `args.processes` workers until they have all stopped; the exit code is the first
    failure's, else 0."""
    environment = {**os.environ, "AIOQUEUE_URL": args.url, "AIOQUEUE_PREFIX": args.prefix}
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        commands = [child_command(args, index) for index in range(args.processes)]
        async with _children(commands, environment) as children:
            logger.info(
                "started %d worker processes (pids %s)",
                len(children),
                ", ".join(str(child.pid) for child in children),
            )
            set_ = _ChildSet(children)
            async with anyio.create_task_group() as group:
                group.start_soon(set_.forward_signals, signals)
                async with anyio.create_task_group() as watchers:
                    for child in children:
                        watchers.start_soon(set_.watch, child)
                group.cancel_scope.cancel()
    logger.info("all worker processes stopped")
    return set_.exit_code


@asynccontextmanager
async def _children(
    commands: Sequence[Sequence[str]], environment: dict[str, str]
) -> AsyncIterator[list[Process]]:
    """Starts a child per command, each with a stop pipe on its stdin and the parent's stdout
    and stderr; kills whichever still runs when the block is left by an error."""
    children: list[Process] = []
    try:
        for command in commands:
            children.append(
                await anyio.open_process(
                    command, stdin=subprocess.PIPE, stdout=None, stderr=None, env=environment
                )
            )
        yield children
    finally:
        with anyio.CancelScope(shield=True):
            for child in children:
                if child.returncode is None:
                    child.kill()
                await child.wait()


class _ChildSet:
    """The running children: stop requests to all of them, and what their exits mean."""

    def __init__(self, children: list[Process]) -> None:
        self._children = children
        self._stopping = False
        self.exit_code = 0

    async def forward_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            logger.info("%s: passing it on to the worker processes", name)
            self._stopping = True
            await self._request_stop()

    async def watch(self, child: Process) -> None:
        code = await child.wait()
        if code != 0 and self.exit_code == 0:
            self.exit_code = code if code > 0 else 128 - code  # killed by a signal: 128 + n
        if not self._stopping:
            logger.error(
                "worker process %d exited (code %d) while the others ran: stopping them",
                child.pid,
                code,
            )
            self._stopping = True
            self.exit_code = self.exit_code or 1
            await self._request_stop()

    async def _request_stop(self) -> None:
        for child in self._children:
            if child.returncode is None and child.stdin is not None:
                # One that has just exited refuses it; its watcher reports the exit.
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await child.stdin.send(b"x")


def ignore_stop_signals() -> None:
    """In a child, from its start: SIGINT and SIGTERM are the parent's to pass on (see the
    module's docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


async def stop_requests_from_parent() -> AsyncIterator[str]:
    """In a child: what the parent asks, as the names the worker logs."""
    loop = asyncio.get_running_loop()
    stdin = sys.stdin.fileno()
    while True:
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(stdin, _resolve, readable)
        try:
            await readable
        finally:
            loop.remove_reader(stdin)
        requests = os.read(stdin, 64)
        if not requests:
            yield "the parent's pipe closed"
            return
        for _ in requests:
            yield "stop request from the parent"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
