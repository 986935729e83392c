"""`aioqueue events list|show|run-now|cancel` and `aioqueue cancel`: look into one type's
schedule, by type name."""

from __future__ import annotations

import argparse
import functools
from datetime import datetime, timezone

from aioqueue._admin.actions import cancel_event
from aioqueue._model.errors import InvalidCursorError
from aioqueue._producing.writes import run_now
from aioqueue._transport.client import RedisClient
from aioqueue._wire.browse import EventInfo, inspect_event, pending_page
from aioqueue._wire.keys import QueueLayout

from ._common import (
    CommandError,
    Commands,
    add_command,
    add_connection_options,
    on_type,
    print_json,
    print_table,
    report,
    show_command,
)

__all__ = ["add_cancel_command", "add_events_command"]


def add_events_command(commands: Commands) -> None:
    events = commands.add_parser(
        "events", help="list a type's pending events, show one, run one now or cancel it"
    )
    actions = events.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list",
        help="pending events in schedule order, a page at a time",
        description="Pending events of TYPE in schedule order (a dispatched event sorts at its "
        "lease end). Pass the printed cursor with --cursor for the next page: the pages of one "
        "walk list an event at most once, and leave out events that moved or were written "
        "after its first page.",
    )
    add_connection_options(listing)
    listing.add_argument("type", metavar="TYPE")
    listing.add_argument("--due-after", type=_moment, metavar="T", help="from this time on")
    listing.add_argument("--due-before", type=_moment, metavar="T", help="before this time")
    listing.add_argument("--limit", type=int, default=50, help="events per page (default 50)")
    listing.add_argument("--cursor", help="the cursor a previous page printed")
    listing.add_argument("--json", action="store_true", help="print only JSON")
    listing.set_defaults(run=run_list)

    for name, run, help_text, writes in (
        ("show", run_show, "one event in full: state, due time, attempt, last error, payload",
         False),
        ("run-now", run_run_now, "make a pending event due now (its attempt count is kept)",
         True),
        ("cancel", run_cancel, "remove a pending event", True),
    ):  # fmt: skip
        add_command(
            actions, name, run, help_text=help_text, arguments=("type", "id"), writes=writes
        )


def add_cancel_command(commands: Commands) -> None:
    """`aioqueue cancel TYPE ID`: `events cancel` under its older name, whose JSON does not
    repeat the type and the id."""
    add_command(
        commands,
        "cancel",
        functools.partial(_cancel, naming_event=False),
        help_text="remove a pending event by type and id",
        arguments=("type", "id"),
        writes=True,
    )


def _moment(value: str) -> datetime:
    """An ISO 8601 time; without an offset it is taken as UTC, as the listings print."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time (e.g. 2026-11-24T18:00:00+01:00): {value!r}"
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


async def run_list(args: argparse.Namespace) -> int:
    try:
        page = await on_type(
            args,
            lambda client, layout: pending_page(
                client,
                layout,
                limit=args.limit,
                cursor=args.cursor,
                due_before=args.due_before,
                due_after=args.due_after,
            ),
        )
    except InvalidCursorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print_json(page.to_json())
        return 0
    if not page.events and page.next_cursor:
        # Every event the page examined moved since the walk's first page (see pending_page).
        print(f"none here: {args.type} events that moved since the first page are left out")
        print(f"more: --cursor {page.next_cursor}")
        return 0
    if not page.events:
        print(f"no pending {args.type} events" + (" after the cursor" if args.cursor else ""))
        return 0
    rows = [
        (e.id, f"{e.due_at:%Y-%m-%d %H:%M:%S.%f}"[:-3], e.state, e.attempt, e.payload_bytes)
        for e in page.events
    ]
    print_table(("ID", "DUE AT (UTC)", "STATE", "ATTEMPT", "PAYLOAD BYTES"), rows)
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")
    return 0


def _event_fields(info: EventInfo) -> list[tuple[str, object]]:
    fields: list[tuple[str, object]] = [
        ("state", info.state.replace("_", " ")),
        ("due at", info.due_at.isoformat() if info.due_at else "-"),
    ]
    if info.lease_ends_at:
        fields.append(("lease ends", info.lease_ends_at.isoformat()))
    if info.died_at:
        fields.append(("died at", info.died_at.isoformat()))
    return [
        *fields,
        ("attempt", str(info.attempt)),
        ("last error", info.last_error or "-"),
        ("context", ", ".join(f"{k}={v}" for k, v in info.context.items()) or "-"),
        ("payload", info.payload if info.payload is not None else "(unreadable envelope)"),
    ]


run_show = show_command(
    inspect_event,
    lambda args: f"no {args.type} {args.id!r} is pending or dead",
    _event_fields,
    width=13,  # the longest name ("lease ends:") and a space
)


async def run_run_now(args: argparse.Namespace) -> int:
    async def make_due(client: RedisClient, layout: QueueLayout) -> str:
        result = await run_now(client, layout, args.id)
        dead = result == "missing" and await inspect_event(client, layout, args.id) is not None
        return "dead" if dead else result

    result = await on_type(args, make_due)
    if result == "due":
        text = f"{args.type} {args.id!r} is due now"
    elif result == "dead":
        text = (
            f"{args.type} {args.id!r} is dead: `aioqueue dead requeue {args.type} {args.id}` "
            "puts it back"
        )
    elif result == "in_flight":
        text = (
            f"{args.type} {args.id!r} has an attempt under way (a handler has it, or its lost "
            "worker's lease ran out and the next dispatch takes it again); nothing changed"
        )
    else:
        text = f"no pending {args.type} {args.id!r}"
    as_json = {"type": args.type, "id": args.id, "result": result}
    return report(args, as_json, text, done=result == "due")


async def run_cancel(args: argparse.Namespace) -> int:
    return await _cancel(args, naming_event=True)


async def _cancel(args: argparse.Namespace, *, naming_event: bool) -> int:
    cancelled = await on_type(args, lambda client, layout: cancel_event(client, layout, args.id))
    event = f"{args.type} {args.id!r}"
    text = f"cancelled {event}" if cancelled else f"no pending {event}"
    named = {"type": args.type, "id": args.id} if naming_event else {}
    return report(args, {**named, "cancelled": cancelled}, text, done=cancelled)
