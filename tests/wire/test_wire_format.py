"""Another program can produce events from docs/wire-format.md alone, and the library reads them."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from redis.exceptions import ResponseError

from aioqueue import EventServiceBuilder
from aioqueue._transport.client import RedisClient
from aioqueue._wire.functions import PRELUDE_PARTS
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import script_source
from tests.support.common import PaymentCheck, Recorder, drained, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

SCHEDULE = "aioqueue:{PaymentCheck}:schedule"
EVENTS = "aioqueue:{PaymentCheck}:events"
SEQUENCE = "aioqueue:{PaymentCheck}:sequence"
DEAD_LETTERS = "aioqueue:{PaymentCheck}:dead_letters"
REPO_ROOT = Path(__file__).resolve().parents[2]

# One event's arguments to the enqueue script: id, payload, context, due kind, milliseconds.
Args = tuple[str, str, str, str, int]


async def eval_enqueue(redis_client: RedisClient, *events: Args) -> list[int]:
    """The documented EVAL of the enqueue script (mode '0': keep a pending event)."""
    replies = await redis_client.eval(
        script_source("enqueue"),
        3,
        SCHEDULE,
        EVENTS,
        SEQUENCE,
        "0",
        "PaymentCheck",
        *(value for event in events for value in event),
    )
    return list(replies)


async def test_a_raw_eval_of_the_enqueue_script_is_delivered(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """The documented EVAL call (no library code on the producer side) schedules events."""
    replies = await eval_enqueue(
        redis_client,
        ("p-1", '{"order_id":1}', '{"source":"spark"}', "delay", 50),
        ("p-2", '{"order_id":2}', "{}", "at", 0),
        ("p-1", '{"order_id":99}', "{}", "delay", 0),
    )
    assert replies == [1, 1, 0]
    stored = await redis_client.hget(EVENTS, "p-1")
    assert stored is not None
    envelope = orjson.loads(stored)
    # Nothing else: the id is the field, the type the key, an attempt count of 0 is left out,
    # and the fields every envelope carries have one-letter keys (a backlog pays per byte).
    assert envelope == {"p": '{"order_id":1}', "context": {"source": "spark"}, "v": 1}
    # One version per event written, in order, and the sequence left at the last.
    second = await redis_client.hget(EVENTS, "p-2")
    assert second is not None
    assert orjson.loads(second)["v"] == 2
    assert await redis_client.get(SEQUENCE) == b"2"
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        deliveries = await handler.wait_for(2)
    by_id = {d.event.id: d for d in deliveries}
    assert by_id["p-1"].event == PaymentCheck(id="p-1", order_id=1)
    assert by_id["p-1"].context == {"source": "spark"}
    assert by_id["p-2"].event == PaymentCheck(id="p-2", order_id=2)


async def test_versions_go_on_from_a_large_sequence_as_integers(
    redis_client: RedisClient,
) -> None:
    """The script numbers a call's events from the sequence in one step, and leaves the
    sequence an integer INCR can take, also past 10**14, where Lua would write a number
    with an exponent."""

    async def enqueue(*ids: str) -> list[int]:
        return await eval_enqueue(
            redis_client, *((event_id, "{}", "{}", "delay", 50) for event_id in ids)
        )

    await redis_client.set(SEQUENCE, 10**12)
    assert await enqueue("p-1", "p-2") == [1, 1]
    stored = await redis_client.hmget(EVENTS, ["p-1", "p-2"])
    assert [orjson.loads(raw)["v"] for raw in stored if raw is not None] == [
        10**12 + 1,
        10**12 + 2,
    ]
    await redis_client.set(SEQUENCE, 10**15)
    assert await enqueue("p-3", "p-4") == [1, 1]
    assert await redis_client.get(SEQUENCE) == str(10**15 + 2).encode()
    assert await redis_client.incr(SEQUENCE) == 10**15 + 3


async def test_envelopes_stored_with_the_long_keys_are_handled_and_requeued_with_the_short(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """An envelope written before `p` and `v` (with `payload` and `version`) is inspected,
    delivered, retried and buried like any other; requeueing it writes the short keys."""
    legacy = '{"payload":"{\\"order_id\\":5}","context":{"trace":"t-5"},"version":7}'
    await redis_client.hset(EVENTS, "p-5", legacy)
    await redis_client.set(SEQUENCE, 7)  # as the version's enqueue left it
    await redis_client.zadd(SCHEDULE, {"p-5": 0})
    failing = Recorder(outcome=lambda event: False)
    async with service_builder().retry_attempts(2).build() as service:
        info = await service.inspect(PaymentCheck, "p-5")
        assert info is not None
        assert (info.payload, info.context) == ('{"order_id":5}', {"trace": "t-5"})
        service.add_handler(PaymentCheck, failing)
        await wait_until(lambda: redis_client.hexists(DEAD_LETTERS, "p-5"))
        [dead] = await service.dead_letters(PaymentCheck)
    assert [d.event for d in failing.deliveries] == [PaymentCheck(id="p-5", order_id=5)] * 2
    assert (dead.event, dead.context, dead.attempts) == (
        PaymentCheck(id="p-5", order_id=5), {"trace": "t-5"}, 2
    )  # fmt: skip
    async with service_builder().build() as service:  # no handler: nothing consumes it
        assert await service.requeue(PaymentCheck, "p-5") is True
    requeued = orjson.loads(await redis_client.hget(EVENTS, "p-5") or b"null")
    assert requeued == {"p": '{"order_id":5}', "context": {"trace": "t-5"}, "v": 8}
    succeeding = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, succeeding)
        [delivery] = await succeeding.wait_for(1)
        await wait_until(drained(redis_client, QueueKeys.for_type("aioqueue", "PaymentCheck")))
    assert (delivery.event, delivery.context) == (
        PaymentCheck(id="p-5", order_id=5), {"trace": "t-5"}
    )  # fmt: skip


async def test_an_id_inside_the_payload_is_ignored_and_cancel_works_as_documented(
    redis_client: RedisClient, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """The script's id wins over an `id` in the payload; cancel.lua takes the documented
    keys and argument and answers 1, then 0."""
    enqueue = script_source("enqueue")
    keys = (SCHEDULE, EVENTS, SEQUENCE)
    for event_id in ("p-3", "p-4"):
        payload = orjson.dumps({"id": "someone-else", "order_id": 3}).decode()
        await redis_client.eval(enqueue, 3, *keys, "0", "PaymentCheck", event_id, payload, "{}",
                                "delay", 0 if event_id == "p-3" else 3_600_000)  # fmt: skip
    cancel = script_source("cancel")
    assert await redis_client.eval(cancel, 2, SCHEDULE, EVENTS, "p-4") == 1
    assert await redis_client.eval(cancel, 2, SCHEDULE, EVENTS, "p-4") == 0
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        [delivery] = await handler.wait_for(1)
    assert delivery.event == PaymentCheck(id="p-3", order_id=3)
    assert await redis_client.hlen(EVENTS) == 0


async def test_the_enqueue_script_refuses_a_type_that_does_not_own_the_keys(
    redis_client: RedisClient,
) -> None:
    """A producer naming one type cannot write into another type's queue."""
    with pytest.raises(ResponseError, match="does not own key"):
        await redis_client.eval(
            script_source("enqueue"),
            3,
            SCHEDULE,
            EVENTS,
            SEQUENCE,
            "0",
            "OrderTimeout",
            *("o-1", "{}", "{}", "delay", 0),
        )
    assert await redis_client.exists(EVENTS) == 0


async def test_the_optional_enqueue_keys_are_told_by_their_places(
    redis_client: RedisClient,
) -> None:
    """KEYS[5] counts, KEYS[6] ready, KEYS[7] a Spark task's run record, as documented: a
    confirmed call needs the fifth, and a recorded call writes its results to the seventh."""
    counts, ready = "aioqueue:{PaymentCheck}:counts", "aioqueue:{PaymentCheck}:ready"
    record = "aioqueue:{PaymentCheck}:runs:r-1:0"
    wake = "aioqueue:{PaymentCheck}:wake"
    event = ("p-1", '{"order_id":1}', "{}", "delay", 60_000)
    enqueue = script_source("enqueue")
    with pytest.raises(ResponseError, match=r"enqueue mode '\+wait' needs the counts key"):
        await redis_client.eval(enqueue, 4, SCHEDULE, EVENTS, SEQUENCE, wake, "0+wait",
                                "PaymentCheck", *event)  # fmt: skip
    keys = (SCHEDULE, EVENTS, SEQUENCE, wake, counts, ready, record)
    assert await redis_client.eval(enqueue, 7, *keys, "0@7:1", "PaymentCheck", *event) == [1]
    assert await redis_client.eval(enqueue, 5, *keys[:5], "0+wait", "PaymentCheck", *event) == [0]
    assert orjson.loads(await redis_client.hget(record, "7:1") or b"null") == [["p-1"], "1"]
    # The kept event's call wrote the no-op a WAIT after it needs.
    assert await redis_client.hget(counts, "under_way") == b"0"


async def test_the_documented_redis_cli_eval_runs_as_written(redis_client: RedisClient) -> None:
    """docs/wire-format.md's redis-cli example builds the enqueue script's source from the
    files themselves: it names every part of the shared helpers, in the order the scripts
    run them, and the text it builds schedules an event."""
    docs = (REPO_ROOT / "docs" / "wire-format.md").read_text()
    [files] = re.findall(r'redis-cli EVAL "\$\(cat ([^)]*)\)"', docs)
    assert files.split() == [*PRELUDE_PARTS, "enqueue.lua"]
    lua = REPO_ROOT / "aioqueue" / "_wire" / "lua"
    source = "".join((lua / name).read_text() for name in files.split())
    keys = [SCHEDULE, EVENTS, SEQUENCE, "aioqueue:{PaymentCheck}:wake"]
    reply = await redis_client.eval(
        source, 4, *keys, "0", "PaymentCheck", "p-7", '{"order_id":7}', "{}", "delay", 60000
    )
    assert reply == [1]
    assert await redis_client.zscore(SCHEDULE, "p-7") is not None
