"""Failures, retries, dead letters and requeue on a real server, malformed envelopes included."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import orjson
import pytest

from aioqueue import EventServiceBuilder, FixedDelays
from aioqueue._transport.client import RedisClient
from tests.support.common import EVERY_TOPOLOGY, PaymentCheck, Recorder, queue_key, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
Failure = Literal["returns-false", "raises", "times-out"]

SCHEDULE = queue_key("PaymentCheck", "schedule")
EVENTS = queue_key("PaymentCheck", "events")
READY = queue_key("PaymentCheck", "ready")
DEAD_LETTERS = queue_key("PaymentCheck", "dead_letters")


def flaky_handler(
    how: Failure, failures: int, recorder: Recorder, started: list[float]
) -> Callable[..., Awaitable[bool]]:
    """A handler that fails `failures` times in the way `how` says, then succeeds."""
    failures_left = failures

    async def check_payment(event: PaymentCheck) -> bool:
        nonlocal failures_left
        started.append(time.monotonic())
        await recorder(event)
        if failures_left == 0:
            return True
        failures_left -= 1
        if how == "raises":
            raise LookupError("card service down")
        if how == "times-out":
            await anyio.sleep_forever()
        return False

    return check_payment


def dead_letter_count(client: RedisClient, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await client.hlen(DEAD_LETTERS) == count

    return check


async def nothing_pending(client: RedisClient) -> bool:
    return await client.hlen(EVENTS) == 0 and await client.zcard(SCHEDULE) == 0


@pytest.mark.parametrize(
    ("how", "error"),
    [
        ("returns-false", "check_payment returned False on attempt 3"),
        ("raises", "attempt 3 raised LookupError: card service down"),
        ("times-out", "the handler did not finish within 0.2 s on attempt 3"),
    ],
)
@EVERY_TOPOLOGY
async def test_failures_are_retried_then_dead_lettered_and_requeue_revives_them(
    service_builder: Builder, redis_client: RedisClient, how: Failure, error: str
) -> None:
    """Each way of failing must schedule the retry its policy says, bury the event after the
    last attempt with the error text, and a requeued event must get fresh attempts."""
    recorder = Recorder()
    started: list[float] = []
    # Three failures bury the event; after requeue one more failure, then success.
    handler = flaky_handler(how, failures=4, recorder=recorder, started=started)
    # A lost worker's event comes back after handler timeout + 1 s = 1.2 s; a recorded
    # failure must bring it back after the policy's 0.1 s instead.
    builder = (
        service_builder().retry_attempts(3).handler_timeout(0.2).retry_policy(FixedDelays([0.1]))
    )
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0, context={"trace": "t-1"})
        await wait_until(dead_letter_count(redis_client, 1))
        calls_before_death = len(recorder.deliveries)
        assert await nothing_pending(redis_client)
        [dead] = await service.dead_letters(PaymentCheck)

        assert await service.requeue(PaymentCheck, "unknown") is False
        assert await service.requeue(PaymentCheck, "p-1") is True
        assert await service.dead_letters(PaymentCheck) == []
        await recorder.wait_for(5)
        await wait_until(lambda: nothing_pending(redis_client))
        assert await service.dead_letters(PaymentCheck) == []
    assert calls_before_death == 3
    for previous, following in itertools.pairwise(started[:3]):
        assert 0.099 <= following - previous < 1.0
    assert dead.id == "p-1"
    assert dead.attempts == 3
    assert error in dead.error
    assert dead.event == PaymentCheck(id="p-1", order_id=1)
    assert dead.context == {"trace": "t-1"}
    assert recorder.ids == ["p-1"] * 5


def envelope(event_id: str, **changes: object) -> str:
    """An envelope as enqueue.lua writes it (see docs/wire-format.md), with `changes`;
    a change to None leaves the field out."""
    fields = {
        "id": event_id,
        "type": "PaymentCheck",
        "p": '{"order_id": 1}',
        "context": {},
        "attempt": 0,
        "v": 1,
        "enqueued_at": 0,
    }
    fields.update(changes)
    return orjson.dumps(
        {name: value for name, value in fields.items() if value is not None}
    ).decode()


async def test_malformed_events_are_dead_lettered_and_the_consumer_goes_on(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """Unusable envelopes and payloads must end in the dead letters with the reason, and must
    neither reach the handler nor stop it from getting the next good event."""
    written = {
        "bad-json": envelope("bad-json", p="{not json"),
        "missing-field": envelope("missing-field", p="{}"),
        "other-type": envelope("other-type", type="OrderTimeout", p="{}"),
        "not-an-envelope": "this is not JSON",
        # Envelopes a consumer could neither settle nor claim, from a careless producer.
        "no-version": envelope("no-version", v=None),
        "wrong-id": envelope("another-id"),
        "payload-object": envelope("payload-object", p={"order_id": 1}),
        "bad-context": envelope("bad-context", context={"retries": 3}),
    }
    for event_id, raw in written.items():
        await redis_client.hset(EVENTS, event_id, raw)
    await redis_client.zadd(SCHEDULE, dict.fromkeys(written, 0))
    garbage = b"garbage pushed onto the ready list"
    await redis_client.rpush(READY, garbage)
    garbage_id = "unreadable:" + hashlib.sha1(garbage).hexdigest()
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)
        await wait_until(dead_letter_count(redis_client, len(written) + 1))
        await service.enqueue(PaymentCheck(id="good", order_id=7), 0)
        [delivery] = await recorder.wait_for(1)
        letters = {letter.id: letter for letter in await service.dead_letters(PaymentCheck)}
        # The success is acknowledged just after the handler returned.
        await wait_until(lambda: nothing_pending(redis_client))
    assert delivery.event == PaymentCheck(id="good", order_id=7)
    assert recorder.ids == ["good"]
    assert sorted(letters) == sorted([*written, garbage_id])
    assert "payload is not valid JSON" in letters["bad-json"].error
    assert "$: object missing required field order_id" in letters["missing-field"].error
    assert "names event type 'OrderTimeout'" in letters["other-type"].error
    assert letters["not-an-envelope"].error.startswith("envelope is not valid JSON")
    assert letters[garbage_id].error == "ready list entry is not a valid envelope"
    assert letters["no-version"].error == "envelope is malformed: version must be an integer"
    assert (
        letters["wrong-id"].error == "envelope is malformed: id field does not match the event id"
    )
    assert letters["payload-object"].error == (
        "envelope is malformed: payload must be a string of JSON text"
    )
    assert letters["bad-context"].error == (
        "envelope is malformed: context must be an object of strings"
    )
    for event_id in ("bad-json", "missing-field", "other-type"):
        assert letters[event_id].attempts == 1, event_id
    # What could not be read is kept as it was, for an operator to look at.
    for event_id in ("not-an-envelope", "no-version", "wrong-id", "payload-object", "bad-context"):
        assert orjson.loads(letters[event_id].raw)["raw"] == written[event_id], event_id
    assert orjson.loads(letters[garbage_id].raw)["raw"] == garbage.decode()
