"""`aioqueue schedules` and `aioqueue schedules remove NAME`: the prefix's recurring schedules."""

from __future__ import annotations

import argparse
from datetime import datetime

from aioqueue._recurring.records import ScheduleInfo, list_schedules, remove_by_name

from ._common import Commands, add_command, connect, report, report_table

__all__ = ["add_schedules_command"]


def add_schedules_command(commands: Commands) -> None:
    schedules = add_command(
        commands,
        "schedules",
        run_list,
        help_text="list the recurring schedules (or remove one: schedules remove NAME)",
    )
    actions = schedules.add_subparsers(dest="action", metavar="ACTION")
    add_command(
        actions,
        "remove",
        run_remove,
        help_text="remove a schedule and its pending next tick, for every service",
        arguments=("name",),
    )


async def run_list(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        infos = await list_schedules(client, args.prefix)
    rows = [
        (i.name, i.event_type, i.spec, i.tz, _when(i.next_tick), _when(i.last_tick),
         _when(i.last_fired_at), _late(i))
        for i in infos
    ]  # fmt: skip
    headers = ("NAME", "TYPE", "SPEC", "TZ", "NEXT TICK", "LAST TICK", "FIRED AT", "LATE")
    as_json = [info.to_json() for info in infos]
    return report_table(args, as_json, headers, rows, empty="no schedules")


async def run_remove(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        removed = await remove_by_name(client, args.prefix, args.name)
    text = f"removed schedule {args.name!r}" if removed else f"no schedule {args.name!r}"
    return report(args, {"name": args.name, "removed": removed}, text, done=removed)


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
