"""Writing the prepared rows as events, in the executors: one `mapInArrow` task per Spark
partition, whatever the session kind (classic or Spark Connect).

A task reads Arrow record batches of (id, payload JSON, due ms, context values...), groups
their rows by queue partition into enqueue script calls of `batch_size` rows (an
enqueue_calls.EnqueueCall each, as every producer builds its calls), sends them together on
a blocking client (enqueue_calls_steps: one pipeline on a single server, one per node on a
cluster), and yields one row with its counts.

A pipeline is sent from a thread of the task's own while the task prepares the next one (the
socket wait releases the GIL). Sent from the task's thread, each task would leave Redis idle
while it prepares, and two tasks fall into step: both prepare, then both wait.

Every call records what it did in the task's run record; a retried attempt takes the record
over first and writes only what no earlier attempt did (see run_records.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from aioqueue._model.config import Durability
from aioqueue._producing.enqueue_calls import (
    EnqueueCall,
    EnqueueItem,
    WriteMode,
    enqueue_calls_steps,
)
from aioqueue._producing.run_records import RecordedCall, take_over_steps
from aioqueue._transport.client import SyncRedisClient
from aioqueue._transport.steps import run_steps_sync
from aioqueue._wire.keys import QueueLayout, partition_of

from ._connection import redis_client

__all__ = ["COUNTS_SCHEMA", "ChunkWriter", "WritePlan", "write_batches"]

COUNTS_SCHEMA = "task long, scheduled long, already_pending long"
"""What each task yields: one row of its counts, with the Spark partition it wrote (whose
run records the driver deletes once the run succeeded)."""

# Script calls sent in one pipeline round trip by a task.
PIPELINE_CHUNKS = 8


@dataclass(frozen=True, slots=True)
class WritePlan:
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
    durability: Durability | None = None


def write_batches(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Writes one Spark partition's rows (the `mapInArrow` function); yields its counts."""
    from pyspark import TaskContext  # in the executor: a Connect-only driver may lack it

    task_context = TaskContext.get()
    assert task_context is not None, "write_batches runs inside a Spark task"
    task = task_context.partitionId()
    with (
        redis_client(plan.url) as client,
        ThreadPoolExecutor(1, thread_name_prefix="aioqueue-spark-writer") as sender,
    ):
        # Not attemptNumber(), which starts at 0 again when Spark runs the stage again: an
        # attempt id is unique in the Spark application, and a retry's is larger.
        attempt = task_context.taskAttemptId()
        writer = ChunkWriter(plan, client, sender, task=task, attempt=attempt)
        for batch in batches:
            writer.add(batch)
        writer.finish()
    yield pa.RecordBatch.from_pydict(
        {
            "task": [task],
            "scheduled": [writer.scheduled],
            "already_pending": [writer.already_pending],
        },
        schema=pa.schema(
            [("task", pa.int64()), ("scheduled", pa.int64()), ("already_pending", pa.int64())]
        ),
    )


class ChunkWriter:
    """Groups one task attempt's rows by queue partition into script calls and sends them
    in pipelines.

    Holds at most one unfinished chunk per queue partition, one pipeline's worth of full
    ones and one pipeline in flight, whatever the size of the Spark partition.
    """

    def __init__(
        self,
        plan: WritePlan,
        client: SyncRedisClient,
        sender: ThreadPoolExecutor,
        *,
        task: int,
        attempt: int,
    ) -> None:
        self._plan = plan
        self._client = client
        self._sender = sender
        self._keys = plan.layout.all_keys
        self._task = task
        self._attempt = attempt
        self._calls = 0
        self._open: list[list[EnqueueItem]] = [[] for _ in self._keys]
        self._full: list[tuple[int, list[EnqueueItem]]] = []
        self._in_flight: Future[list[list[bool]]] | None = None
        self.scheduled = 0
        self.already_pending = 0
        # What earlier attempts of this task did, id by id; only a retry finds any. Taken
        # over by every attempt, as it cannot tell whether it is the first (a round trip
        # per queue partition, against thousands of rows).
        self._recorded: dict[str, list[bool]] = {}
        for keys in self._keys:
            steps = take_over_steps(client, keys, plan.run_id, task, attempt)
            self._recorded.update(run_steps_sync(client, steps))

    def add(self, batch: pa.RecordBatch) -> None:
        ids: list[str] = batch.column(0).to_pylist()
        payloads: list[str] = batch.column(1).to_pylist()
        due: list[int] = batch.column(2).to_pylist()
        contexts = self._context_json(batch)
        absolute = self._plan.absolute
        partitions = len(self._open)
        recorded = self._recorded
        for row, event_id in enumerate(ids):
            if recorded and event_id in recorded:
                self._count_recorded(event_id)
                continue
            partition = partition_of(event_id, partitions) if partitions > 1 else 0
            chunk = self._open[partition]
            chunk.append(EnqueueItem(event_id, payloads[row], contexts[row], due[row], absolute))
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

    def _count_recorded(self, event_id: str) -> None:
        """Counts a row an earlier attempt handled as that attempt did, writing nothing."""
        results = self._recorded[event_id]
        if results.pop(0):
            self.scheduled += 1
        else:
            self.already_pending += 1
        if not results:
            del self._recorded[event_id]

    def _context_json(self, batch: pa.RecordBatch) -> list[str]:
        """Each row's context as the JSON object the envelope stores."""
        if not self._plan.context_names:
            return ["{}"] * batch.num_rows
        columns: list[list[Any]] = [
            batch.column(3 + position).to_pylist()
            for position in range(len(self._plan.context_names))
        ]
        contexts = []
        for row in range(batch.num_rows):
            context: dict[str, str] = {}
            for name, is_map, values in zip(
                self._plan.context_names, self._plan.context_maps, columns, strict=True
            ):
                value = values[row]
                if value is None:
                    continue
                if is_map:
                    # Arrow gives a map as its (key, value) pairs; a later column wins.
                    context.update((key, item) for key, item in value if item is not None)
                else:
                    context[name] = value
            contexts.append(orjson.dumps(context).decode())
        return contexts

    def _send(self) -> None:
        """Starts sending the full chunks as one pipeline of enqueue script calls, once the
        previous pipeline has been answered."""
        if not self._full:
            return
        chunks, self._full = self._full, []
        calls = []
        for partition, chunk in chunks:
            run = RecordedCall(self._plan.run_id, self._task, self._attempt, self._calls)
            self._calls += 1
            mode = WriteMode(replace=self._plan.replace, run=run)
            calls.append(
                EnqueueCall(self._keys[partition], self._plan.layout.event_type, chunk, mode)
            )
        self._await_sent()
        steps = enqueue_calls_steps(self._client, calls, durability=self._plan.durability)
        self._in_flight = self._sender.submit(run_steps_sync, self._client, steps)

    def _await_sent(self) -> None:
        """Counts the replies of the pipeline in flight (raising what it raised)."""
        if self._in_flight is None:
            return
        replies, self._in_flight = self._in_flight.result(), None
        for flags in replies:
            scheduled = sum(flags)
            self.scheduled += scheduled
            self.already_pending += len(flags) - scheduled
