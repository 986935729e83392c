"""Event types as operators name them: which ones a prefix has declared, and the layout of
each type a tool is asked about (the CLI and the HTTP API both resolve types here).

A type is declared once a service or producer of the library has touched it: its queue is
recorded in the type registry (`P:types`, registry.py: every writer records the type it
writes, a service the types it handles) or its payload schema is published (`P:schemas`,
schemas.py). The tools take a type by name, so without this check a misspelt name read an
empty queue ("no pending Knwon events", exit 0) or wrote events and pauses that no handler
and no listing would ever see. A type nobody declared is refused, naming the known ones,
unless the caller says a producer is deployed before its consumers (`allow_undeclared`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from functools import partial

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import readable_text
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.registry import known_layouts, registry_key, resolve_layout
from aioqueue._wire.schemas import schemas_key

__all__ = [
    "MAX_NAMED",
    "UndeclaredTypeError",
    "declared_type_names",
    "require_declared",
    "resolve_declared",
    "resolve_layouts",
]

MAX_NAMED = 20
"""Known types an error names at most: a prefix may have hundreds, and a line must stay
readable (the closest matches are named first)."""


class UndeclaredTypeError(LookupError):
    """Event types that no service or producer has declared under the prefix. `undeclared`
    are the names asked for; `known` every declared type, sorted."""

    def __init__(self, prefix: str, undeclared: Sequence[str], known: Sequence[str]) -> None:
        self.prefix = prefix
        self.undeclared = list(undeclared)
        self.known = list(known)
        super().__init__(self._describe())

    def named_known(self) -> list[str]:
        """At most MAX_NAMED of the known types: those closest to the names asked for first,
        then the others in order."""
        close: list[str] = []
        for name in self.undeclared:
            close += difflib.get_close_matches(name, self.known, n=3, cutoff=0.6)
        ordered = list(dict.fromkeys([*close, *self.known]))
        return ordered[:MAX_NAMED]

    def _describe(self) -> str:
        names = ", ".join(repr(name) for name in self.undeclared)
        plural = "s" if len(self.undeclared) > 1 else ""
        what = f"unknown event type{plural} {names} under prefix {self.prefix!r}"
        if not self.known:
            return f"{what}: no service has declared any type there yet"
        shown = self.named_known()
        more = len(self.known) - len(shown)
        listed = ", ".join(shown) + (f" and {more} more" if more else "")
        return f"{what}: no service declared it; known types: {listed}"


async def declared_type_names(client: RedisClient, prefix: str) -> list[str]:
    """Every type the prefix's registry records or has a published schema for, sorted."""
    recorded = await gated_call(client, lambda: client.hkeys(registry_key(prefix)))
    published = await gated_call(client, lambda: client.hkeys(schemas_key(prefix)))
    return sorted({readable_text(name) for name in [*recorded, *published]})


async def require_declared(client: RedisClient, prefix: str, event_types: Sequence[str]) -> None:
    """Raises UndeclaredTypeError unless every one of `event_types` is declared."""
    undeclared = []
    for name in event_types:
        if await gated_call(client, partial(client.hexists, registry_key(prefix), name)):
            continue
        if not await gated_call(client, partial(client.hexists, schemas_key(prefix), name)):
            undeclared.append(name)
    if undeclared:
        raise UndeclaredTypeError(prefix, undeclared, await declared_type_names(client, prefix))


async def resolve_layouts(
    client: RedisClient,
    prefix: str,
    event_types: Sequence[str] = (),
    *,
    allow_undeclared: bool = False,
) -> list[QueueLayout]:
    """The layouts of `event_types` (every recorded type when empty), for reading.

    A declared type missing from the registry (only its schema is published) is taken as
    unpartitioned, as is one whose entry is damaged (a warning is logged). A type nobody
    declared raises UndeclaredTypeError, unless `allow_undeclared`: then it is taken as
    unpartitioned too, the queue a producer in another language may have written without
    recording it.
    """
    registered = {layout.event_type: layout for layout in await known_layouts(client, prefix)}
    if not event_types:
        return list(registered.values())
    missing = [name for name in event_types if name not in registered]
    if missing and not allow_undeclared:
        await require_declared(client, prefix, missing)
    return [registered.get(name) or QueueLayout(prefix, name) for name in event_types]


async def resolve_declared(
    client: RedisClient,
    prefix: str,
    event_type: str,
    *,
    allow_undeclared: bool = False,
    record: bool = False,
) -> QueueLayout:
    """The type's layout for a change of how every service treats it (pause, resume, rate
    limit): raises PartitionCountMismatchError when its registry entry is damaged, rather
    than guess, and UndeclaredTypeError for a type nobody declared unless
    `allow_undeclared`. With `record`, a type the registry lacks is recorded (unpartitioned),
    as every writer records the types it writes, so that what the change left behind (a
    pause, a rate limit) shows in `stats`, `paused()` and the dashboard."""
    if not allow_undeclared:
        await require_declared(client, prefix, [event_type])
    return await resolve_layout(client, prefix, event_type, None, record=record)
