"""`aioqueue workers` lists the live workers of a prefix; `aioqueue check` is the exec probe:
exit 0 when a live worker runs on this host (or handles a type), 1 with the reason when
not, or when the server does not answer (see _admin/workers.py)."""

from __future__ import annotations

import argparse
import socket
import sys
from datetime import datetime

from aioqueue._admin.workers import WorkersView, read_workers_view
from aioqueue._model.workers import Worker, WorkerState
from aioqueue._wire.workers import read_workers

from ._common import (
    CommandError,
    Commands,
    add_command,
    add_connection_options,
    answering_in_time,
    connect,
    print_json,
    print_table,
)

__all__ = ["add_workers_commands"]

HEADERS = ("HOST", "PID", "STATE", "VERSION", "UP", "LAST BEAT", "HANDLERS (IN HAND/PARALLELISM)")


def add_workers_commands(commands: Commands) -> None:
    add_command(
        commands,
        "workers",
        run_workers,
        help_text="the live workers of the prefix, their handlers, and types no worker attends",
        description="Lists every running service with handlers under the prefix, from the "
        "worker registry its heartbeats keep, with the events each handler holds; then any "
        "type with events due now and no running worker that handles it.",
    )

    check = commands.add_parser(
        "check",
        help="exec probe: exit 0 when a live worker runs here (or handles --type), else 1",
        description="Exits 0 when the worker registry lists a running worker on this host "
        "(--host another; with --type, one that handles the type, on any host unless --host "
        "is given too), 1 with the reason otherwise, or when the server does not answer "
        "within 5 s. For Kubernetes exec probes and scripts.",
    )
    add_connection_options(check)
    check.add_argument("--type", dest="event_type", metavar="TYPE", help="a worker for TYPE")
    check.add_argument("--host", help="a worker on HOST (default: this host, without --type)")
    check.set_defaults(run=run_check)


async def run_workers(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        view = await read_workers_view(client, args.prefix)
    if args.json:
        print_json(view.to_json())
        return 0
    _print_view(view, args.prefix)
    return 0


def _print_view(view: WorkersView, prefix: str) -> None:
    if not view.workers:
        print(f"no live workers under prefix {prefix!r}")
    else:
        rows = [
            (
                worker.host,
                worker.pid,
                worker.state.value,
                worker.version,
                _age(view.server_time, worker.started_at),
                f"{_age(view.server_time, worker.beat_at)} ago",
                ", ".join(
                    f"{handler.type} {handler.in_hand}/{handler.parallelism}"
                    for handler in worker.handlers
                ),
            )
            for worker in view.workers
        ]
        print_table(HEADERS, rows)
    for item in view.unattended:
        print(
            f"warning: {item.event_type} has {item.waiting} events due and no running worker "
            "handles it",
            file=sys.stderr,
        )
    for worker_id in view.unreadable:
        print(f"warning: worker record {worker_id!r} does not read as one", file=sys.stderr)


def _age(now: datetime, then: datetime) -> str:
    seconds = max(0.0, (now - then).total_seconds())
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


async def run_check(args: argparse.Namespace) -> int:
    host = args.host or (None if args.event_type else socket.gethostname())
    async with connect(args.url) as client:
        with answering_in_time(args.url):
            listed = await read_workers(client, args.prefix)
    matching = [worker for worker in listed.workers if _matches(worker, host, args.event_type)]
    wanted = " ".join(
        part
        for part in (
            f"for {args.event_type}" if args.event_type else "",
            f"on host {host}" if host else "",
        )
        if part
    )
    if not matching:
        raise CommandError(f"no running worker {wanted} under prefix {args.prefix!r}")
    worker = matching[0]
    age = (listed.server_time - worker.beat_at).total_seconds()
    print(f"ok: worker {worker.id} {wanted}, last heartbeat {max(0.0, age):.1f} s ago")
    return 0


def _matches(worker: Worker, host: str | None, event_type: str | None) -> bool:
    return (
        worker.state is WorkerState.RUNNING
        and (host is None or worker.host == host)
        and (event_type is None or worker.handles(event_type))
    )
