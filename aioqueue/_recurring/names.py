"""Who holds a schedule name: the prefix's name directory, and moving a name between event
types safely on Redis Cluster too.

A name is unique per prefix. Its record lives beside its event type's keys (the tick script
writes the tick's event and the record in one slot), and the directory `P:schedules` says
which type holds each name, so that tools find every schedule. Declaring a name under
another type moves it: the old type's record must stop producing ticks before the new one
starts. On one server a script could do all of it at once; on a cluster the directory and
the two records are three hash tags, three slots, which no script spans. So a move is a
short protocol whose every step is one atomic script, ordered so that no moment has two
live records, and no half-done move leaves a record firing that the directory does not
name:

1. claim (schedule_name_claim.lua, the directory's slot): the entry names the new type and
   takes the next *fencing token*; the types that may still hold a live record stay in its
   `from` list.
2. fence (schedule_fence.lua, each old type's slot): the old record becomes a tombstone
   holding the token, and its pending next tick is cancelled. A tick script finds nothing to
   produce there from then on.
3. declare (schedule_declare.lua, the new type's slot): the new record is written with the
   token, unless a tombstone or record of a newer token is there, which means a later
   declaration overtook this one (concurrent deploys of two types): it is refused.
4. make live (records.make_live): where no live record was, the new one was written
   *pending*, which produces no tick. The declaration reads the directory again, and
   schedule_activate.lua makes the record live only if the entry is still its claim's. A
   tombstone goes with its slot's data: a declaration overtaken by a later claim, whose
   fence a loss then took, would otherwise bring a second live record (the property test
   found that interleaving). A later claim of another type fences this type before it
   writes its own record, so a record made live after the read is fenced by it, or refused.
5. settle (schedule_name_settle.lua): the fences are done, `from` is cleared.

Removal is the same claim without a type, then the fences. The tokens order concurrent moves
without a lock: the later claim fences with a larger token, and no fence or declaration with
a smaller one can undo it. A process that dies between steps leaves `from` set: the next
claim of the name fences those types again, and every keeper checks the directory before
it produces a tick and fences its own record when the name is no longer its type's (the
ownership check in keeper.py), so a half-done move never leaves a record firing unseen.
A fencing token rather than only that check, because the check and the tick are two calls:
a move can fall between them, and only the fence, in the record's own slot, closes that gap.

A server that loses its data (FLUSHALL, a restart without persistence, a failover to an
empty replica) takes records, tombstones or the directory, on a cluster perhaps only some of
them. A removal always leaves a tombstone and a directory entry without a type, so a keeper
that finds no record at all, and no directory entry that gives the name elsewhere, takes it
for a loss and declares the schedule again (records.after_gone). A directory that starts
again hands out tokens from 1 while records keep larger ones, so a declaration passes the
token its type's record holds as the claim's floor (records.claim_floor).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import text
from aioqueue._wire.scripts import LuaScript

__all__ = ["NameEntry", "claim_name", "directory_key", "read_entries", "read_entry", "settle"]

CLAIM = LuaScript("schedule_name_claim")
SETTLE = LuaScript("schedule_name_settle")


def directory_key(prefix: str) -> str:
    """hash: schedule name -> JSON {type, token, from} (see the module docstring)."""
    return f"{prefix}:schedules"


@dataclass(frozen=True, slots=True)
class NameEntry:
    """Who holds a name, as the directory says."""

    event_type: str | None
    """The type that holds the name; None once it was removed."""
    token: int
    """The fencing token of the latest claim of the name."""
    unsettled: tuple[str, ...] = ()
    """Types whose record a claim has yet to fence: they may still hold a live one."""

    @classmethod
    def parse(cls, raw: bytes | str) -> NameEntry:
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError:
            fields = None
        if not isinstance(fields, dict):
            return cls(text(raw), 0)  # a plain type name, as written before tokens
        event_type = fields.get("type")
        token = fields.get("token")
        unsettled = fields.get("from")
        return cls(
            event_type=event_type if isinstance(event_type, str) else None,
            token=token if isinstance(token, int) and not isinstance(token, bool) else 0,
            unsettled=tuple(t for t in unsettled if isinstance(t, str))
            if isinstance(unsettled, list)
            else (),
        )


async def claim_name(
    client: RedisClient, prefix: str, name: str, event_type: str | None, floor: int = 0
) -> tuple[int, list[str]]:
    """Gives `name` to `event_type` (None: removes it); returns the claim's token, at least
    `floor`, and the types whose records the caller must fence with it before going on."""
    args: list[str | int] = [name, event_type or "", floor]
    reply = await CLAIM.run(client, [directory_key(prefix)], args)
    return int(reply[0]), [text(event_type) for event_type in reply[1:]]


async def settle(client: RedisClient, prefix: str, name: str, token: int) -> None:
    """Records that the fences of the claim with `token` are done."""
    await SETTLE.run(client, [directory_key(prefix)], [name, token])


async def read_entry(client: RedisClient, prefix: str, name: str) -> NameEntry | None:
    raw = await gated_call(client, lambda: client.hget(directory_key(prefix), name))
    return None if raw is None else NameEntry.parse(raw)


async def read_entries(client: RedisClient, prefix: str) -> dict[str, NameEntry]:
    """Every name of the prefix's directory, removed ones included."""
    entries = await gated_call(client, lambda: client.hgetall(directory_key(prefix)))
    return {text(name): NameEntry.parse(raw) for name, raw in entries.items()}
