"""What a service costs as its types and partitions grow: connections, idle CPU, enqueue rate
and lateness, for 1, 10, 100 and 1,000 types, and one type in 1 to 64 partitions.

    python benchmarks/many_types.py                # every row, one embedded server
    python benchmarks/many_types.py --types 1,100  # some rows only
    python benchmarks/many_types.py --json results/many_types.json

Each row runs on a flushed server, in this one process: a worker service (built from the
server's URL, as an application's is) with a handler for every type (parallelism 4), and a
producer service beside it.

- connections: the most the two services held on the server at once (CLIENT LIST, less the
  observer's own), sampled all through the row;
- idle CPU: this process's CPU time over 3 s in which nothing is due (every consumer
  waiting), as a share of one core;
- enqueue: events/s for 5,000 events an hour ahead, spread over the types, 32 calls in
  flight;
- lateness: p50 / p99 ms of 1,000 events due over 2 s, spread over the types, as each
  handler reads it (`current_delivery().lateness`).

Flat is the goal: before the connections were shared, a service held about five
connections per type, and past about 20 types redis-py's pool (100 connections) ran dry.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, make_dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import redis.asyncio as redis

from aioqueue import Event, EventService, current_delivery
from aioqueue.testing import EmbeddedServer

ENQUEUE_EVENTS = 5_000
LATENESS_EVENTS = 1_000
LATENESS_SPREAD = 2.0
IN_FLIGHT = 32
IDLE_SECONDS = 3.0


@dataclass
class Row:
    types: int
    partitions: int
    connections: int
    idle_cpu_share: float
    enqueue_per_s: float
    lateness_p50_ms: float
    lateness_p99_ms: float


def event_classes(count: int) -> list[type[Event]]:
    return [
        cast("type[Event]", make_dataclass(f"Bench{n}", [("id", str)], bases=(Event,)))
        for n in range(count)
    ]


async def connected(observer: redis.Redis) -> int:
    return len(await observer.client_list()) - 1  # the observer's own


async def run_row(url: str, types: int, partitions: int) -> Row:
    classes = event_classes(types)
    lateness_ms: list[float] = []
    wanted = types
    enough = anyio.Event()

    async def handle(event: Event) -> bool:
        nonlocal enough
        lateness_ms.append(current_delivery().lateness.total_seconds() * 1000)
        if len(lateness_ms) >= wanted:
            enough.set()
        return True

    worker_builder = EventService.builder().url(url)
    producer_builder = EventService.builder().url(url).enable_scheduling(False)
    if partitions > 1:
        worker_builder.partitions(classes[0], partitions)
        producer_builder.partitions(classes[0], partitions)
    most = 0
    async with redis.Redis.from_url(url) as observer:
        await observer.flushall()

        async def sample() -> None:
            nonlocal most
            most = max(most, await connected(observer))

        async with worker_builder.build() as worker, producer_builder.build() as producer:
            for event_class in classes:
                worker.add_handler(event_class, handle, parallelism=4)
            # Every type resolved and every consumer waiting, before anything is measured.
            await producer.enqueue_many([cls(id="warm") for cls in classes], 0)  # type: ignore[call-arg]
            with anyio.fail_after(60):
                await enough.wait()
            lateness_ms.clear()
            wanted, enough = LATENESS_EVENTS, anyio.Event()
            await sample()

            cpu, wall = time.process_time(), time.monotonic()
            await anyio.sleep(IDLE_SECONDS)
            idle_share = (time.process_time() - cpu) / (time.monotonic() - wall)
            await sample()

            events = [classes[n % types](id=f"e-{n}") for n in range(ENQUEUE_EVENTS)]  # type: ignore[call-arg]
            started = time.perf_counter()
            limiter = anyio.Semaphore(IN_FLIGHT)

            async def enqueue(event: Event, delay: float) -> None:
                async with limiter:
                    await producer.enqueue(event, delay)

            async with anyio.create_task_group() as enqueues:
                for event in events:
                    enqueues.start_soon(enqueue, event, 3600)
                await sample()
            enqueue_per_s = ENQUEUE_EVENTS / (time.perf_counter() - started)
            await sample()

            rng = random.Random(42)
            due = [classes[n % types](id=f"late-{n}") for n in range(LATENESS_EVENTS)]  # type: ignore[call-arg]
            async with anyio.create_task_group() as enqueues:
                for event in due:
                    enqueues.start_soon(enqueue, event, rng.uniform(0, LATENESS_SPREAD))
            with anyio.fail_after(LATENESS_SPREAD + 60):
                await enough.wait()
            await sample()
    quantiles = statistics.quantiles(lateness_ms, n=100)
    return Row(
        types=types,
        partitions=partitions,
        connections=most,
        idle_cpu_share=round(idle_share, 4),
        enqueue_per_s=round(enqueue_per_s),
        lateness_p50_ms=round(quantiles[49], 2),
        lateness_p99_ms=round(quantiles[98], 2),
    )


async def run(rows: Sequence[tuple[int, int]]) -> list[Row]:
    results = []
    with EmbeddedServer() as server:
        for types, partitions in rows:
            print(f"{types} types, {partitions} partitions ...", file=sys.stderr, flush=True)
            results.append(await run_row(server.url, types, partitions))
    return results


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--types", default="1,10,100,1000")
    parser.add_argument("--partitions", default="8,64", help="of one type, beside the rows")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = [(int(n), 1) for n in args.types.split(",") if n]
    rows += [(1, int(p)) for p in args.partitions.split(",") if p]
    results = anyio.run(run, rows)
    print("types  partitions  connections  idle CPU  enqueue/s  lateness p50 / p99 ms")
    for row in results:
        print(
            f"{row.types:5}  {row.partitions:10}  {row.connections:11}  "
            f"{row.idle_cpu_share:7.1%}  {row.enqueue_per_s:9,.0f}  "
            f"{row.lateness_p50_ms:.1f} / {row.lateness_p99_ms:.1f}"
        )
    if args.json is not None:
        document: dict[str, Any] = {"rows": [asdict(row) for row in results]}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
