"""Scheduling the rows of a DataFrame as events, from the executors, in batch or streaming."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import orjson
from pyspark.sql import DataFrame, Row

from aioqueue._engine.client import RedisClient
from aioqueue._engine.keys import QueueLayout, partition_of
from aioqueue._engine.schemas import read_schema
from aioqueue._engine.scripts import ENQUEUE
from aioqueue._engine.steps import run_steps
from aioqueue._engine.writes import EnqueueItem, enqueue_call, scheduled_flags
from aioqueue._model.event import Event

from ._columns import (
    ScheduleColumns,
    checked_batch_size,
    checked_event_type,
    checked_prefix,
)
from ._connection import RedisSession, redis_session, resolve_layout
from ._schema_check import check_payload_columns

__all__ = ["ForeachBatchWriter", "ScheduleResult", "foreach_batch_writer", "schedule_dataframe"]

# Script calls sent in one pipeline round trip by a task.
PIPELINE_CHUNKS = 8


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """What a run did: rows written as new events, and rows whose id was already pending.

    With `replace=True` every row overwrites, so every row counts as scheduled.
    """

    scheduled: int = 0
    already_pending: int = 0

    @property
    def rows(self) -> int:
        return self.scheduled + self.already_pending

    def __add__(self, other: ScheduleResult) -> ScheduleResult:
        return ScheduleResult(
            self.scheduled + other.scheduled, self.already_pending + other.already_pending
        )


def schedule_dataframe(
    df: DataFrame,
    event_type: str | type[Event],
    *,
    url: str,
    id_col: str = "id",
    due_col: str | None = None,
    delay_col: str | None = None,
    payload_cols: Sequence[str] | None = None,
    context_cols: Sequence[str] | None = None,
    prefix: str = "aioqueue",
    replace: bool = False,
    batch_size: int = 1000,
    partitions: int | None = None,
) -> ScheduleResult:
    """Schedules one event of `event_type` per row of `df`; returns how many were new.

    - `id_col`: the event id (a non-null, non-empty string column).
    - `due_col`: when it is due (a timestamp column), or `delay_col`: seconds (a number) or a
      day-time interval from the Redis server's now; neither means due now.
    - `payload_cols`: the columns that form the payload object, each a field of the event
      class (default: every column not named above); `context_cols`: string columns (or
      maps of strings) that become the event's context.
    - `partitions`: the type's partition count, needed only when no service has recorded
      the type in the prefix's registry yet.

    Bad input raises InvalidDataFrameError before anything is written (the frame is checked
    in one Spark job, then written in another: `cache()` a frame that is costly to compute),
    and so does a payload column that does not fit the type's published schema (docs/
    wire-format.md; a type without one is written unchecked).
    Each Spark partition is written by its task with its own connection, one enqueue script
    call per `batch_size` rows of the same queue partition, pipelined.

    A retried Spark task writes nothing twice: every write of a run records, in the type's
    hash tag, what it did with each id (kept for a day), and a retried attempt returns those
    results instead of writing again, so an event its failed attempt wrote and a handler
    finished meanwhile is not created again, and the counts are those of the first attempt.
    A second run is a new run: an id still pending is kept (counted as `already_pending`),
    but one whose handler already finished is scheduled again; filter such rows out, or give
    each run's events ids of their own (for example with the day in them). With
    `replace=True` every row overwrites its pending event (new payload, context and due time,
    attempt 0), once per run. Duplicate ids inside one frame count as already pending; which
    row wins is not defined.
    """
    job = ScheduleJob(
        event_type=checked_event_type(event_type),
        url=url,
        columns=_columns(id_col, due_col, delay_col, payload_cols, context_cols),
        prefix=checked_prefix(prefix),
        replace=bool(replace),
        batch_size=checked_batch_size(batch_size),
        partitions=partitions,
    )
    return job.write(df)


def foreach_batch_writer(
    event_type: str | type[Event],
    *,
    url: str,
    id_col: str = "id",
    due_col: str | None = None,
    delay_col: str | None = None,
    payload_cols: Sequence[str] | None = None,
    context_cols: Sequence[str] | None = None,
    prefix: str = "aioqueue",
    replace: bool = False,
    batch_size: int = 1000,
    partitions: int | None = None,
) -> ForeachBatchWriter:
    """A function for `df.writeStream.foreachBatch(...)` that schedules each micro-batch.

    Takes the options of `schedule_dataframe`; each micro-batch is one run, cached while it
    is checked and written. A replayed micro-batch (a restart from the checkpoint before the
    batch was committed) keeps the ids still pending, like a second run.
    """
    job = ScheduleJob(
        event_type=checked_event_type(event_type),
        url=url,
        columns=_columns(id_col, due_col, delay_col, payload_cols, context_cols),
        prefix=checked_prefix(prefix),
        replace=bool(replace),
        batch_size=checked_batch_size(batch_size),
        partitions=partitions,
    )
    return ForeachBatchWriter(job)


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
    layout: QueueLayout | None = None

    def write(self, df: DataFrame) -> ScheduleResult:
        prepared = self.columns.prepare(df)
        with redis_session(self.url) as session:
            # Read for every write: a deploy may publish a new schema between micro-batches.
            published = session.run(
                functools.partial(read_schema, prefix=self.prefix, event_type=self.event_type)
            )
            if published is not None:
                check_payload_columns(
                    self.event_type, published.schema, dict(prepared.payload_types)
                )
            prepared.check_data()
            if self.layout is None:
                self.layout = resolve_layout(
                    session, self.prefix, self.event_type, self.partitions, record=True
                )
        plan = _WritePlan(
            url=self.url,
            layout=self.layout,
            run_id=uuid.uuid4().hex,
            absolute=self.columns.due_kind == "at",
            replace=self.replace,
            batch_size=self.batch_size,
            context_maps=prepared.context_maps,
            context_names=prepared.context_names,
        )
        write = functools.partial(_write_partition, plan)
        counts = prepared.frame.rdd.mapPartitions(write).collect()
        # Every task succeeded: no attempt of this run will look at its record again (a
        # failed run's records expire by themselves, a day after their last write).
        with redis_session(self.url) as session:
            session.run(functools.partial(_forget_run, plan))
        return sum((ScheduleResult(*count) for count in counts), ScheduleResult())


async def _forget_run(plan: _WritePlan, client: RedisClient) -> None:
    for keys in plan.layout.all_keys:  # one key per partition, each in its own hash tag
        await client.delete(keys.run_record(plan.run_id))


def _columns(
    id_col: str,
    due_col: str | None,
    delay_col: str | None,
    payload_cols: Sequence[str] | None,
    context_cols: Sequence[str] | None,
) -> ScheduleColumns:
    return ScheduleColumns(
        id_col=id_col,
        due_col=due_col,
        delay_col=delay_col,
        payload_cols=None if payload_cols is None else tuple(payload_cols),
        context_cols=tuple(context_cols or ()),
    )


# -- on the executors ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _WritePlan:
    """What a task needs to write its rows; pickled to the executors."""

    url: str
    layout: QueueLayout
    run_id: str
    """One per write: a retried task finds what its failed attempt wrote under it."""
    absolute: bool
    replace: bool
    batch_size: int
    context_names: tuple[str, ...]
    context_maps: tuple[bool, ...]


def _write_partition(plan: _WritePlan, rows: Iterable[Row]) -> Iterator[tuple[int, int]]:
    """Writes one Spark partition's rows; yields one (scheduled, already pending) count."""
    with redis_session(plan.url) as session:
        writer = _ChunkWriter(plan, session)
        for row in rows:
            writer.add(row)
        writer.finish()
    yield writer.scheduled, writer.already_pending


class _ChunkWriter:
    """Groups rows by queue partition into script calls and sends them in pipelines.

    Holds at most one unfinished chunk per queue partition plus one pipeline's worth of
    full ones, whatever the size of the Spark partition.
    """

    def __init__(self, plan: _WritePlan, session: RedisSession) -> None:
        self._plan = plan
        self._session = session
        self._keys = plan.layout.all_keys
        self._type = plan.layout.event_type
        self._open: list[list[EnqueueItem]] = [[] for _ in self._keys]
        self._full: list[tuple[int, list[EnqueueItem]]] = []
        self._in_flight: Future[list[list[bool]]] | None = None
        self.scheduled = 0
        self.already_pending = 0

    def add(self, row: Row) -> None:
        event_id, payload, due_ms = row[0], row[1], row[2]
        partition = partition_of(event_id, len(self._open)) if len(self._open) > 1 else 0
        chunk = self._open[partition]
        chunk.append(
            EnqueueItem(
                id=event_id,
                payload=payload,
                context_json=self._context_json(row),
                due_ms=due_ms,
                absolute=self._plan.absolute,
            )
        )
        if len(chunk) >= self._plan.batch_size:
            self._full.append((partition, chunk))
            self._open[partition] = []
            if len(self._full) >= PIPELINE_CHUNKS:
                self._send()

    def finish(self) -> None:
        """Sends what is left and waits until every pipeline has been answered."""
        self._full += [(partition, chunk) for partition, chunk in enumerate(self._open) if chunk]
        self._open = [[] for _ in self._open]
        self._send()
        self._await_sent()

    def _context_json(self, row: Row) -> str:
        if not self._plan.context_names:
            return "{}"
        context: dict[str, str] = {}
        for offset, (name, is_map) in enumerate(
            zip(self._plan.context_names, self._plan.context_maps, strict=True), start=3
        ):
            value = row[offset]
            if value is None:
                continue
            if is_map:
                context.update((key, item) for key, item in value.items() if item is not None)
            else:
                context[name] = value
        return orjson.dumps(context).decode()

    def _send(self) -> None:
        """Sends the full chunks as one pipeline. It runs while the next rows are read; the
        previous pipeline is awaited first, so at most one is in flight."""
        self._await_sent()
        if self._full:
            chunks, self._full = self._full, []
            self._in_flight = self._session.submit(functools.partial(self._write_chunks, chunks))

    def _await_sent(self) -> None:
        if self._in_flight is None:
            return
        replies, self._in_flight = self._in_flight.result(), None
        for reply in replies:
            scheduled = sum(reply)
            self.scheduled += scheduled
            self.already_pending += len(reply) - scheduled

    async def _write_chunks(
        self, chunks: list[tuple[int, list[EnqueueItem]]], client: RedisClient
    ) -> list[list[bool]]:
        """One pipeline of enqueue script calls, each built by writes.enqueue_call, the
        builder every producer uses."""
        calls = [
            enqueue_call(
                self._keys[partition], self._type, chunk,
                replace=self._plan.replace, run_id=self._plan.run_id,
            )
            for partition, chunk in chunks
        ]  # fmt: skip
        replies = await run_steps(client, ENQUEUE.pipelined_steps(client, calls))
        return [scheduled_flags(reply) for reply in replies]
