"""`aioqueue worker --processes N` against one process, with handlers that spend CPU.

    python benchmarks/worker_processes.py [--events 2000] [--cpu-ms 2] [--processes 1,2]
                                          [--repeats 3]

Each run enqueues `events` events due now on an embedded server, then starts `aioqueue
worker worker_processes:create_service --app-dir benchmarks --processes N` and times it from
the start of the command until every event is handled (its events hash is empty), then stops
it with SIGTERM. The handler (also in this file) is an `async def` that computes for about
`cpu-ms` milliseconds without awaiting, as a handler that parses, renders or hashes does: it
holds its process's event loop meanwhile, so one process handles one at a time whatever its
parallelism. Runs alternate between process counts; the table gives the median events/s
of each and its ratio to one process. Needs as many free cores as processes to mean anything.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import redis

from aioqueue import Event, EventService
from aioqueue.testing import EmbeddedServer

HERE = Path(__file__).resolve().parent
PREFIX = "bench-processes"


@dataclass
class Crunch(Event):
    id: str


# PBKDF2 iterations that take about a millisecond here; the handler repeats it CPU_MS times.
ROUNDS_PER_MS = 5_500


async def crunch(event: Crunch) -> bool:
    for _ in range(int(os.environ.get("CPU_MS", "2"))):
        hashlib.pbkdf2_hmac("sha256", event.id.encode(), b"salt", ROUNDS_PER_MS)
    return True


def create_service(url: str, prefix: str) -> EventService:
    service = EventService.builder().url(url).prefix(prefix).build()
    service.add_handler(Crunch, crunch, parallelism=4)
    return service


def run(url: str, processes: int, events: int, cpu_ms: int) -> float:
    """Events handled per second by `processes` worker processes."""
    client = redis.Redis.from_url(url)
    client.flushall()
    producer = EventService.builder().url(url).prefix(PREFIX).enable_scheduling(False).build()

    async def fill() -> None:
        async with producer:
            await producer.enqueue_many([Crunch(id=f"c-{n}") for n in range(events)], 0)

    anyio.run(fill)
    events_key = f"{PREFIX}:{{Crunch}}:events"
    started = time.perf_counter()
    command = subprocess.Popen(
        [
            sys.executable, "-m", "aioqueue", "worker", "worker_processes:create_service",
            "--app-dir", str(HERE), "--url", url, "--prefix", PREFIX,
            "--processes", str(processes), "--log-level", "WARNING",
        ],
        env={**os.environ, "CPU_MS": str(cpu_ms)},
    )  # fmt: skip
    try:
        while client.hlen(events_key):
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    finally:
        command.send_signal(signal.SIGTERM)
        command.wait(timeout=60)
        client.close()
    return events / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--cpu-ms", type=int, default=2)
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    counts = [int(count) for count in options.processes.split(",")]
    rates: dict[int, list[float]] = {count: [] for count in counts}
    with EmbeddedServer() as server, contextlib.suppress(KeyboardInterrupt):
        for _ in range(options.repeats):
            for count in counts:
                rates[count].append(run(server.url, count, options.events, options.cpu_ms))
    base = statistics.median(rates[counts[0]])
    print(f"{'processes':>9} {'events/s (median)':>18} {'runs':>30} {'ratio':>6}")
    for count in counts:
        median = statistics.median(rates[count])
        runs = ", ".join(f"{rate:.0f}" for rate in rates[count])
        print(f"{count:>9} {median:>18.0f} {runs:>30} {median / base:>6.2f}")


if __name__ == "__main__":
    main()
