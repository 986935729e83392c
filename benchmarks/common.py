"""What every system's scenario script shares: the scenarios themselves and how they report.

Each `system_*.py` script describes one queue library as a `System` (how to produce events and
how to run one worker) and calls `main(system)`. This module turns that into the scenarios:

    python system_arq.py enqueue  --url redis://... --events 20000
    python system_arq.py drain    --url redis://... --events 20000 [--variant poll_delay=0]
    python system_arq.py lateness --url redis://... --events 5000 --spread 5
    python system_arq.py memory   --url redis://... --events 100000

The result is one JSON object on the last stdout line, after `RESULT_MARKER`; logs go to
stderr. The `lateness` scenario starts a second copy of the script (`lateness-worker`) so that
the worker's CPU time is its own and not the producer's.

Runs in both benchmark virtualenvs, so it needs only the standard library and redis-py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import redis
import redis.asyncio

RESULT_MARKER = "BENCH-RESULT "
READY_LINE = "ready"

# Handlers running at once in every system's worker: arq's `max_jobs` and saq's `concurrency`
# both default to 10, so aioqueue's `parallelism` is set to the same.
CONCURRENCY = 10
# Enqueue calls in flight at once (scenario 1, and the producers of the other scenarios).
IN_FLIGHT = 32
# Far enough ahead that nothing comes due while a scenario runs.
AN_HOUR = 3600.0

JsonDict = dict[str, Any]


class Producer(Protocol):
    """Enqueues events of one system. `batch_size` events go into each `enqueue` call."""

    batch_size: int

    async def enqueue(self, indices: range, delay: float) -> None:
        """Schedules events numbered `indices`, each due `delay` seconds from now."""
        ...


class Recorder:
    """Counts handled events and keeps their lateness (seconds); `done` is set at `target`."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.handled = 0
        self.lateness: list[float] = []
        # A second lateness measure where a system offers one (aioqueue: the handler's wall
        # clock against the due time the producer computed), kept as a cross-check.
        self.cross_check_lateness: list[float] = []
        self.done = asyncio.Event()

    def record(self, lateness: float) -> None:
        self.handled += 1
        self.lateness.append(lateness)
        if self.handled >= self.target:
            self.done.set()


class System(Protocol):
    """One queue library, as the scenarios see it."""

    name: str

    def versions(self) -> dict[str, str]:
        """Versions of the library and its Redis client, for the results file."""
        ...

    def variants(self) -> Sequence[str]:
        """Names accepted by --variant besides the default ("")."""
        ...

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        """A connected producer; closed when the context exits.

        With `tag_due_times` a system whose handlers cannot see an event's due time otherwise
        adds the producer's wall-clock due time to each event, for a lateness cross-check.
        """
        ...

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        """Runs one worker (CONCURRENCY handlers, no-op) until `recorder.done`, then stops it.

        Calls `on_ready` once the worker is taking events. Every handled event is passed to
        `recorder.record` with its lateness in seconds.
        """
        ...


@dataclass
class Options:
    scenario: str
    url: str
    events: int
    spread: float
    variant: str
    seed: int
    timeout: float


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def lateness_summary(lateness_s: Sequence[float]) -> JsonDict:
    ms = [value * 1000 for value in lateness_s]
    return {
        "p50_ms": percentile(ms, 0.50),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms),
        "min_ms": min(ms),
    }


async def run_in_flight(
    total: int, batch_size: int, in_flight: int, call: Callable[[range], Awaitable[None]]
) -> float:
    """Makes `call` for consecutive batches of range(total), `in_flight` at once; seconds taken."""
    batches = iter(range(0, total, batch_size))

    async def lane() -> None:
        # The lanes share one iterator, so every batch is enqueued exactly once.
        for start in batches:
            await call(range(start, min(start + batch_size, total)))

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return time.perf_counter() - started


async def used_memory(url: str) -> int:
    client = redis.asyncio.Redis.from_url(url)
    try:
        info = await client.info("memory")
        return int(info["used_memory"])
    finally:
        await client.aclose()


# -- scenarios ---------------------------------------------------------------------------------


async def scenario_enqueue(system: System, options: Options) -> JsonDict:
    """Scenario 1: events/s for `events` enqueues an hour ahead, IN_FLIGHT calls at once."""
    async with system.producer(options.url, options.variant) as producer:
        elapsed = await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(indices, AN_HOUR),
        )
        batch_size = producer.batch_size
    return {
        "events_per_s": options.events / elapsed,
        "seconds": elapsed,
        "batch_size": batch_size,
    }


async def scenario_memory(system: System, options: Options) -> JsonDict:
    """Scenario 4: growth of INFO used_memory per event for `events` pending an hour ahead."""
    async with system.producer(options.url, options.variant) as producer:
        # Measured with the producer's connections open, so their buffers are in both numbers.
        before = await used_memory(options.url)
        await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(indices, AN_HOUR),
        )
        after = await used_memory(options.url)
    return {
        "bytes_per_event": (after - before) / options.events,
        "used_memory_before": before,
        "used_memory_after": after,
    }


async def scenario_drain(system: System, options: Options) -> JsonDict:
    """Scenario 2: `events` already due before the worker starts; seconds until all handled."""
    async with system.producer(options.url, options.variant) as producer:
        await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(indices, 0.0),
        )
    recorder = Recorder(options.events)
    started = time.perf_counter()
    finished = 0.0

    async def watch() -> None:
        nonlocal finished
        await recorder.done.wait()
        finished = time.perf_counter()

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait_for(
            system.work(options.url, options.variant, recorder, lambda: None), options.timeout
        )
        await watcher
    finally:
        watcher.cancel()
    elapsed = finished - started
    return {
        "seconds": elapsed,
        "events_per_s": options.events / elapsed,
        "handled": recorder.handled,
    }


def spread_delays(events: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(0, spread) for _ in range(events)]


async def scenario_lateness(system: System, options: Options, script: str) -> JsonDict:
    """Scenario 3: `events` due over `spread` s; lateness and CPU time of a separate worker.

    The worker runs in a child process started from the same script; this process only
    produces. All events are enqueued at once (IN_FLIGHT calls at a time) with delays drawn
    uniformly from [0, spread).
    """
    delays = spread_delays(options.events, options.spread, options.seed)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        script,
        "lateness-worker",
        "--url", options.url,
        "--events", str(options.events),
        "--variant", options.variant,
        "--timeout", str(options.timeout),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        if line.decode().strip() != READY_LINE:
            raise RuntimeError(f"lateness worker did not start (said {line!r})")
        producer_context = system.producer(options.url, options.variant, tag_due_times=True)
        async with producer_context as producer:
            # One event per call here, so each keeps its own delay.
            enqueue_seconds = await run_in_flight(
                options.events,
                1,
                IN_FLIGHT,
                lambda indices: producer.enqueue(indices, delays[indices[0]]),
            )
        output, _ = await asyncio.wait_for(child.communicate(), options.timeout)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"lateness worker exited with {child.returncode}")
    worker = parse_result(output.decode())
    lateness_s: list[float] = worker.pop("lateness_s")
    cross_check_s: list[float] = worker.pop("cross_check_lateness_s")
    result: JsonDict = {
        **lateness_summary(lateness_s),
        "worker_cpu_s": worker["cpu_s"],
        "worker_wall_s": worker["wall_s"],
        "enqueue_seconds": enqueue_seconds,
        "handled": worker["handled"],
        "server_clock_offset": worker["server_clock_offset"],
        "lateness_ms": [round(value * 1000, 3) for value in lateness_s],
    }
    if cross_check_s:
        result["cross_check"] = lateness_summary(cross_check_s)
    return result


async def clock_offset(url: str, samples: int = 5) -> JsonDict:
    """How far the server's TIME is from this process's time.time(), from the fastest sample.

    Peers' lateness is measured on this machine's clock; this shows it is the server's too.
    """
    client = redis.asyncio.Redis.from_url(url)
    try:
        best: tuple[float, float] | None = None
        for _ in range(samples):
            before = time.time()
            seconds, microseconds = await client.time()
            after = time.time()
            offset = seconds + microseconds / 1e6 - (before + after) / 2
            if best is None or after - before < best[1]:
                best = (offset, after - before)
    finally:
        await client.aclose()
    assert best is not None
    return {"offset_ms": best[0] * 1000, "round_trip_ms": best[1] * 1000}


async def lateness_worker(system: System, options: Options) -> JsonDict:
    """The child of scenario 3: runs the worker, reports lateness and CPU time from ready on."""
    offset = await clock_offset(options.url)
    recorder = Recorder(options.events)
    marks: dict[str, float] = {}

    def on_ready() -> None:
        marks["cpu"] = cpu_seconds()
        marks["wall"] = time.perf_counter()
        print(READY_LINE, flush=True)

    async def measure_until_done() -> None:
        await recorder.done.wait()
        marks["cpu_done"] = cpu_seconds()
        marks["wall_done"] = time.perf_counter()

    watcher = asyncio.ensure_future(measure_until_done())
    try:
        await asyncio.wait_for(
            system.work(options.url, options.variant, recorder, on_ready), options.timeout
        )
        await watcher
    finally:
        watcher.cancel()
    return {
        "handled": recorder.handled,
        "server_clock_offset": offset,
        "cpu_s": marks["cpu_done"] - marks["cpu"],
        "wall_s": marks["wall_done"] - marks["wall"],
        "lateness_s": recorder.lateness,
        "cross_check_lateness_s": recorder.cross_check_lateness,
    }


# -- command line ------------------------------------------------------------------------------


def parse_result(stdout: str) -> JsonDict:
    """The JSON object after RESULT_MARKER in a scenario script's output."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            result: JsonDict = json.loads(line[len(RESULT_MARKER) :])
            return result
    raise RuntimeError("the scenario printed no result line")


def _parse_options(system: System, argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(description=f"one benchmark scenario for {system.name}")
    parser.add_argument(
        "scenario", choices=["versions", "enqueue", "drain", "lateness", "lateness-worker",
                             "memory"]
    )  # fmt: skip
    parser.add_argument("--url", default="redis://127.0.0.1:6379")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=2.0, help="seconds (lateness)")
    parser.add_argument("--variant", default="", choices=["", *system.variants()])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds")
    args = parser.parse_args(argv)
    return Options(
        scenario=args.scenario,
        url=args.url,
        events=args.events,
        spread=args.spread,
        variant=args.variant,
        seed=args.seed,
        timeout=args.timeout,
    )


async def _run(system: System, options: Options, script: str) -> JsonDict:
    if options.scenario == "versions":
        return {"versions": system.versions()}
    if options.scenario == "enqueue":
        return await scenario_enqueue(system, options)
    if options.scenario == "drain":
        return await scenario_drain(system, options)
    if options.scenario == "lateness":
        return await scenario_lateness(system, options, script)
    if options.scenario == "lateness-worker":
        return await lateness_worker(system, options)
    if options.scenario == "memory":
        return await scenario_memory(system, options)
    raise AssertionError(options.scenario)


def main(system: System, script: str, argv: Sequence[str] | None = None) -> None:
    """Runs the scenario named on the command line and prints its result line."""
    options = _parse_options(system, sys.argv[1:] if argv is None else argv)
    result = asyncio.run(_run(system, options, script))
    print(RESULT_MARKER + json.dumps(result), flush=True)


def redis_py_version() -> str:
    return str(redis.__version__)
