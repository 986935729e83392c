"""A worker at a trickle, aioqueue only: what each delivered event costs in calls and CPU.

    python trickle.py [--cluster] [--partitions N] [--idle-types N] [--events 3000] [--runs 3]

Each run starts an embedded server (or a 3-master `EmbeddedCluster`), a worker service
handling `Tick` (10 handler slots, `.partitions(Tick, N)` with --partitions) and `idle-types`
other types that never get an event, and a producer-only service in the same process.
The producer enqueues `events` Ticks with 32 calls in flight, each due at its own time in
[1.5 s, 2.5 s) from the start (uniform, seed 42), so the worker delivers them one or a few at
a time, with the producer idle. Counted from the end of the enqueueing to the last delivery:
the worker's script calls and blocking waits by name, the process's CPU seconds, and the
servers' (INFO cpu, every node). Prints one line per run and one JSON line after
RESULT_MARKER with every run's figures.

The calls are counted by wrapping the service's internal call sites (LuaScript.run and the
store's blocking wait) in this process only; the figures are per delivered event.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, make_dataclass
from datetime import datetime, timezone
from typing import Any

import redis
from common import (
    CONCURRENCY,
    IN_FLIGHT,
    RESULT_MARKER,
    JsonDict,
    cpu_seconds,
    run_in_flight,
    spread_delays,
)

from aioqueue import Event, EventService, EventServiceBuilder
from aioqueue._wire import scripts, store
from aioqueue.testing import EmbeddedCluster, EmbeddedServer

LEAD = 1.5
SPREAD = 1.0
SEED = 42
MASTERS = 3

calls: collections.Counter[str] = collections.Counter()


def count_calls() -> None:
    """Counts each script call by script name, and each blocking wait by command."""
    run = scripts.LuaScript.run
    blocking_wait = store.QueueStore._blocking_wait

    async def counted_run(script: scripts.LuaScript, *args: Any, **kwargs: Any) -> Any:
        calls[script.name] += 1
        return await run(script, *args, **kwargs)

    async def counted_wait(queue: store.QueueStore, timeout: float, *command: str) -> Any:
        calls[command[0]] += 1
        return await blocking_wait(queue, timeout, *command)

    scripts.LuaScript.run = counted_run  # type: ignore[method-assign]
    store.QueueStore._blocking_wait = counted_wait  # type: ignore[method-assign]


@dataclass
class Tick(Event):
    id: str
    index: int


IDLE_TYPES = [make_dataclass(f"Idle{n}", [("id", str)], bases=(Event,)) for n in range(100)]


def server_cpu(ports: Sequence[int]) -> float:
    total = 0.0
    for port in ports:
        with redis.Redis(port=port) as client:
            info = client.info("cpu")
        total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


async def one_run(url: str, ports: Sequence[int], options: argparse.Namespace) -> JsonDict:
    def builder() -> EventServiceBuilder:
        built = EventService.builder().url(url)
        return built.partitions(Tick, options.partitions) if options.partitions > 1 else built

    seen: set[int] = set()
    warm, all_seen = asyncio.Event(), asyncio.Event()

    async def handle(tick: Tick) -> bool:
        if tick.index < 0:
            warm.set()
            return True
        seen.add(tick.index)
        if len(seen) == options.events:
            all_seen.set()
        return True

    async def ignore(event: Event) -> bool:
        return True

    worker, producer = builder().build(), builder().enable_scheduling(False).build()
    async with worker, producer:
        worker.add_handler(Tick, handle, parallelism=CONCURRENCY)
        for idle_type in IDLE_TYPES[: options.idle_types]:
            worker.add_handler(idle_type, ignore)
        await producer.enqueue(Tick(id="warm-up", index=-1), 0)
        await asyncio.wait_for(warm.wait(), 60)
        start = time.time()
        dues = [
            datetime.fromtimestamp(start + LEAD + offset, timezone.utc)
            for offset in spread_delays(options.events, SPREAD, SEED)
        ]

        async def enqueue(indices: range) -> None:
            for index in indices:
                await producer.enqueue(Tick(id=f"t-{index}", index=index), at=dues[index])

        await run_in_flight(options.events, 1, IN_FLIGHT, enqueue)
        if time.time() > start + LEAD:
            raise RuntimeError("the enqueueing outlasted the lead: delivery overlapped it")
        calls.clear()
        cpu, servers = cpu_seconds(), server_cpu(ports)
        await asyncio.wait_for(all_seen.wait(), 60)
        cpu, servers = cpu_seconds() - cpu, server_cpu(ports) - servers
    per_event = {name: count / options.events for name, count in sorted(calls.items())}
    return {
        "calls_per_event": per_event,
        "worker_cpu_us_per_event": cpu / options.events * 1e6,
        "server_cpu_us_per_event": servers / options.events * 1e6,
    }


async def main(options: argparse.Namespace) -> None:
    count_calls()
    results = []
    for _ in range(options.runs):
        server = EmbeddedCluster(masters=MASTERS) if options.cluster else EmbeddedServer()
        await asyncio.to_thread(server.start)
        try:
            ports = [node.port for node in server.nodes] if options.cluster else [server.port]
            result = await one_run(server.url, ports, options)
        finally:
            await asyncio.to_thread(server.stop)
        calls_text = ", ".join(f"{k} {v:.2f}" for k, v in result["calls_per_event"].items())
        print(
            f"worker {result['worker_cpu_us_per_event']:.0f} µs, "
            f"server {result['server_cpu_us_per_event']:.0f} µs an event; calls: {calls_text}"
        )
        results.append(result)
    print(RESULT_MARKER + json.dumps({"options": vars(options), "runs": results}))


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--idle-types", type=int, default=0)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
