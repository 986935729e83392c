"""Durable writes: an enqueue returns only once replicas (and the primary's AOF) have it.

Redis acknowledges a write as soon as the primary has it in memory and copies it to replicas
afterwards, so a primary that dies in between takes acknowledged events with it. Two
commands close that window, each blocking until `timeout` at most:

- `WAIT numreplicas timeout` returns how many replicas acknowledged every write made so far
  *on its own connection* (the connection's replication offset after its last write).
- `WAITAOF numlocal numreplicas timeout` (Redis 7.2, Valkey) the same for writes fsynced to
  an AOF, locally and on replicas. It fails at once where AOF is off.

Three consequences shape this module:

1. The confirmation must follow the write on the same connection, in the same round trip:
   `steps.Confirm` makes a Pipeline end with WAIT (and WAITAOF) on every connection it uses,
   one per node on a cluster.
2. A connection that wrote nothing has nothing to confirm: on Redis 7.2+ and Valkey its WAIT
   returns at once, whatever the replicas lack (Redis 6.2 and 7.0 count everything the primary
   wrote before the connection's last command, which is stricter). An enqueue that keeps an
   already pending event writes nothing, yet its caller (retrying after a DurabilityError,
   say) must learn whether that event is safe.
   So a durable enqueue call is marked (`WriteMode.confirmed`, see enqueue_calls.py): the
   script then writes a no-op when it wrote nothing else, which moves the connection's offset
   past everything the primary executed before, the kept event's own write included (the
   replication stream is one ordered stream per primary).
3. A call refused inside the pipeline (a server without the function library yet, a slot
   that moved) is run again on its own, through redis-py's routing and the script's
   fallbacks, on whatever connection that takes; it is then confirmed by one more pipeline of
   marked calls that write nothing on the same keys (`touch`), followed by the confirmation.
   A connection whose calls were all refused wrote nothing, so its own confirmation does not
   count (after a cluster failover its node may be a replica, which refuses WAIT).

WAITAOF is sent only for the primary's own AOF (numlocal 1, numreplicas 0): replicas without
AOF never report an fsynced offset, so counting replicas' AOF would time out on the most
common setup. Where a server answers that it has no AOF, or no WAITAOF (before 7.2), the
client leaves WAITAOF out for WAITAOF_RECHECK seconds, then asks again: an error reply per
enqueue would fill the server's error statistics, and AOF can be turned on at run time or a
failover can bring a primary that has it.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from aioqueue._model.config import Durability
from aioqueue._model.errors import DurabilityError
from aioqueue._transport.steps import Command, Confirm, Pipeline, Steps
from aioqueue._wire.scripts import LuaScript, ScriptCall

__all__ = ["WAITAOF_RECHECK", "DurableCalls", "durable_pipelined_steps"]

WAITAOF_RECHECK = 10.0
"""Seconds a client leaves WAITAOF out after a server said it cannot run it (no AOF, or a
version without WAITAOF), before it asks again."""

# Per client (asyncio or blocking): the monotonic time until which WAITAOF is left out.
_without_waitaof: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()

_RETRY_IS_SAFE = (
    "The events may exist: the primary has them, and delivers them unless it dies before a "
    "replica has them. Enqueue is idempotent per event id, so enqueueing the same events "
    "again is safe (one already stored comes back as False) until a call returns."
)


class DurableCalls:
    """How script calls are confirmed under `durability`: the commands that follow them on
    each connection, what their replies mean, and the call that confirms a call run on its
    own (`touch`: same keys, marked, writing nothing but the no-op)."""

    __slots__ = ("durability", "touch")

    def __init__(self, durability: Durability, touch: Callable[[ScriptCall], ScriptCall]) -> None:
        self.durability = durability
        self.touch = touch

    def confirm(self, client: object) -> Confirm:
        """WAIT, then WAITAOF unless this client's server recently said it cannot."""
        durability = self.durability
        commands: list[Command] = [("WAIT", durability.replicas, durability.timeout_ms)]
        if _without_waitaof.get(client, 0.0) <= time.monotonic():
            commands.append(("WAITAOF", 1, 0, durability.timeout_ms))
        # Each blocks up to the timeout; the server runs them one after the other.
        return Confirm(commands, blocks_for=len(commands) * durability.timeout)

    def check(self, client: object, confirmations: Sequence[Sequence[Any]]) -> None:
        """Raises DurabilityError unless every connection's confirmation holds."""
        durability = self.durability
        least: int | None = None
        problems: list[str] = []
        aof_missing = bool(confirmations)
        for replies in confirmations:
            wait_reply, *aof_reply = replies
            if isinstance(wait_reply, BaseException):
                problems.append(f"the server refused WAIT: {wait_reply}{_hint(wait_reply)}")
            else:
                confirmed = int(wait_reply)
                least = confirmed if least is None else min(least, confirmed)
                if confirmed < durability.replicas:
                    problems.append(
                        f"{confirmed} of {durability.replicas} replicas acknowledged it (WAIT)"
                    )
            if not aof_reply:
                aof_missing = False
                continue
            reply = aof_reply[0]
            if isinstance(reply, BaseException):
                if not _cannot_waitaof(reply):
                    aof_missing = False
                    problems.append(f"the server refused WAITAOF: {reply}{_hint(reply)}")
            else:
                aof_missing = False
                if int(reply[0]) < 1:
                    problems.append("the primary did not fsync it to its AOF (WAITAOF)")
        if aof_missing:
            _without_waitaof[client] = time.monotonic() + WAITAOF_RECHECK
        if problems:
            raise DurabilityError(
                f"the write was not confirmed within {durability.timeout_ms} ms: "
                f"{'; '.join(sorted(set(problems)))}. {_RETRY_IS_SAFE}",
                replicas=durability.replicas,
                confirmed=least,
            )

    def refused(self, error: BaseException) -> DurabilityError:
        """The error for a confirming call (`touch`) that the server refused."""
        return DurabilityError(
            f"the write could not be confirmed: the server refused the confirming call "
            f"({error}). {_RETRY_IS_SAFE}",
            replicas=self.durability.replicas,
            confirmed=None,
        )


def durable_pipelined_steps(
    script: LuaScript, client: object, calls: Sequence[ScriptCall], durable: DurableCalls
) -> Steps[list[Any]]:
    """Several calls of `script` in one pipeline, every connection of it confirming its
    calls (WAIT, WAITAOF) in the same round trip; calls refused there are run again on their
    own and confirmed afterwards (see the module docstring). Raises DurabilityError when a
    confirmation falls short."""
    reply = yield Pipeline(
        [script.call(client, keys, args) for keys, args in calls], durable.confirm(client)
    )
    replies = reply.replies
    results = []
    ran_alone = []
    for call, call_reply in zip(calls, replies, strict=True):
        if isinstance(call_reply, ResponseError):
            # Run again first, even when the confirmation fell short: through redis-py's
            # routing, a MOVED teaches the client where the slot went, without which a
            # retry would go back to the same node.
            call_reply = yield from script.steps(client, *call)
            ran_alone.append(call)
        elif isinstance(call_reply, BaseException):
            raise call_reply
        results.append(call_reply)
    # A connection whose every call was refused wrote nothing in the pipeline (its node may
    # be a replica now, which refuses WAIT): those calls are confirmed where they ran again.
    durable.check(
        client,
        [
            confirmation.replies
            for confirmation in reply.confirmations
            if any(
                not isinstance(replies[position], BaseException)
                for position in confirmation.positions
            )
        ],
    )
    if ran_alone:
        touches = [durable.touch(call) for call in ran_alone]
        yield from _confirm_alone(script, client, touches, durable)
    return results


def _confirm_alone(
    script: LuaScript, client: object, touches: Sequence[ScriptCall], durable: DurableCalls
) -> Steps[None]:
    """Confirms calls that ran outside the confirmed pipeline: `touches` (calls on the same
    keys that write a no-op and nothing else) followed by the confirmation, on the same
    connections."""
    commands = [script.call(client, keys, args) for keys, args in touches]
    reply = yield Pipeline(commands, durable.confirm(client))
    for touched in reply.replies:
        if isinstance(touched, BaseException):
            raise durable.refused(touched)
    durable.check(client, [confirmation.replies for confirmation in reply.confirmations])


def _cannot_waitaof(error: BaseException) -> bool:
    """The server has no AOF, or no WAITAOF at all: nothing to wait for on its disk."""
    message = str(error).lower()
    return isinstance(error, ResponseError) and (
        "appendonly is disabled" in message or "unknown command" in message
    )


def _hint(error: BaseException) -> str:
    if isinstance(error, NoPermissionError):
        return " (durability needs +wait, and +waitaof on Redis 7.2+ and Valkey, in the ACL rule)"
    return ""
