"""Reading a type's pending events and dead letters as DataFrames, on the executors.

The driver only plans: per queue partition it asks the sorted set's size and cuts it into
slices of due (or died) times at evenly spaced ranks. Each slice is one Spark task (a
`mapInArrow` over a range of slice numbers, so classic and Connect sessions read alike)
that pages through its score range with ZRANGE BYSCORE and fetches the envelopes with
HMGET, yielding an Arrow record batch per page, so no process ever holds the whole queue.

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
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict, cast

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from aioqueue._model.checks import refuse_unknown_keywords
from aioqueue._model.event import Event
from aioqueue._transport.client import SyncRedisClient
from aioqueue._wire.envelope import stored_payload, text

from ._columns import checked_event_type, checked_prefix
from ._connection import redis_client, resolve_layout

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from typing_extensions import Unpack  # typing's own from Python 3.11 (3.10 is supported)

__all__ = ["ReadOptions", "read_dead_letters", "read_pending"]

Session: TypeAlias = "SparkSession | ConnectSession"
"""A classic session or a Spark Connect one (not a subclass of the classic class)."""

# Entries fetched per round trip by a reading task, and rows per record batch it yields.
PAGE_SIZE = 1000

Kind = Literal["pending", "dead"]

# What the tasks yield; the driver adds the type and turns milliseconds into timestamps.
_RAW_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), nullable=False),
        T.StructField("due_ms", T.LongType()),
        T.StructField("attempt", T.IntegerType()),
        T.StructField("payload", T.StringType()),
        T.StructField(
            "context", T.MapType(T.StringType(), T.StringType(), valueContainsNull=False)
        ),
        T.StructField("error", T.StringType()),
        T.StructField("died_ms", T.LongType()),
    ]
)
_ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("due_ms", pa.int64()),
        pa.field("attempt", pa.int32()),
        pa.field("payload", pa.string()),
        pa.field("context", pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))),
        pa.field("error", pa.string()),
        pa.field("died_ms", pa.int64()),
    ]
)


class ReadOptions(TypedDict, total=False):
    """The options of `read_pending` and `read_dead_letters`, each optional."""

    prefix: str
    """The service's key prefix (default "aioqueue")."""
    partitions: int | None
    """The type's partition count: needed only for a partitioned type that no service has
    recorded in the registry."""
    rows_per_task: int
    """How many events each Spark task reads at most (default 100,000)."""


def read_pending(
    spark: Session, url: str, event_type: str | type[Event], **options: Unpack[ReadOptions]
) -> DataFrame:
    """The type's pending events as a DataFrame, read by the executors.

    Columns: id, event_type, due_at (timestamp: when the next attempt is due; for an event
    being handled right now, when it is retried should its worker be lost), attempt (int:
    deliveries so far), payload (JSON text), context (map<string,string>) and error (the last
    failure of an event waiting for a retry, else null). The options are ReadOptions.
    """
    frame = _read(spark, url, event_type, options, "pending", caller="read_pending")
    return frame.selectExpr(*_COLUMNS)


def read_dead_letters(
    spark: Session, url: str, event_type: str | type[Event], **options: Unpack[ReadOptions]
) -> DataFrame:
    """The type's dead letters as a DataFrame, read by the executors.

    Columns: id, event_type, due_at (timestamp of the last attempt, null if it never ran),
    attempt (int), payload (JSON text; null when the stored envelope itself was unreadable),
    context (map<string,string>), error (why it died) and died_at (timestamp). The options
    are ReadOptions.
    """
    frame = _read(spark, url, event_type, options, "dead", caller="read_dead_letters")
    return frame.selectExpr(*_COLUMNS, "timestamp_millis(died_ms) AS died_at")


# SQL text, which means the same on classic and Connect sessions (see _columns.py); the type
# is added here rather than sent with every row.
_COLUMNS = (
    "id",
    "event_type",
    "timestamp_millis(due_ms) AS due_at",
    "attempt",
    "payload",
    "context",
    "error",
)


@dataclass(frozen=True, slots=True)
class _Slice:
    """One reading task: the entries of `index` (a sorted set) scored in [low, high)."""

    index: str
    """schedule (pending) or dead_letter_times (dead letters): id -> due or died ms."""
    values: str
    """events or dead_letters: id -> envelope."""
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class _ReadPlan:
    """What the reading tasks need; pickled to the executors."""

    url: str
    kind: Kind
    slices: tuple[_Slice, ...]


def _read(
    spark: Session,
    url: str,
    event_type: str | type[Event],
    options: ReadOptions,
    kind: Kind,
    *,
    caller: str,
) -> DataFrame:
    refuse_unknown_keywords(caller, options, ReadOptions.__optional_keys__)
    wire_name = checked_event_type(event_type)
    prefix = checked_prefix(options.get("prefix", "aioqueue"))
    partitions = options.get("partitions")
    rows_per_task = options.get("rows_per_task", 100_000)
    if isinstance(rows_per_task, bool) or not isinstance(rows_per_task, int) or rows_per_task < 1:
        raise ValueError(f"rows_per_task must be an integer >= 1, got {rows_per_task!r}")
    with redis_client(url) as client:
        layout = resolve_layout(client, prefix, wire_name, partitions, record=False)
        if kind == "pending":
            pairs = [(keys.schedule, keys.events) for keys in layout.all_keys]
        else:
            pairs = [(keys.dead_letter_times, keys.dead_letters) for keys in layout.all_keys]
        bounds = _slice_bounds(client, [index for index, _ in pairs], rows_per_task)
    plan = _ReadPlan(
        url,
        kind,
        tuple(
            _Slice(index, values, low, high)
            for (index, values), index_bounds in zip(pairs, bounds, strict=True)
            for low, high in itertools.pairwise(index_bounds)
        ),
    )
    # One row, and so one task, per slice: each task reads the slices whose numbers it gets.
    tasks = spark.range(0, len(plan.slices), 1, len(plan.slices))
    rows = tasks.mapInArrow(functools.partial(_read_slices, plan), _RAW_SCHEMA)
    # The wire name is letters, digits, '_', '.' and '-' (checked above): a safe literal.
    return rows.selectExpr("*", f"'{wire_name}' AS event_type")


def _slice_bounds(
    client: SyncRedisClient, indexes: list[str], rows_per_task: int
) -> list[list[float]]:
    """Per sorted set, the score boundaries of its slices: -inf, quantiles..., +inf.

    The outer bounds are infinite so entries added after planning are still read."""
    with client.pipeline(transaction=False) as pipe:
        for index in indexes:
            pipe.zcard(index)
        sizes: list[int] = pipe.execute()
    ranks = []
    for size in sizes:
        slices = max(1, math.ceil(size / rows_per_task))
        ranks.append([size * part // slices for part in range(1, slices)])
    with client.pipeline(transaction=False) as pipe:
        for index, index_ranks in zip(indexes, ranks, strict=True):
            for rank in index_ranks:
                pipe.zrange(index, rank, rank, withscores=True)
        replies: list[list[tuple[Any, float]]] = pipe.execute()
    bounds = []
    position = 0
    for index_ranks in ranks:
        found = replies[position : position + len(index_ranks)]
        position += len(index_ranks)
        scores = sorted({entry[0][1] for entry in found if entry})
        bounds.append([-math.inf, *scores, math.inf])
    return bounds


# -- on the executors ------------------------------------------------------------------------


def _read_slices(plan: _ReadPlan, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: reads the slices whose numbers it is given, a record batch
    per page."""
    with redis_client(plan.url) as client:
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                yield from _read_slice(client, plan.kind, plan.slices[number])


def _read_slice(client: SyncRedisClient, kind: Kind, task: _Slice) -> Iterator[pa.RecordBatch]:
    """Yields the rows of one slice, a page at a time."""
    low, skip = task.low, 0
    while True:
        page = _read_page(client, task, low, skip)
        if page:
            yield _batch(kind, page)
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


def _read_page(
    client: SyncRedisClient, task: _Slice, low: float, skip: int
) -> list[tuple[str, float, bytes | str | None]]:
    high = "+inf" if task.high == math.inf else f"({task.high!r}"
    # As a plain command: redis-py's own ZRANGE WITHSCORES turns each RESP3 score back into
    # the RESP2 bytes and then into a float, a third of a reading task's time per event.
    reply = client.execute_command(  # type: ignore[no-untyped-call]
        "ZRANGE",
        task.index,
        "-inf" if low == -math.inf else repr(low),
        high,
        "BYSCORE",
        "LIMIT",
        skip,
        PAGE_SIZE,
        "WITHSCORES",
    )
    if not reply:
        return []
    if isinstance(reply[0], list):  # RESP3: [member, score] pairs
        ids = [text(member) for member, _ in reply]
        scores = [float(score) for _, score in reply]
    else:  # RESP2: member, score, member, score, ...
        ids = [text(member) for member in reply[::2]]
        scores = [float(score) for score in reply[1::2]]
    envelopes = cast("list[bytes | None]", client.hmget(task.values, ids))
    return list(zip(ids, scores, envelopes, strict=True))


def _batch(kind: Kind, page: list[tuple[str, float, bytes | str | None]]) -> pa.RecordBatch:
    """One page's rows; an entry whose envelope is gone since it was listed (handled,
    cancelled, requeued) is left out."""
    pending = kind == "pending"
    ids, due, attempts, payloads, contexts, errors, died = [], [], [], [], [], [], []
    for event_id, score, raw in page:
        if raw is None:
            continue
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError:
            fields = None
        if not isinstance(fields, dict):
            fields = {"error": f"stored envelope is not a JSON object: {text(raw)[:200]!r}"}
        payload = stored_payload(fields)
        context = fields.get("context")
        error = fields.get("error")
        ids.append(event_id)
        due.append(int(score) if pending else _integer(fields.get("due_at")))
        # Left out of an envelope while 0; unknown (null) when the envelope was unreadable.
        attempts.append(_integer(fields.get("attempt", 0 if payload is not None else None)))
        payloads.append(payload if isinstance(payload, str) else None)
        contexts.append(
            {k: v for k, v in context.items() if isinstance(v, str)}
            if isinstance(context, dict)
            else {}
        )
        errors.append(error if isinstance(error, str) else None)
        died.append(None if pending else int(score))
    columns = [ids, due, attempts, payloads, contexts, errors, died]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(column, type=field.type)
            for column, field in zip(columns, _ARROW_SCHEMA, strict=True)
        ],
        schema=_ARROW_SCHEMA,
    )


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
