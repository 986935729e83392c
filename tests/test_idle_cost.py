"""What a running service costs Redis when nothing is due, and how it waits for what is."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventService, EventServiceBuilder
from aioqueue.testing import EmbeddedServer
from tests.support import PaymentCheck, Recorder, wait_until

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
    """With nothing due for an hour, a running service sends a handful of commands a second
    (a polling loop would send hundreds) and its consumer waits inside BLMOVE."""
    server = server_factory()
    service = (
        EventService.builder().url(server.url).scheduling_interval(0.5).polling_timeout(1.0).build()
    )
    async with redis.Redis.from_url(server.url) as observer, service:
        service.add_handler(PaymentCheck, Recorder(), parallelism=4)
        for i in range(20):
            await service.enqueue(PaymentCheck(id=f"p-{i}", order_id=i), 3600)

        async def consumer_is_blocked_in_blmove() -> bool:
            return any(
                entry["cmd"] == "blmove" and "b" in entry["flags"]
                for entry in await observer.client_list()
            )

        # Settled once the consumer is parked in a blocking wait on the server.
        await wait_until(consumer_is_blocked_in_blmove)

        before = await command_calls(observer)
        await anyio.sleep(WINDOW)  # the measurement window; nothing is meant to happen
        after = await command_calls(observer)

    calls = {name: after[name] - before.get(name, 0) for name in after}
    calls = {name: count for name, count in calls.items() if count}
    round_trips = calls.get("evalsha", 0) + calls.get("eval", 0) + calls.get("blmove", 0)
    # Expected per second: 2 dispatch passes and 1 claim (scripts) and 1 BLMOVE, which is 4
    # round trips and about 14 commands counting those the scripts run.
    assert round_trips / WINDOW < 8, calls
    assert sum(calls.values()) / WINDOW < 25, calls
    # dispatch.lua is the only script that runs ZRANGEBYSCORE: one per pass, every 0.5 s.
    assert calls.get("zrangebyscore", 0) <= 4, calls
    # The consumer blocks between claims (claim.lua's LPOP) instead of polling for them.
    assert 1 <= calls.get("blmove", 0) <= 3, calls
    assert calls.get("lpop", 0) <= calls["blmove"] + 1, calls


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
