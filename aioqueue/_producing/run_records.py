"""A Spark run's record: what makes a retried Spark task write nothing twice.

Each task of a run keeps a record in each queue partition it writes to
(`QueueKeys.run_record`): every enqueue call of the task's attempt stores there the ids it
was given and what it did with each (enqueue.lua), one entry per call. A retried attempt
first takes the record over (take_over_run.lua): that fences out every earlier attempt (a
killed one may still have a pipeline on its way), so what it reads back is all the task
ever wrote. It then skips those ids, counting their recorded results, and writes the rest.

One entry per call rather than per event: the record is written by every call of every run
and read only by a retry, and per event it cost a quarter of what the server spends on a
Spark row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from aioqueue._transport.steps import Steps
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import LuaScript

__all__ = ["RecordedCall", "take_over_steps"]

TAKE_OVER_RUN = LuaScript("take_over_run")


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """Where an enqueue call records itself: its Spark task's run record, under its
    attempt and its number in that attempt (the enqueue mode's `run`, see
    enqueue_calls.WriteMode)."""

    run_id: str
    task: int
    """The Spark partition the task writes."""
    attempt: int
    call: int
    """Numbers the attempt's calls on one record; each is recorded once."""

    def record_key(self, keys: QueueKeys) -> str:
        return keys.run_record(self.run_id, self.task)


def take_over_steps(
    client: object, keys: QueueKeys, run_id: str, task: int, attempt: int
) -> Steps[dict[str, list[bool]]]:
    """Takes the task's record in `keys`' queue over for `attempt`: returns each id earlier
    attempts handled, with a result for each time they met it (True: scheduled, False: kept
    pending), in the order they did. Raises ResponseError (ABANDONED) when a later attempt
    took it over."""
    entries: Sequence[bytes | str] = yield from TAKE_OVER_RUN.steps(
        client, [keys.run_record(run_id, task)], [attempt]
    )
    recorded: dict[str, list[bool]] = {}
    # Fields are '<attempt>:<call>': in that order, an id met twice (a duplicate in the
    # frame) gets its results back in the order it first got them.
    calls = sorted(
        zip(entries[0::2], entries[1::2], strict=True),
        key=lambda entry: tuple(int(number) for number in text(entry[0]).split(":")),
    )
    for _, value in calls:
        ids, flags = orjson.loads(value)
        for event_id, flag in zip(ids, flags, strict=True):
            recorded.setdefault(event_id, []).append(flag == "1")
    return recorded
