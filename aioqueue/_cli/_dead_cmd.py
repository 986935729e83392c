"""`aioqueue dead list|show|requeue|purge`, by type name."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from aioqueue._admin.actions import (
    DeadLetterRecord,
    dead_letter_ids,
    get_dead_letter,
    list_dead_letters,
    purge_dead_letters,
    requeue_dead_letters,
)
from aioqueue._admin.named_types import resolve_layouts
from aioqueue._cli._progress import ProgressBar
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout

from ._common import (
    CommandError,
    Commands,
    add_allow_undeclared,
    add_command,
    add_connection_options,
    confirm,
    connect,
    print_json,
    report_table,
    show_command,
)

__all__ = ["add_dead_command"]

# Below this many items a bulk operation finishes at once; a progress bar would only flicker.
PROGRESS_THRESHOLD = 50


def add_dead_command(commands: Commands) -> None:
    dead = commands.add_parser("dead", help="list, show, requeue or purge dead letters")
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="the newest dead letters, with their errors")
    add_connection_options(listing)
    listing.add_argument("types", nargs="*", metavar="TYPE", help="only these types")
    listing.add_argument("--limit", type=int, default=50, help="per type (default 50)")
    listing.add_argument("--json", action="store_true", help="print only JSON")
    listing.set_defaults(run=run_list)

    add_command(
        actions, "show", run_show, help_text="one dead letter in full", arguments=("type", "id")
    )

    for name, run, help_text in (
        ("requeue", run_requeue, "put dead letters back, due now, with a fresh attempt count"),
        ("purge", run_purge, "delete dead letters for good"),
    ):
        parser = actions.add_parser(
            name,
            help=help_text,
            description=f"{help_text[0].upper()}{help_text[1:]}: by id (TYPE ID...), every "
            "dead letter of a type (TYPE --all), or of every type (--all).",
        )
        add_connection_options(parser)
        parser.add_argument("type", nargs="?", metavar="TYPE")
        parser.add_argument("ids", nargs="*", metavar="ID")
        parser.add_argument("--all", action="store_true", help="every dead letter (of TYPE)")
        parser.add_argument("--yes", "-y", action="store_true", help="do not ask to confirm")
        parser.add_argument("--json", action="store_true", help="print only JSON")
        add_allow_undeclared(parser)
        parser.set_defaults(run=run)


async def run_list(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        records: list[DeadLetterRecord] = []
        for layout in await resolve_layouts(client, args.prefix, args.types):
            records += await list_dead_letters(client, layout, args.limit)
    rows = [
        (r.event_type, r.id, r.attempts, f"{r.died_at:%Y-%m-%d %H:%M:%S}", _short(r.error))
        for r in records
    ]
    headers = ("TYPE", "ID", "ATTEMPTS", "DIED AT (UTC)", "ERROR")
    as_json = [record.to_json() for record in records]
    code = report_table(args, as_json, headers, rows, empty="no dead letters")
    damaged = [record for record in records if record.damage and not args.json]
    for record in damaged:
        print(f"warning: dead letter {record.event_type} {record.id!r} is damaged: "
              f"{record.damage}", file=sys.stderr)  # fmt: skip
    return code


def _dead_letter_fields(record: DeadLetterRecord) -> list[tuple[str, object]]:
    fields: list[tuple[str, object]] = [
        ("attempts", record.attempts),
        ("died at", f"{record.died_at.isoformat()}"),
        ("error", record.error),
        ("payload", record.payload if record.payload is not None else "(unreadable envelope)"),
        ("context", record.context),
    ]
    if record.payload is None:
        fields.append(("raw", record.raw))
    return fields


run_show = show_command(
    get_dead_letter,
    lambda args: f"no dead letter {args.type} {args.id!r} under prefix {args.prefix!r}",
    _dead_letter_fields,
    width=10,
)


async def _targets(
    client: RedisClient, args: argparse.Namespace
) -> list[tuple[QueueLayout, list[str]]]:
    """The dead letters a requeue or purge is about: by id, by type, or all."""
    if args.ids and args.all:
        raise CommandError("give ids or --all, not both")
    if args.type is None and not args.all:
        raise CommandError("say which: TYPE ID..., TYPE --all, or --all for every type")
    if args.type is not None and not args.ids and not args.all:
        raise CommandError(f"give the ids of the {args.type} dead letters, or --all")
    allowed = args.allow_undeclared
    if args.ids:
        [layout] = await resolve_layouts(client, args.prefix, [args.type], allow_undeclared=allowed)
        return [(layout, list(args.ids))]
    types = [args.type] if args.type is not None else []
    return [
        (layout, await dead_letter_ids(client, layout))
        for layout in await resolve_layouts(client, args.prefix, types, allow_undeclared=allowed)
    ]


async def run_requeue(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        targets = await _targets(client, args)
        total = sum(len(ids) for _, ids in targets)
        # One named dead letter is undone as easily as it is done; many are not.
        if total > 1 and not confirm(
            f"Requeue {total} dead letters{_where(targets)}?", assume_yes=args.yes
        ):
            return 1
        outcomes: Counter[str] = Counter()
        with _Progress(total, "requeued", quiet=args.json) as progress:
            for layout, ids in targets:
                results = await requeue_dead_letters(client, layout, ids, progress.batch())
                outcomes.update(results.values())
                if not args.json:
                    _explain_requeue(layout.event_type, results)
    if args.json:
        print_json({outcome: outcomes[outcome] for outcome in _REQUEUE_ORDER})
    else:
        print(", ".join(f"{outcomes[o]} {o}" for o in _REQUEUE_ORDER if outcomes[o]) or "nothing")
    return 0 if outcomes["requeued"] == total else 1


_REQUEUE_ORDER = ("requeued", "missing", "pending", "unreadable")


def _explain_requeue(event_type: str, results: Mapping[str, str]) -> None:
    reasons = {
        "missing": "no such dead letter",
        "pending": "an event with that id is pending; both kept",
        "unreadable": "its envelope is unreadable; it stays dead",
    }
    for event_id, outcome in results.items():
        if outcome in reasons:
            print(f"{event_type} {event_id!r}: {reasons[outcome]}", file=sys.stderr)


async def run_purge(args: argparse.Namespace) -> int:
    async with connect(args.url) as client:
        targets = await _targets(client, args)
        total = sum(len(ids) for _, ids in targets)
        if total and not confirm(
            f"Delete {total} dead letters{_where(targets)} for good?", assume_yes=args.yes
        ):
            return 1
        deleted = 0
        with _Progress(total, "purged", quiet=args.json) as progress:
            for layout, ids in targets:
                deleted += await purge_dead_letters(client, layout, ids, progress.batch())
    if args.json:
        print_json({"purged": deleted})
    else:
        print(f"{deleted} dead letters purged")
    return 0


def _where(targets: Sequence[tuple[QueueLayout, list[str]]]) -> str:
    types = [layout.event_type for layout, ids in targets if ids]
    return f" of {', '.join(types)}" if types else ""


def _short(error: str, width: int = 70) -> str:
    line = error.splitlines()[0] if error else ""
    return line if len(line) <= width else line[: width - 1] + "…"


class _Progress:
    """A progress bar on stderr across the types of one bulk operation."""

    def __init__(self, total: int, label: str, *, quiet: bool) -> None:
        show = not quiet and total >= PROGRESS_THRESHOLD
        self._bar = ProgressBar(total, sys.stderr, label) if show else None
        self._done_before = 0
        self._current = 0

    def batch(self) -> Callable[[int], None]:
        """A progress callback for the next type, whose count starts from zero."""
        self._done_before += self._current
        self._current = 0

        def advance(done: int) -> None:
            self._current = done
            if self._bar is not None:
                self._bar.show(self._done_before + done)

        return advance

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
