"""Acknowledgements: they ride the consumer's next claim, or go on their own when no claim is
coming soon."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import orjson
import pytest

from aioqueue import EventServiceBuilder
from aioqueue._transport.client import RedisClient
from tests.support.common import PaymentCheck, Recorder, queue_key, wait_until
from tests.support.script_calls import ScriptCall

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
EVENTS = queue_key("PaymentCheck", "events")
SCHEDULE = queue_key("PaymentCheck", "schedule")


def acknowledged_ids(calls: list[ScriptCall], script: str) -> list[str]:
    """Ids that calls of `script` acknowledged: claim.lua takes them as a JSON array of (id,
    version, attempt) triples after its three arguments (count, lease, receipt token),
    acknowledge.lua as plain triples."""
    ids: list[str] = []
    for call in calls:
        if call.script == script == "claim" and len(call.args) > 3:
            assert isinstance(call.args[3], bytes)
            ids += orjson.loads(call.args[3])[::3]
        elif call.script == script == "acknowledge":
            ids += [str(arg) for arg in call.args[::3]]
    return ids


async def drained(client: RedisClient) -> bool:
    return await client.hlen(EVENTS) == 0 and await client.zcard(SCHEDULE) == 0


async def test_finished_events_are_acknowledged_by_the_next_claim(
    service_builder: Builder, redis_client: RedisClient, script_calls: list[ScriptCall]
) -> None:
    """Instant handlers finish while the consumer's next claim is due: every acknowledgement
    rides a claim, and none needs a call of its own."""
    handler = Recorder()
    ids = [f"p-{n}" for n in range(60)]
    async with service_builder().build() as service:
        assert all(await service.enqueue_many([PaymentCheck(id=i, order_id=0) for i in ids], 0))
        service.add_handler(PaymentCheck, handler, parallelism=10)
        await handler.wait_for(60)
        await wait_until(lambda: drained(redis_client))
    assert sorted(handler.ids) == sorted(ids)
    assert sorted(acknowledged_ids(script_calls, "claim")) == sorted(ids)
    assert acknowledged_ids(script_calls, "acknowledge") == []


async def test_a_success_while_the_consumer_waits_in_redis_is_acknowledged_on_its_own(
    service_builder: Builder, redis_client: RedisClient, script_calls: list[ScriptCall]
) -> None:
    """The consumer's next claim may be a long way off (it waits for a wake-up), so the
    acknowledgement goes at once."""
    handler = Recorder()
    started, release = anyio.Event(), anyio.Event()

    async def held(event: PaymentCheck) -> bool:
        started.set()
        await release.wait()
        return await handler(event)

    async with service_builder().polling_timeout(30).build() as service:
        service.add_handler(PaymentCheck, held, parallelism=2)
        await service.enqueue(PaymentCheck(id="p-held", order_id=0), 0)
        with anyio.fail_after(10):
            await started.wait()

        async def consumer_waits() -> bool:
            consumer = service._delivery.consumer_of(PaymentCheck)
            return consumer is not None and consumer.idle_partitions == 1

        await wait_until(consumer_waits)
        release.set()
        await handler.wait_for(1)
        with anyio.fail_after(2):  # well before the consumer's wait ends
            await wait_until(lambda: drained(redis_client))
    assert acknowledged_ids(script_calls, "acknowledge") == ["p-held"]
    assert "p-held" not in acknowledged_ids(script_calls, "claim")
