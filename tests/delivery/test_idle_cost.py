"""What a running service costs Redis when nothing is due, and how it waits for what is."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventService, EventServiceBuilder
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck, Recorder, subscribed, wait_until

ServerFactory = Callable[..., EmbeddedServer]

WINDOW = 1.5
# The observer's own commands, left out of the counts.
OBSERVER_COMMANDS = {"info", "client|list"}


async def command_calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started, commands run inside scripts included."""
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(fields["calls"])
        for name, fields in stats.items()
        if name.removeprefix("cmdstat_") not in OBSERVER_COMMANDS
    }


async def test_idle_service_sends_few_commands(server_factory: ServerFactory) -> None:
    """With nothing due for an hour, a running service sends a couple of commands a second
    (a polling loop would send hundreds): no dispatch and no claim while nothing is due, one
    sweep (peek.lua) per scheduling interval, and its consumer waits for a wake-up on the
    service's one subscription."""
    server = server_factory()
    service = (
        EventService.builder().url(server.url).scheduling_interval(0.5).polling_timeout(1.0).build()
    )
    async with redis.Redis.from_url(server.url) as observer, service:
        service.add_handler(PaymentCheck, Recorder(), parallelism=4)
        for i in range(20):
            await service.enqueue(PaymentCheck(id=f"p-{i}", order_id=i), 3600)

        async def settled() -> bool:
            consumer = service._delivery.consumer_of(PaymentCheck)
            idle = consumer is not None and consumer.idle_partitions == 1
            return idle and await subscribed(observer) == 1

        await wait_until(settled)

        before = await command_calls(observer)
        await anyio.sleep(WINDOW)  # the measurement window; nothing is meant to happen
        after = await command_calls(observer)

    calls = {name: after[name] - before.get(name, 0) for name in after}
    calls = {name: count for name, count in calls.items() if count}
    round_trips = calls.get("fcall", 0) + calls.get("evalsha", 0) + calls.get("eval", 0)
    # Expected per second: two sweeps (a peek.lua call each, for the one queue), and a ping of
    # the subscription every 5 s.
    assert round_trips / WINDOW < 4, calls
    assert sum(calls.values()) / WINDOW < 16, calls
    # dispatch.lua is the only script that runs ZRANGEBYSCORE, claim.lua the only LPOP: nothing
    # is due, so neither runs.
    assert calls.get("zrangebyscore", 0) == 0, calls
    assert calls.get("lpop", 0) == 0, calls


@pytest.mark.backends("standalone", "cluster")
async def test_dispatcher_sleeps_until_the_earliest_due_time(
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    """With a 5 s scheduling interval, an event enqueued 0.3 s ahead arrives after 0.3 s and
    well before the interval: the enqueue wakes the dispatcher, which then sleeps exactly
    until the due time."""
    handler = Recorder()
    service = service_builder().scheduling_interval(5.0).build()
    # Delivered by a first pass; once it has arrived the dispatcher sleeps until that event's
    # lease ends (about 2 s), so only a wake-up can deliver the next event sooner.
    await service.enqueue(PaymentCheck(id="p-first", order_id=0), 0)
    async with service:
        service.add_handler(PaymentCheck, handler)
        await handler.wait_for(1)

        enqueued_at = time.monotonic()
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0.3)
        await handler.wait_for(2, within=5.0)
        took = time.monotonic() - enqueued_at
    assert handler.ids == ["p-first", "p-1"]
    # Due times are whole milliseconds on the server clock, hence the 2 ms of slack.
    assert took >= 0.3 - 0.002
    assert took < 0.8
