"""A Spark run's record, attempt by attempt, on a real server: a retried task counts what an
earlier attempt wrote and writes only the rest, and an attempt a retry took the record over
from writes nothing more. (The Spark tests kill real tasks: test_spark_standalone.py,
test_spark_connect.py; here each attempt is driven by hand, to reach the orders a kill
cannot aim at.)"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
import redis.asyncio
from redis.exceptions import ResponseError

from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueLayout
from aioqueue.spark._connection import redis_client as sync_client
from aioqueue.spark._connection import resolve_layout
from aioqueue.spark._write import ChunkWriter, WritePlan

EVENT_TYPE = "RecordedOrder"
TASK = 3


@pytest.fixture
def layout(redis_url: str, redis_client: redis.asyncio.Redis) -> QueueLayout:
    """A type of 4 queue partitions: a task's record lives in each (`redis_client` has
    flushed the server)."""
    with sync_client(redis_url) as client:
        return resolve_layout(client, "aioqueue", EVENT_TYPE, 4, record=True)


def plan(url: str, layout: QueueLayout) -> WritePlan:
    return WritePlan(
        url=url, layout=layout, run_id="run-1", absolute=False, replace=False,
        batch_size=7, context_names=(), context_maps=(),
    )  # fmt: skip


def rows(ids: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "payload": [f'{{"n":{n}}}' for n in range(len(ids))],
            "due": [3_600_000] * len(ids),
        }
    )


@pytest.fixture
def attempt(redis_url: str, layout: QueueLayout) -> Iterator[Callable[[int], ChunkWriter]]:
    """Starts attempt `number` of the task (it takes the task's record over), each on a
    client and a sender thread of its own, as in Spark."""
    with contextlib.ExitStack() as stack:

        def start(number: int) -> ChunkWriter:
            client = stack.enter_context(sync_client(redis_url))
            sender = stack.enter_context(ThreadPoolExecutor(1))
            return ChunkWriter(plan(redis_url, layout), client, sender, task=TASK, attempt=number)

        yield start


def write(writer: ChunkWriter, ids: list[str]) -> tuple[int, int]:
    writer.add(rows(ids))
    writer.finish()
    return writer.scheduled, writer.already_pending


def stored(url: str, layout: QueueLayout) -> tuple[set[str], int]:
    """The ids of the type's events, and how many versions its partitions handed out."""
    with sync_client(url) as client:
        ids: set[str] = set()
        versions = 0
        for keys in layout.all_keys:
            ids |= {text(key) for key in client.hkeys(keys.events)}
            versions += int(client.get(keys.sequence) or 0)
        return ids, versions


def finish(url: str, layout: QueueLayout, ids: list[str]) -> None:
    """Deletes events as a handler's acknowledgement would."""
    with sync_client(url) as client:
        for keys in layout.all_keys:
            client.hdel(keys.events, *ids)
            client.zrem(keys.schedule, *ids)


def test_a_retry_counts_what_the_failed_attempt_wrote_and_writes_only_the_rest(
    redis_url: str, layout: QueueLayout, attempt: Callable[[int], ChunkWriter]
) -> None:
    all_ids = [f"o-{n}" for n in range(100)]
    first = attempt(10)
    assert write(first, all_ids[:60]) == (60, 0)  # then the task failed
    finish(redis_url, layout, all_ids[:20])  # a handler finished some meanwhile

    assert write(attempt(11), all_ids) == (100, 0)
    # The finished ones were not created again, and no event got a second version.
    assert stored(redis_url, layout) == (set(all_ids[20:]), 100)

    # A third attempt sees both earlier attempts' records.
    finish(redis_url, layout, all_ids[60:70])
    assert write(attempt(12), all_ids) == (100, 0)
    assert stored(redis_url, layout) == (set(all_ids[20:60] + all_ids[70:]), 100)


def test_an_attempt_a_retry_took_over_from_writes_nothing_more(
    redis_url: str, layout: QueueLayout, attempt: Callable[[int], ChunkWriter]
) -> None:
    """A killed attempt's last pipeline may reach the server after its retry started: it is
    refused, so the retry's reading of the record stays all the task wrote."""
    first = attempt(10)
    retry = attempt(11)
    with pytest.raises(ResponseError, match="ABANDONED attempt 10"):
        write(first, ["late-1", "late-2"])
    assert stored(redis_url, layout) == (set(), 0)
    # Nor can it take the record back.
    with pytest.raises(ResponseError, match="attempt 11 has taken"):
        attempt(10)
    assert write(retry, ["late-1", "late-2"]) == (2, 0)


def test_duplicate_ids_keep_their_counts_across_attempts(
    redis_url: str, layout: QueueLayout, attempt: Callable[[int], ChunkWriter]
) -> None:
    ids = ["d-1", "d-2", "d-1", "d-3", "d-1"]
    assert write(attempt(10), ids) == (3, 2)
    finish(redis_url, layout, ["d-1"])
    # Each occurrence gets its own recorded result back: the later ones were "already
    # pending", and none of them writes the finished d-1 again.
    assert write(attempt(11), ids) == (3, 2)
    assert stored(redis_url, layout) == ({"d-2", "d-3"}, 3)
    # An occurrence no earlier attempt met is written as usual.
    assert write(attempt(12), [*ids, "d-1"]) == (4, 2)
    assert stored(redis_url, layout) == ({"d-1", "d-2", "d-3"}, 4)


def test_the_record_holds_one_entry_per_call(
    redis_url: str, layout: QueueLayout, attempt: Callable[[int], ChunkWriter]
) -> None:
    """What keeps the record cheap: a field per script call of a queue partition, not per
    event."""
    ids = [f"c-{n}" for n in range(200)]
    assert write(attempt(10), ids) == (200, 0)
    with sync_client(redis_url) as client:
        fields = [
            field
            for keys in layout.all_keys
            for field in client.hkeys(keys.run_record("run-1", TASK))
        ]
    calls = [field for field in fields if field != b"fence"]
    # 200 ids over 4 queue partitions in calls of at most 7 (batch_size)
    assert 200 // 7 <= len(calls) <= 200 // 7 + 4
    assert fields.count(b"fence") == 4
