"""Reading a type's pending events and dead letters as DataFrames, on the executors.

The driver only plans: per queue partition it asks the sorted set's size and cuts it into
slices of due (or died) times at evenly spaced ranks. Each slice is one Spark task that pages
through its score range with ZRANGE BYSCORE and fetches the envelopes with HMGET, yielding
rows as it goes, so no process ever holds the whole queue.

The result is not a snapshot: an event dispatched, retried or enqueued while the frame is
computed may be missing or appear twice. Every action on the frame reads Redis again;
`cache()` it to look at one reading several times.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, cast

import orjson
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from aioqueue._engine.client import RedisClient
from aioqueue._engine.envelope import stored_payload, text
from aioqueue._model.event import Event

from ._columns import checked_event_type, checked_prefix
from ._connection import redis_session, resolve_layout

__all__ = ["read_dead_letters", "read_pending"]

# Entries fetched per round trip by a reading task.
PAGE_SIZE = 1000

Kind = Literal["pending", "dead"]

# What the tasks yield; the driver turns the millisecond columns into timestamps.
_RAW_FIELDS = [
    T.StructField("id", T.StringType(), nullable=False),
    T.StructField("event_type", T.StringType(), nullable=False),
    T.StructField("due_ms", T.LongType()),
    T.StructField("attempt", T.IntegerType()),
    T.StructField("payload", T.StringType()),
    T.StructField("context", T.MapType(T.StringType(), T.StringType(), valueContainsNull=False)),
    T.StructField("error", T.StringType()),
    T.StructField("died_ms", T.LongType()),
]
_RAW_SCHEMA = T.StructType(_RAW_FIELDS)


def read_pending(
    spark: SparkSession,
    url: str,
    event_type: str | type[Event],
    *,
    prefix: str = "aioqueue",
    partitions: int | None = None,
    rows_per_task: int = 100_000,
) -> DataFrame:
    """The type's pending events as a DataFrame, read by the executors.

    Columns: id, event_type, due_at (timestamp: when the next attempt is due; for an event
    being handled right now, when it is retried should its worker be lost), attempt (int:
    deliveries so far), payload (JSON text), context (map<string,string>) and error (the last
    failure of an event waiting for a retry, else null). `partitions` is only needed for a
    partitioned type that no service has recorded in the registry; `rows_per_task` sizes the
    slices each Spark task reads.
    """
    frame = _read(spark, url, event_type, prefix, partitions, rows_per_task, "pending")
    return frame.select(
        "id",
        "event_type",
        _timestamp("due_ms", "due_at"),
        "attempt",
        "payload",
        "context",
        "error",
    )


def read_dead_letters(
    spark: SparkSession,
    url: str,
    event_type: str | type[Event],
    *,
    prefix: str = "aioqueue",
    partitions: int | None = None,
    rows_per_task: int = 100_000,
) -> DataFrame:
    """The type's dead letters as a DataFrame, read by the executors.

    Columns: id, event_type, due_at (timestamp of the last attempt, null if it never ran),
    attempt (int), payload (JSON text; null when the stored envelope itself was unreadable),
    context (map<string,string>), error (why it died) and died_at (timestamp).
    """
    frame = _read(spark, url, event_type, prefix, partitions, rows_per_task, "dead")
    return frame.select(
        "id",
        "event_type",
        _timestamp("due_ms", "due_at"),
        "attempt",
        "payload",
        "context",
        "error",
        _timestamp("died_ms", "died_at"),
    )


@dataclass(frozen=True, slots=True)
class _Slice:
    """One reading task: the entries of `index` (a sorted set) scored in [low, high)."""

    url: str
    kind: Kind
    event_type: str
    index: str
    """schedule (pending) or dead_letter_times (dead letters): id -> due or died ms."""
    values: str
    """events or dead_letters: id -> envelope."""
    low: float
    high: float


def _read(
    spark: SparkSession,
    url: str,
    event_type: str | type[Event],
    prefix: str,
    partitions: int | None,
    rows_per_task: int,
    kind: Kind,
) -> DataFrame:
    wire_name = checked_event_type(event_type)
    prefix = checked_prefix(prefix)
    if isinstance(rows_per_task, bool) or not isinstance(rows_per_task, int) or rows_per_task < 1:
        raise ValueError(f"rows_per_task must be an integer >= 1, got {rows_per_task!r}")
    with redis_session(url) as session:
        layout = resolve_layout(session, prefix, wire_name, partitions, record=False)
        if kind == "pending":
            pairs = [(keys.schedule, keys.events) for keys in layout.all_keys]
        else:
            pairs = [(keys.dead_letter_times, keys.dead_letters) for keys in layout.all_keys]
        indexes = [index for index, _ in pairs]
        bounds = session.run(functools.partial(_slice_bounds, indexes, rows_per_task))
    slices = [
        _Slice(url, kind, wire_name, index, values, low, high)
        for (index, values), index_bounds in zip(pairs, bounds, strict=True)
        for low, high in itertools.pairwise(index_bounds)
    ]
    rows = spark.sparkContext.parallelize(slices, len(slices)).flatMap(_read_slice)
    return spark.createDataFrame(rows, _RAW_SCHEMA)


async def _slice_bounds(
    indexes: list[str], rows_per_task: int, client: RedisClient
) -> list[list[float]]:
    """Per sorted set, the score boundaries of its slices: -inf, quantiles..., +inf.

    The outer bounds are infinite so entries added after planning are still read."""
    async with client.pipeline(transaction=False) as pipe:
        for index in indexes:
            pipe.zcard(index)
        sizes: list[int] = await pipe.execute()
    ranks = []
    for size in sizes:
        slices = max(1, math.ceil(size / rows_per_task))
        ranks.append([size * part // slices for part in range(1, slices)])
    async with client.pipeline(transaction=False) as pipe:
        for index, index_ranks in zip(indexes, ranks, strict=True):
            for rank in index_ranks:
                pipe.zrange(index, rank, rank, withscores=True)
        replies: list[list[tuple[Any, float]]] = await pipe.execute()
    bounds = []
    position = 0
    for index_ranks in ranks:
        found = replies[position : position + len(index_ranks)]
        position += len(index_ranks)
        scores = sorted({entry[0][1] for entry in found if entry})
        bounds.append([-math.inf, *scores, math.inf])
    return bounds


def _read_slice(task: _Slice) -> Iterator[tuple[Any, ...]]:
    """Yields the rows of one slice, a page at a time."""
    with redis_session(task.url) as session:
        low, skip = task.low, 0
        while True:
            page = session.run(functools.partial(_read_page, task, low, skip))
            for event_id, score, raw in page:
                if raw is not None:  # gone since it was listed: handled, cancelled, requeued
                    yield _row(task, event_id, score, raw)
            if len(page) < PAGE_SIZE:
                return
            # Continue after the last score read; entries that share it and were already
            # read are skipped by count, since many events share a due millisecond.
            last = page[-1][1]
            ties = sum(1 for _, score, _ in page if score == last)
            if last == low:
                skip += len(page)
            else:
                low, skip = last, ties


async def _read_page(
    task: _Slice, low: float, skip: int, client: RedisClient
) -> list[tuple[str, float, bytes | str | None]]:
    high = "+inf" if task.high == math.inf else f"({task.high!r}"
    entries = cast(
        "list[tuple[bytes, float]]",
        await client.zrange(
            task.index,
            "-inf" if low == -math.inf else repr(low),
            high,
            byscore=True,
            offset=skip,
            num=PAGE_SIZE,
            withscores=True,
        ),
    )
    if not entries:
        return []
    envelopes = await client.hmget(task.values, [id_ for id_, _ in entries])
    return [(text(id_), score, raw) for (id_, score), raw in zip(entries, envelopes, strict=True)]


def _row(task: _Slice, event_id: str, score: float, raw: bytes | str) -> tuple[Any, ...]:
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        fields = None
    if not isinstance(fields, dict):
        fields = {"error": f"stored envelope is not a JSON object: {text(raw)[:200]!r}"}
    payload = stored_payload(fields)
    context = fields.get("context")
    error = fields.get("error")
    pending = task.kind == "pending"
    return (
        event_id,
        task.event_type,
        int(score) if pending else _integer(fields.get("due_at")),
        # Left out of an envelope while 0; unknown (null) when the envelope was unreadable.
        _integer(fields.get("attempt", 0 if payload is not None else None)),
        payload if isinstance(payload, str) else None,
        {k: v for k, v in context.items() if isinstance(v, str)}
        if isinstance(context, dict)
        else {},
        error if isinstance(error, str) else None,
        None if pending else int(score),
    )


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _timestamp(millis: str, name: str) -> Column:
    return F.timestamp_millis(F.col(millis)).alias(name)
