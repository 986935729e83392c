"""One enqueue.lua call: the events it carries, its write mode, its keys and arguments, and
running several calls together (confirmed by the replicas, given a `Durability`).

Every producer's enqueue ends here (the EventService, the SyncProducer, the HTTP API and the
Spark writers), so the script's keys and arguments are built in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aioqueue._model.config import Durability
from aioqueue._producing.durability import DurableCalls, durable_pipelined_steps
from aioqueue._producing.run_records import RecordedCall
from aioqueue._transport.steps import Steps
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import ENQUEUE, ScriptCall

__all__ = ["EnqueueCall", "EnqueueItem", "WriteMode", "enqueue_calls_steps", "scheduled_flags"]


@dataclass(slots=True)  # not frozen: one is made per event, and frozen init is slower
class EnqueueItem:
    """One event to schedule: `due_ms` is a delay, or epoch ms when `absolute`."""

    id: str
    payload: str
    context_json: str
    due_ms: int
    absolute: bool


@dataclass(frozen=True, slots=True)
class WriteMode:
    """How an enqueue call writes its events: enqueue.lua's mode (ARGV[1]; `argument`
    renders it)."""

    replace: bool = False
    """Overwrite a pending event with the same id (new payload, context and due time, attempt
    0); else keep it."""
    max_wait_ms: int | None = None
    """With `replace`, a bounded debounce: a replacement never becomes due later than its
    series' first enqueue plus this many milliseconds."""
    confirmed: bool = False
    """WAIT follows the call on its connection (see durability.py): a call that schedules no
    event then writes a no-op, so that the WAIT covers the events it kept."""
    run: RecordedCall | None = None
    """A Spark task's call: it records what it did in the task's run record (see
    run_records.py)."""

    def __post_init__(self) -> None:
        if self.max_wait_ms is not None and not self.replace:
            raise ValueError("max_wait_ms bounds a debounce: it needs replace=True")

    def argument(self) -> str:
        """The mode as enqueue.lua reads it: '0' (keep), '1' (replace) or '1:<max_wait ms>',
        then '@<attempt>:<call>' for a Spark task's call, then '+wait' when confirmed."""
        if not self.replace:
            mode = "0"
        elif self.max_wait_ms is None:
            mode = "1"
        else:
            mode = f"1:{self.max_wait_ms}"
        if self.run is not None:
            mode += f"@{self.run.attempt}:{self.run.call}"
        if self.confirmed:
            mode += "+wait"
        return mode


@dataclass(frozen=True, slots=True)
class EnqueueCall:
    """One enqueue.lua call: `items`, all of one queue (a type, or one partition of it),
    written as `mode` says."""

    keys: QueueKeys
    event_type: str
    items: Sequence[EnqueueItem]
    mode: WriteMode

    def script_call(self) -> ScriptCall:
        """The call's keys and arguments (see enqueue.lua's header)."""
        keys = self.keys
        # Positional: the script tells its optional keys by their places.
        script_keys = [
            keys.schedule, keys.events, keys.sequence, keys.wake, keys.counts, keys.ready,
        ]  # fmt: skip
        run = self.mode.run
        if run is not None:
            script_keys.append(run.record_key(keys))
        args: list[str | int] = [self.mode.argument(), self.event_type]
        for item in self.items:
            args += [
                item.id,
                item.payload,
                item.context_json,
                "at" if item.absolute else "delay",
                item.due_ms,
            ]
        return ScriptCall(script_keys, args)

    def confirmed(self) -> EnqueueCall:
        """The same call, followed by WAIT on its connection (see WriteMode.confirmed)."""
        return dataclasses.replace(self, mode=dataclasses.replace(self.mode, confirmed=True))


def enqueue_calls_steps(
    client: object, calls: Sequence[EnqueueCall], *, durability: Durability | None = None
) -> Steps[list[list[bool]]]:
    """Runs enqueue calls together (one round trip on a single server, one per node on a
    cluster); returns, per call, whether each of its items was scheduled (False: an event
    with that id was pending and kept). With `durability`, the calls are confirmed and each
    connection confirms them in the same round trip (see durability.py); raises
    DurabilityError when a confirmation falls short, and the events may then exist or not:
    enqueueing them again is safe."""
    replies: list[Any]
    if durability is None:
        script_calls = [call.script_call() for call in calls]
        replies = yield from ENQUEUE.pipelined_steps(client, script_calls)
    else:
        confirmed = [call.confirmed().script_call() for call in calls]
        durable = DurableCalls(durability, touch=_touch)
        replies = yield from durable_pipelined_steps(ENQUEUE, client, confirmed, durable)
    return [scheduled_flags(reply) for reply in replies]


_TOUCH_MODE = WriteMode(confirmed=True).argument()


def _touch(call: ScriptCall) -> ScriptCall:
    """A confirmed call on `call`'s keys that schedules nothing: it writes only the no-op
    that lets a WAIT after it confirm what an earlier call on those keys wrote."""
    keys, args = call
    event_type = args[1]
    return ScriptCall(keys, [_TOUCH_MODE, event_type])


def scheduled_flags(reply: Any) -> list[bool]:
    """enqueue.lua's reply: 1 scheduled, 0 kept the pending event, per item."""
    return [int(result) == 1 for result in reply]
