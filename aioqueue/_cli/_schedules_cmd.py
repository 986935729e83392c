"""`aioqueue schedules` and `aioqueue schedules remove NAME`: the prefix's recurring schedules."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from aioqueue._recurring.records import ScheduleInfo, list_schedules, remove_by_name

from ._common import Commands, add_connection_options, connect, print_json, print_table

__all__ = ["add_schedules_command"]


def add_schedules_command(commands: Commands) -> None:
    schedules = commands.add_parser(
        "schedules", help="list the recurring schedules (or remove one: schedules remove NAME)"
    )
    add_connection_options(schedules)
    schedules.add_argument("--json", action="store_true", help="print only JSON")
    schedules.set_defaults(run=run_list)
    actions = schedules.add_subparsers(dest="action", metavar="ACTION")
    remove = actions.add_parser(
        "remove", help="remove a schedule and its pending next tick, for every service"
    )
    add_connection_options(remove)
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--json", action="store_true", help="print only JSON")
    remove.set_defaults(run=run_remove)


async def run_list(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        infos = await list_schedules(client, args.prefix)
    if args.json:
        print_json([info.to_json() for info in infos])
        return 0
    if not infos:
        print("no schedules")
        return 0
    rows = [
        (i.name, i.event_type, i.spec, i.tz, _when(i.next_tick), _when(i.last_tick),
         _when(i.last_fired_at), _late(i))
        for i in infos
    ]  # fmt: skip
    headers = ("NAME", "TYPE", "SPEC", "TZ", "NEXT TICK", "LAST TICK", "FIRED AT", "LATE")
    print_table(headers, rows)
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        removed = await remove_by_name(client, args.prefix, args.name)
    if args.json:
        print_json({"name": args.name, "removed": removed})
    elif removed:
        print(f"removed schedule {args.name!r}")
    else:
        print(f"no schedule {args.name!r}", file=sys.stderr)
    return 0 if removed else 1


def _when(moment: datetime | None) -> str:
    """In the schedule's own zone, as its ticks are meant."""
    return moment.strftime("%Y-%m-%d %H:%M:%S%z") if moment else "-"


def _late(info: ScheduleInfo) -> str:
    """How long after its tick the last tick's event was written ('-' when ahead of it, as
    normally: a tick is produced before it is due)."""
    if info.last_tick is None or info.last_fired_at is None:
        return "-"
    late = (info.last_fired_at - info.last_tick).total_seconds()
    return f"{late:.1f} s" if late > 0 else "-"
