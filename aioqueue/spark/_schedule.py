"""Scheduling the rows of a DataFrame as events, from the executors, in batch or streaming."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from pyspark.sql import DataFrame

from aioqueue._model.checks import refuse_unknown_keywords
from aioqueue._model.config import Durability
from aioqueue._model.event import Event
from aioqueue._wire.keys import QueueLayout

from ._columns import (
    ScheduleColumns,
    checked_batch_size,
    checked_event_type,
    checked_prefix,
)
from ._connection import published_schema, redis_client, resolve_layout
from ._schema_check import check_payload_columns
from ._write import COUNTS_SCHEMA, WritePlan, write_batches

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11 (3.10 is supported)

__all__ = [
    "ForeachBatchWriter",
    "ScheduleOptions",
    "ScheduleResult",
    "foreach_batch_writer",
    "schedule_dataframe",
]


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """What a run did: rows written as new events, and rows whose id was already pending.

    With `replace=True` every row overwrites, so every row counts as scheduled.
    """

    scheduled: int = 0
    already_pending: int = 0

    @property
    def rows(self) -> int:
        """Every row the run handled: `scheduled + already_pending` (the frame's row count)."""
        return self.scheduled + self.already_pending

    def __add__(self, other: ScheduleResult) -> ScheduleResult:
        return ScheduleResult(
            self.scheduled + other.scheduled, self.already_pending + other.already_pending
        )


class ScheduleOptions(TypedDict, total=False):
    """The options of `schedule_dataframe` and `foreach_batch_writer` besides `url`, each
    optional; `schedule_dataframe` says what each means."""

    id_col: str
    """The event id's column (default "id")."""
    due_col: str | None
    """A timestamp column: when each event is due."""
    delay_col: str | None
    """Or seconds (a number) or a day-time interval from the server's now."""
    payload_cols: Sequence[str] | None
    """The payload's columns (default: every column not named by another option)."""
    context_cols: Sequence[str] | None
    """String columns (or maps of strings) that become the event's context."""
    prefix: str
    """The service's key prefix (default "aioqueue")."""
    replace: bool
    """Overwrite pending events of the same ids (default False)."""
    batch_size: int
    """Rows per enqueue script call (default 1000)."""
    partitions: int | None
    """The type's partition count, when no service has recorded it yet."""
    durability: Durability | None
    """Replicas that must confirm every write, as the service's `durability(...)`."""


def schedule_dataframe(
    df: DataFrame, event_type: str | type[Event], *, url: str, **options: Unpack[ScheduleOptions]
) -> ScheduleResult:
    """Schedules one event of `event_type` per row of `df`; returns how many were new.

    `url` names the Redis server (as `EventServiceBuilder.url` does); the options, each
    optional (ScheduleOptions):
    - `id_col`: the event id (a non-null, non-empty string column).
    - `due_col`: when it is due (a timestamp column), or `delay_col`: seconds (a number) or a
      day-time interval from the Redis server's now; neither means due now.
    - `payload_cols`: the columns that form the payload object, each a field of the event
      class (default: every column not named above); `context_cols`: string columns (or
      maps of strings) that become the event's context.
    - `partitions`: the type's partition count, needed only when no service has recorded
      the type in the prefix's registry yet.
    - `durability`: `Durability(replicas, timeout)` confirms every pipeline of every task
      as the service's `durability(...)` does (docs/concepts/guarantees.md); a write short
      of it fails the task with DurabilityError, and Spark's retry of the task confirms
      again what its run's record says it wrote.

    Bad input raises InvalidDataFrameError before anything is written (the frame is checked
    in one Spark job, then written in another: `cache()` a frame that is costly to compute),
    and so does a payload column that does not fit the type's published schema (docs/
    wire-format.md; a type without one is written unchecked).
    Each Spark partition is written by its task with its own connection, one enqueue script
    call per `batch_size` rows of the same queue partition, pipelined.

    A retried Spark task writes nothing twice: each task records, in the type's hash tag,
    what it did with each id (kept for a day), and a retried attempt counts those results
    instead of writing them again, so an event its failed attempt wrote and a handler
    finished meanwhile is not created again, and the counts are those of the first attempt.
    A second run is a new run: an id still pending is kept (counted as `already_pending`),
    but one whose handler already finished is scheduled again; filter such rows out, or give
    each run's events ids of their own (for example with the day in them). With
    `replace=True` every row overwrites its pending event (new payload, context and due time,
    attempt 0), once per run. Duplicate ids inside one frame count as already pending; which
    row wins is not defined.
    """
    # A run is what a streaming writer does with each micro-batch, without the caching.
    return ScheduleJob.of("schedule_dataframe", event_type, url, options).write(df)


def foreach_batch_writer(
    event_type: str | type[Event], *, url: str, **options: Unpack[ScheduleOptions]
) -> ForeachBatchWriter:
    """A function for `df.writeStream.foreachBatch(...)` that schedules each micro-batch.

    Takes the options of `schedule_dataframe`; each micro-batch is one run, cached while it
    is checked and written. A replayed micro-batch (a restart from the checkpoint before the
    batch was committed) keeps the ids still pending, like a second run.
    """
    return ForeachBatchWriter(ScheduleJob.of("foreach_batch_writer", event_type, url, options))


class ForeachBatchWriter:
    """Schedules each micro-batch it is called with; `total` sums the results so far."""

    def __init__(self, job: ScheduleJob) -> None:
        self._job = job
        self.total = ScheduleResult()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # Checking and writing are two Spark jobs over the batch: cached, the micro-batch's
        # source is read once, not twice.
        batch.persist()
        try:
            self.total += self._job.write(batch)
        finally:
            batch.unpersist()

    def __repr__(self) -> str:
        return f"<ForeachBatchWriter {self._job.event_type!r} total={self.total}>"


@dataclass
class ScheduleJob:
    """The options of one run (or one stream), checked; the layout is resolved on first use."""

    event_type: str
    url: str
    columns: ScheduleColumns
    prefix: str
    replace: bool
    batch_size: int
    partitions: int | None
    durability: Durability | None = None
    layout: QueueLayout | None = None

    @classmethod
    def of(
        cls, caller: str, event_type: str | type[Event], url: str, options: ScheduleOptions
    ) -> ScheduleJob:
        """The options `caller` was given, checked (InvalidDataFrameError, ConfigurationError;
        TypeError for an unknown one)."""
        refuse_unknown_keywords(caller, options, ScheduleOptions.__optional_keys__)
        columns = ScheduleColumns(
            id_col=options.get("id_col", "id"),
            due_col=options.get("due_col"),
            delay_col=options.get("delay_col"),
            payload_cols=_tuple_or_none(options.get("payload_cols")),
            context_cols=tuple(options.get("context_cols") or ()),
        )
        return cls(
            event_type=checked_event_type(event_type),
            url=url,
            columns=columns,
            prefix=checked_prefix(options.get("prefix", "aioqueue")),
            replace=bool(options.get("replace", False)),
            batch_size=checked_batch_size(options.get("batch_size", 1000)),
            partitions=options.get("partitions"),
            durability=Durability.checked(options.get("durability")),
        )

    def write(self, df: DataFrame) -> ScheduleResult:
        prepared = self.columns.prepare(df)
        with redis_client(self.url) as client:
            # Read for every write: a deploy may publish a new schema between micro-batches.
            published = published_schema(client, self.prefix, self.event_type)
            not_null: list[str] = []
            if published is not None:
                not_null = check_payload_columns(
                    self.event_type, published.schema, dict(prepared.payload_types)
                )
            prepared.check_data(not_null)
            if self.layout is None:
                self.layout = resolve_layout(
                    client, self.prefix, self.event_type, self.partitions, record=True
                )
        plan = WritePlan(
            url=self.url,
            layout=self.layout,
            run_id=uuid.uuid4().hex,
            absolute=self.columns.due_kind == "at",
            replace=self.replace,
            batch_size=self.batch_size,
            context_maps=prepared.context_maps,
            context_names=prepared.context_names,
            durability=self.durability,
        )
        write = functools.partial(write_batches, plan)
        counts = prepared.frame.mapInArrow(write, COUNTS_SCHEMA).collect()
        # Every task succeeded: no attempt of this run will look at its record again (a
        # failed run's records expire by themselves, a day after their last write). A new
        # client: the job may have outlasted the server's idle timeout.
        with redis_client(self.url) as client, client.pipeline(transaction=False) as deletes:
            # One key per task and queue partition, each queue partition in its own slot.
            for keys in plan.layout.all_keys:
                for count in counts:
                    deletes.delete(keys.run_record(plan.run_id, count.task))
            deletes.execute()
        return sum(
            (ScheduleResult(count.scheduled, count.already_pending) for count in counts),
            ScheduleResult(),
        )


def _tuple_or_none(columns: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if columns is None else tuple(columns)
