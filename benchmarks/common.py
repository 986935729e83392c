"""What every system's scenario script shares: the `System` protocol (how to produce events of
one system and how to run one worker), the recorder of deliveries, the scenarios' constants and
small helpers, and the command line's options. The scenarios themselves, and the `main` every
`system_*.py` script calls, are in scenarios.py.

Runs in every benchmark virtualenv, so it needs only the standard library and redis-py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import resource
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
# Rounds of the cluster scenario in one run (cluster.py), whose median is the run's rate.
CLUSTER_ROUNDS = 5
# Far enough ahead that nothing comes due while a scenario runs.
AN_HOUR = 3600.0
# The backlog of the backlog-growth scenario: "pending far in the future".
THIRTY_DAYS = 30 * 86400.0
# The events pending during the idle scenario: "hours ahead".
THREE_HOURS = 3 * 3600.0
# How long the idle scenario lets a started worker settle before it counts commands.
IDLE_SETTLE = 1.0

JsonDict = dict[str, Any]


class Producer(Protocol):
    """Enqueues events of one system. `batch_size` events go into each `enqueue` call.

    A producer that writes to servers of its own rather than the scenario's `--url` (aioqueue's
    durable rows: a primary and its replica) names them in a `server_urls` attribute, whose
    CPU the scenarios then read instead (`scenarios.servers_of`).
    """

    batch_size: int

    async def enqueue(self, indices: range, delay: float) -> None:
        """Schedules events numbered `indices`, each due `delay` seconds from now."""
        ...


class Recorder:
    """Counts handled events and keeps their lateness (seconds); `done` is set at `target`.

    Handlers also report each event's index (`saw`), so that a run can tell how many distinct
    events were handled when the count reached `target`: a duplicate delivery would otherwise
    hide a lost event.
    """

    def __init__(self, target: int, *, cross_checks: bool = False) -> None:
        self.target = target
        self.cross_checks = cross_checks
        """Whether handlers read each event's due time for cross_check_lateness: only the
        lateness scenario's producer writes one, and elsewhere reading it is work a no-op
        handler would not do (a batch handler's contexts come with a Delivery per event)."""
        self.handled = 0
        self.lateness: list[float] = []
        # A second lateness measure where a system offers one (aioqueue: the handler's wall
        # clock against the due time the producer computed), kept as a cross-check.
        self.cross_check_lateness: list[float] = []
        self.seen: set[int] = set()
        self.done = asyncio.Event()

    def saw(self, index: int) -> None:
        self.seen.add(index)

    def record(self, lateness: float) -> None:
        self.handled += 1
        self.lateness.append(lateness)
        if self.handled >= self.target:
            self.done.set()

    def lost(self) -> int:
        """Events of range(target) not handled (yet) when called."""
        return self.target - len(self.seen)


class Described(Protocol):
    """What the command line needs to know of a system: its name and its variants."""

    name: str

    def variants(self) -> Sequence[str]:
        """Names accepted by --variant besides the default ("")."""
        ...


class System(Described, Protocol):
    """One queue library, as the scenarios see it."""

    has_dispatch_step: bool
    """Whether due events pass through a step of their own (aioqueue's dispatcher, saq's
    schedule timer) before a worker takes them; arq's poller claims them straight away."""

    def versions(self) -> dict[str, str]:
        """Versions of the library and its Redis client, for the results file."""
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
        `recorder.saw` with its index and to `recorder.record` with its lateness in seconds.
        """
        ...

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """Writes `count` events due `delay` s from now, as fast as the system's own storage
        format can be written (pipelined), with ids that no producer() event uses."""
        ...

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """Moves `events` due events to where workers take them from, with no worker running;
        returns at least `events_per_s` and `seconds`. Only called when `has_dispatch_step`."""
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
    backlog: int
    backlog_small: int
    window: float


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


async def reset_server(url: str) -> None:
    """Empties the server so that every run (or phase of one) starts alike."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        # SYNC: valkey 8 frees a plain FLUSHALL in the background, which would blur the memory
        # baseline of what comes next. redis-py's flushall() can only add ASYNC.
        await client.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
        await client.execute_command("SCRIPT", "FLUSH", "SYNC")  # type: ignore[no-untyped-call]
        await client.execute_command("MEMORY", "PURGE")  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()


async def command_stats(client: redis.asyncio.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command since the server started, commands run by scripts included."""
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(fields["calls"]), int(fields["usec"]))
        for name, fields in stats.items()
    }


def stats_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """Per command (calls, usec) between two command_stats() snapshots; unchanged ones left out."""
    delta = {}
    for name, (calls, usec) in after.items():
        old_calls, old_usec = before.get(name, (0, 0))
        if calls != old_calls:
            delta[name] = (calls - old_calls, usec - old_usec)
    return delta


def spread_delays(events: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(0, spread) for _ in range(events)]


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


# -- command line ------------------------------------------------------------------------------


def parse_result(stdout: str) -> JsonDict:
    """The JSON object after RESULT_MARKER in a scenario script's output."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            result: JsonDict = json.loads(line[len(RESULT_MARKER) :])
            return result
    raise RuntimeError("the scenario printed no result line")


def parse_options(system: Described, argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(description=f"one benchmark scenario for {system.name}")
    parser.add_argument(
        "scenario", choices=["versions", "enqueue", "drain", "lateness", "lateness-worker",
                             "memory", "backlog", "idle", "drain-worker"]
    )  # fmt: skip
    parser.add_argument("--url", default="redis://127.0.0.1:6379")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--backlog", type=int, default=100_000, help="events (backlog)")
    parser.add_argument("--backlog-small", type=int, default=1000, help="events (backlog)")
    parser.add_argument("--window", type=float, default=5.0, help="seconds (idle)")
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
        backlog=args.backlog,
        backlog_small=args.backlog_small,
        window=args.window,
    )


# A variant that runs the whole scenario, every process of it, on uvloop instead of asyncio's
# own event loop (where the system's variants() offer it).
UVLOOP = "uvloop"


def redis_py_version() -> str:
    return str(redis.__version__)
