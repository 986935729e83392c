"""`aioqueue stats`: per event type, how deep the queue is and how late it runs."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

import anyio

from aioqueue._admin.stats import StatsSnapshot, read_stats

from ._common import Commands, add_connection_options, connect, print_json, print_table

__all__ = ["add_stats_command"]

HEADERS = (
    "TYPE", "PARTS", "PENDING", "DUE NOW", "READY", "IN FLIGHT", "DEAD", "OLDEST OVERDUE",
    "PAUSED", "RATE LIMIT",
)  # fmt: skip


def add_stats_command(commands: Commands) -> None:
    parser = commands.add_parser(
        "stats",
        help="pending, due now, ready, in flight, dead, oldest overdue and paused per type",
        description="Queue statistics per event type, counted on the server's clock. "
        "docs/operating/cli.md ('What stats shows') says what each number means.",
    )
    add_connection_options(parser)
    parser.add_argument("types", nargs="*", metavar="TYPE", help="only these types (default all)")
    parser.add_argument("--json", action="store_true", help="print only JSON (a line per refresh)")
    parser.add_argument("--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument(
        "--interval", type=float, default=2.0, help="seconds between refreshes (default 2)"
    )
    parser.add_argument(
        "--count", type=int, default=None, help="with --watch: stop after this many refreshes"
    )
    parser.set_defaults(run=run_stats)


async def run_stats(args: argparse.Namespace) -> int:
    refreshes = 0
    interactive = sys.stdout.isatty() and not args.json
    async with connect(args.url) as client:
        while True:
            snapshot = await read_stats(client, args.prefix, args.types)
            refreshes += 1
            if args.json:
                print_json(snapshot.to_json())
            else:
                if args.watch and interactive:
                    sys.stdout.write("\x1b[H\x1b[2J")  # clear the screen: a live view
                _print_snapshot(snapshot, args.prefix, watching=args.watch)
            if not args.watch or (args.count is not None and refreshes >= args.count):
                return 0
            await anyio.sleep(args.interval)


def _print_snapshot(snapshot: StatsSnapshot, prefix: str, *, watching: bool) -> None:
    server_time = datetime.fromtimestamp(snapshot.server_time_ms / 1000, tz=timezone.utc)
    if watching:
        print(f"prefix {prefix!r} at {server_time:%Y-%m-%d %H:%M:%S} UTC (server clock)")
    if not snapshot.queues:
        print(f"no event types registered under prefix {prefix!r}")
        for problem in snapshot.problems:
            print(f"warning: {problem}", file=sys.stderr)
        return
    rows = [
        (
            q.event_type,
            q.partitions,
            q.pending,
            q.due_now,
            q.ready,
            q.in_flight,
            q.dead,
            _seconds(q.oldest_overdue),
            "yes" if q.paused else "-",
            str(q.rate_limit) if q.rate_limit else "-",
        )
        for q in snapshot.queues
    ]
    print_table(HEADERS, rows)
    for problem in snapshot.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if watching:
        print(flush=True)


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"
