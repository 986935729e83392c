"""Scenario 8, aioqueue only: the same work on a single server and on a 3-master Redis Cluster.

    python cluster.py cluster --variant single --url redis://... --events 3000
    python cluster.py cluster --variant cluster --events 3000
    python cluster.py cluster --variant cluster-partitioned --events 3000

One run: a worker process (a second copy of this script, `cluster.py worker`) is started,
handles one warm-up event of its own and says it is ready; then this process, a
producer-only service, enqueues `events` `Tick` events with 32 calls in flight, each at its
own due time in [start + LEAD, start + LEAD + SPREAD) (uniform, seed 42), and waits for the
worker to handle them all; that is one round, and a run makes ROUNDS of them on the same
servers and processes. LEAD is long enough that the enqueueing is over before the first
event is due, so the events are delivered with the producer idle; the result says whether it
was (`enqueued_before_due`, every round).

3,000 events take 40 to 70 ms to enqueue, and rates over so short a window moved by a
quarter from one run to the next on this machine (a single round per run, medians of three
runs: the cluster at 77 and 79.5 % of one server in two full runs, 97 % in six alternating
pairs outside them). A run's rate is therefore the median of its rounds' (`round_rates`),
and its lateness that of every round's events together.

Variants: `single` runs on the server the driver gives (`--url`); `cluster` starts an
`aioqueue.testing.EmbeddedCluster` of 3 masters for the run (about 2 s, outside every clock)
and `cluster-partitioned` the same with `.partitions(Tick, 8)` on both services. Figures: the
first enqueue's milliseconds, timed alone since it pays the process's one-time costs
(connections, the type's registry and schema records, on a cluster redis-py's command table);
the enqueue rate of the other events, 32 calls in flight (median of the rounds); and lateness
p50/p99/max from the worker's `Metrics` (server clock). The targets (issue 27) compare the
cluster rows with the single-server row of the same repeat's table. Runs in .venv-aioqueue;
prints one JSON line after RESULT_MARKER, as the other scenario scripts do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from common import (
    CLUSTER_ROUNDS,
    CONCURRENCY,
    IN_FLIGHT,
    READY_LINE,
    RESULT_MARKER,
    JsonDict,
    Recorder,
    cpu_seconds,
    lateness_summary,
    parse_result,
    run_in_flight,
    spread_delays,
)
from server_cpu import CpuReading, cpu_figures, read_server_cpu
from system_aioqueue import RecorderMetrics

import aioqueue
from aioqueue import Event, EventService, EventServiceBuilder, Outcome
from aioqueue.testing import EmbeddedCluster

SINGLE = "single"
CLUSTER = "cluster"
CLUSTER_PARTITIONED = "cluster-partitioned"
VARIANTS = (SINGLE, CLUSTER, CLUSTER_PARTITIONED)
PARTITIONS = 8
MASTERS = 3
# Seconds from the start of the enqueueing to the first due time, and over which the due
# times spread. 3,000 events at the slowest rate measured so far (about 4,500/s) take 0.7 s.
LEAD = 2.0
SPREAD = 1.0
SEED = 42
ROUNDS = CLUSTER_ROUNDS
# What the worker prints when it has handled every event of a round, then the round's number.
ROUND_DONE = "round-done"
# The index of the worker's warm-up event, which no producer enqueues.
WARM_UP = -1


@dataclass
class Tick(Event):
    id: str
    index: int


def builder(url: str, variant: str) -> EventServiceBuilder:
    built = EventService.builder().url(url)
    if variant == CLUSTER_PARTITIONED:
        built = built.partitions(Tick, PARTITIONS)
    return built


@asynccontextmanager
async def server_url(variant: str, url: str) -> AsyncIterator[tuple[str, list[str]]]:
    """The driver's server for `single`; otherwise a cluster started for this run. With it the
    URL of each server, whose CPU the run reads."""
    if variant == SINGLE:
        yield url, [url]
        return
    cluster = EmbeddedCluster(masters=MASTERS)
    # Starting blocks for about 2 s (the servers' own writable delay): in a thread.
    await asyncio.to_thread(cluster.start)
    try:
        yield cluster.url, [node.url for node in cluster.nodes]
    finally:
        await asyncio.to_thread(cluster.stop)


class AfterWarmUp(RecorderMetrics):
    """Passes deliveries on to the recorder from the second on: the first is the warm-up."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.warm = asyncio.Event()

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        if self.warm.is_set():
            super().event_handled(event_type, outcome, duration=duration, lateness=lateness)
        elif outcome == "ok":
            self.warm.set()


async def run_worker(url: str, variant: str, events: int, timeout: float) -> JsonDict:
    """The child: handles ROUNDS x `events` Ticks with CONCURRENCY handler slots, says when
    each round's are all handled; their lateness."""
    recorder = Recorder(events * ROUNDS)
    seen_per_round = [0] * ROUNDS

    async def handle(tick: Tick) -> bool:
        if tick.index != WARM_UP and tick.index not in recorder.seen:
            recorder.saw(tick.index)
            round_number = tick.index // events
            seen_per_round[round_number] += 1
            if seen_per_round[round_number] == events:
                print(ROUND_DONE, round_number, flush=True)
        return True

    metrics = AfterWarmUp(recorder)
    service = builder(url, variant).metrics(metrics).build()
    async with service:
        service.add_handler(Tick, handle, parallelism=CONCURRENCY)
        # One event through the whole path before the worker says it is ready (its client,
        # the function library, dispatch, a claim and the handler): the worker's one-time
        # start-up, which on a cluster includes redis-py's command table and a connection per
        # node, is then over before the producer's clock starts, as the producer's own first
        # enqueue is timed apart.
        await service.enqueue(Tick(id="warm-up", index=WARM_UP), 0)
        await asyncio.wait_for(metrics.warm.wait(), timeout)
        cpu_at_ready = cpu_seconds()
        print(READY_LINE, flush=True)
        await asyncio.wait_for(recorder.done.wait(), timeout)
        cpu = cpu_seconds() - cpu_at_ready
    return {
        "handled": recorder.handled,
        "lost": recorder.lost(),
        "cpu_s": cpu,
        "lateness_s": recorder.lateness,
    }


class Round:
    """One round of the producer: `len(offsets)` events from `first_index` on, due LEAD plus
    their offset after the round starts (when this is made)."""

    def __init__(self, service: EventService, offsets: Sequence[float], first_index: int) -> None:
        self.service = service
        self.offsets = offsets
        self.start = time.time()
        self.first_index = first_index
        self.timed = range(first_index, first_index + len(offsets))
        """The events the round's rate counts: all, or all but the first (`enqueue_first`)."""

    async def enqueue_first(self) -> float:
        """Enqueues the round's first event alone, leaving it out of the rate; seconds."""
        first, self.timed = self.timed[:1], self.timed[1:]
        started = time.perf_counter()
        await self.enqueue(first)
        return time.perf_counter() - started

    async def enqueue_timed(self, batch: range) -> None:
        """Enqueues `batch` of the timed events (positions in `timed`)."""
        await self.enqueue(self.timed[batch.start : batch.stop])

    async def enqueue(self, indices: range) -> None:
        for index in indices:
            offset = self.offsets[index - self.first_index]
            due = datetime.fromtimestamp(self.start + LEAD + offset, timezone.utc)
            await self.service.enqueue(Tick(id=f"t-{index}", index=index), at=due)

    def before_due(self) -> bool:
        """Whether the round's first event is not due yet."""
        return time.time() < self.start + LEAD


async def run_producer(
    url: str, servers: list[str], variant: str, events: int, timeout: float
) -> JsonDict:
    """Starts the worker, enqueues the events, and returns the figures of the run; the
    server CPU is that of `servers` (all nodes) over the rounds, enqueueing and delivery."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "worker",
        "--url", url,
        "--variant", variant,
        "--events", str(events),
        "--timeout", str(timeout),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        if line.decode().strip() != READY_LINE:
            raise RuntimeError(f"the cluster worker did not start (said {line!r})")
        offsets = spread_delays(events, SPREAD, SEED)
        # Dispatching is the worker's job: a producer-only service, as in scenario 3.
        service = builder(url, variant).enable_scheduling(False).build()
        round_rates: list[float] = []
        enqueued_before_due = True
        server_cpu_s = rounds_s = 0.0
        async with service:
            for round_number in range(ROUNDS):
                cpu_before = await read_server_cpu(servers)
                this_round = Round(service, offsets, first_index=round_number * events)
                if round_number == 0:
                    # The first enqueue is timed alone: it pays what a process pays once per
                    # type (connections, on a cluster redis-py's command table, the registry
                    # and schema records), which would otherwise be a fifth of a cluster's
                    # 3,000 events.
                    first_seconds = await this_round.enqueue_first()
                timed = len(this_round.timed)
                seconds = await run_in_flight(timed, 1, IN_FLIGHT, this_round.enqueue_timed)
                round_rates.append(timed / seconds)
                enqueued_before_due = enqueued_before_due and this_round.before_due()
                await wait_for_round(child.stdout, round_number, LEAD + SPREAD + timeout)
                cpu_after = await read_server_cpu(servers)
                server_cpu_s += cpu_after.cpu_s - cpu_before.cpu_s
                rounds_s += cpu_after.at - cpu_before.at
        output, _ = await asyncio.wait_for(child.communicate(), timeout)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the cluster worker exited with {child.returncode}")
    worker = parse_result(output.decode())
    lateness_s: list[float] = worker["lateness_s"]
    return {
        "first_enqueue_ms": first_seconds * 1000,
        "enqueue_per_s": statistics.median(round_rates),
        "round_rates": round_rates,
        "enqueued_before_due": enqueued_before_due,
        **lateness_summary(lateness_s),
        "worker_cpu_s": worker["cpu_s"],
        "handled": worker["handled"],
        "lost": worker["lost"],
        "lateness_ms": [round(value * 1000, 3) for value in lateness_s],
        # The rounds' readings added up, as one window of their total length.
        **cpu_figures(CpuReading(0.0, 0.0), CpuReading(server_cpu_s, rounds_s), events * ROUNDS),
    }


async def wait_for_round(
    worker_output: asyncio.StreamReader, round_number: int, limit: float
) -> None:
    """Waits until the worker says it has handled every event of the round."""
    line = await asyncio.wait_for(worker_output.readline(), limit)
    if line.decode().split() != [ROUND_DONE, str(round_number)]:
        raise RuntimeError(f"the cluster worker said {line!r} in round {round_number}")


async def run(role: str, url: str, variant: str, events: int, timeout: float) -> JsonDict:
    if role == "versions":
        return {"versions": {"aioqueue": aioqueue.__version__}}
    if role == "worker":
        return await run_worker(url, variant, events, timeout)
    async with server_url(variant, url) as (run_url, servers):
        result = await run_producer(run_url, servers, variant, events, timeout)
    return {"topology": variant, "events": events, "rounds": ROUNDS, **result}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["cluster", "worker", "versions"])
    parser.add_argument("--url", default="redis://127.0.0.1:6379", help="for --variant single")
    parser.add_argument("--variant", choices=VARIANTS, default=SINGLE)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.role, args.url, args.variant, args.events, args.timeout))
    print(RESULT_MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
