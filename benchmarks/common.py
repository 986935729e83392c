"""What every system's scenario script shares: the scenarios themselves and how they report.

Each `system_*.py` script describes one queue library as a `System` (how to produce events and
how to run one worker) and calls `main(system)`. This module turns that into the scenarios:

    python system_arq.py enqueue  --url redis://... --events 20000
    python system_arq.py drain    --url redis://... --events 20000 [--variant poll_delay=0]
    python system_arq.py lateness --url redis://... --events 5000 --spread 5
    python system_arq.py memory   --url redis://... --events 100000
    python system_arq.py backlog  --url redis://... --events 20000 --backlog 1000000 \
                                  --backlog-small 1000 [--variant poll_delay=0]
    python system_arq.py idle     --url redis://... --events 100000 --window 5

The result is one JSON object on the last stdout line, after `RESULT_MARKER`; logs go to
stderr. The `lateness` scenario starts a second copy of the script (`lateness-worker`) so that
the worker's CPU time is its own and not the producer's. `backlog` and `idle` empty the
server themselves (FLUSHALL) between their phases.

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
from process_cpu import tree_cpu_seconds
from server_cpu import CpuReading, cpu_figures, read_server_cpu

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
    CPU the scenarios then read instead (`servers_of`).
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

    def __init__(self, target: int) -> None:
        self.target = target
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
        await client.execute_command("FLUSHALL", "SYNC")
        await client.execute_command("SCRIPT", "FLUSH", "SYNC")
        await client.execute_command("MEMORY", "PURGE")
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


def servers_of(producer: Producer, url: str) -> list[str]:
    """The servers a producer writes to: its own `server_urls`, or the scenario's server."""
    own: list[str] | None = getattr(producer, "server_urls", None)
    return list(own) if own else [url]


# -- scenarios ---------------------------------------------------------------------------------


async def scenario_enqueue(system: System, options: Options) -> JsonDict:
    """Scenario 1: events/s for `events` enqueues an hour ahead, IN_FLIGHT calls at once."""
    async with system.producer(options.url, options.variant) as producer:
        servers = servers_of(producer, options.url)
        cpu_before = await read_server_cpu(servers)
        elapsed = await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(indices, AN_HOUR),
        )
        cpu_after = await read_server_cpu(servers)
        batch_size = producer.batch_size
    return {
        "events_per_s": options.events / elapsed,
        "seconds": elapsed,
        "batch_size": batch_size,
        **cpu_figures(cpu_before, cpu_after, options.events),
    }


async def scenario_memory(system: System, options: Options) -> JsonDict:
    """Scenario 4: growth of INFO used_memory per event for `events` pending an hour ahead."""
    async with system.producer(options.url, options.variant) as producer:
        # Measured with the producer's connections open, so their buffers are in both numbers.
        before = await used_memory(options.url)
        cpu_before = await read_server_cpu([options.url])
        await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(indices, AN_HOUR),
        )
        cpu_after = await read_server_cpu([options.url])
        after = await used_memory(options.url)
    return {
        "bytes_per_event": (after - before) / options.events,
        "used_memory_before": before,
        "used_memory_after": after,
        **cpu_figures(cpu_before, cpu_after, options.events),
    }


async def enqueue_due(system: System, options: Options, first_index: int = 0) -> None:
    """Enqueues `events` events due now, numbered from `first_index`, IN_FLIGHT calls at once."""
    async with system.producer(options.url, options.variant) as producer:
        await run_in_flight(
            options.events,
            producer.batch_size,
            IN_FLIGHT,
            lambda indices: producer.enqueue(
                range(indices.start + first_index, indices.stop + first_index), 0.0
            ),
        )


async def timed_drain(system: System, options: Options) -> tuple[float, Recorder, JsonDict]:
    """Seconds from starting a worker until it has handled `events` events, its record, and
    the server's CPU over those seconds (cpu_figures)."""
    recorder = Recorder(options.events)
    cpu_before = await read_server_cpu([options.url])
    started = time.perf_counter()
    finished = 0.0
    cpu_after: CpuReading | None = None

    async def watch() -> None:
        nonlocal finished, cpu_after
        await recorder.done.wait()
        finished = time.perf_counter()
        # The worker is stopping meanwhile: what it still asks of the server is for these
        # events too (a last acknowledgement), or its shutdown, a few commands at most.
        cpu_after = await read_server_cpu([options.url])

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait_for(
            system.work(options.url, options.variant, recorder, lambda: None), options.timeout
        )
        await watcher
    finally:
        watcher.cancel()
    assert cpu_after is not None
    return finished - started, recorder, cpu_figures(cpu_before, cpu_after, options.events)


async def scenario_drain(system: System, options: Options) -> JsonDict:
    """Scenario 2: `events` already due before the worker starts; seconds until all handled."""
    await enqueue_due(system, options)
    return await scenario_drain_worker(system, options)


async def scenario_drain_worker(system: System, options: Options) -> JsonDict:
    """Scenario 2's worker alone, on due events enqueued before (profiling.py uses it)."""
    elapsed, recorder, server_cpu = await timed_drain(system, options)
    return {
        "seconds": elapsed,
        "events_per_s": options.events / elapsed,
        "lost": recorder.lost(),
        **server_cpu,
    }


async def scenario_backlog(system: System, options: Options) -> JsonDict:
    """Scenario 6: drain (and dispatch) rates of `events` due events on top of a backlog.

    Two phases on an emptied server, `backlog_small` and then `backlog` events pending
    THIRTY_DAYS ahead. Each phase loads its backlog, enqueues the due events, times a worker
    draining them (as in scenario 2) and, for a system with a dispatch step, enqueues as many
    again and times that step alone. The ratios (large / small) are per run.
    """
    result: JsonDict = {"backlog_small": options.backlog_small, "backlog_large": options.backlog}
    for phase, backlog in (("small", options.backlog_small), ("large", options.backlog)):
        await reset_server(options.url)
        memory_before = await used_memory(options.url)
        started = time.perf_counter()
        await system.load_backlog(options.url, backlog, THIRTY_DAYS)
        result[f"load_{phase}_per_s"] = backlog / (time.perf_counter() - started)
        memory_after = await used_memory(options.url)
        result[f"bytes_per_pending_event_{phase}"] = (memory_after - memory_before) / backlog
        await enqueue_due(system, options)
        elapsed, recorder, server_cpu = await timed_drain(system, options)
        result[f"drain_{phase}_per_s"] = options.events / elapsed
        result[f"lost_{phase}"] = recorder.lost()
        result.update({f"{key}_{phase}": value for key, value in server_cpu.items()})
        if system.has_dispatch_step:
            await enqueue_due(system, options, first_index=options.events)
            dispatched = await system.dispatch_only(options.url, options.events)
            result[f"dispatch_{phase}_per_s"] = dispatched["events_per_s"]
            result[f"dispatch_{phase}"] = dispatched
    result["drain_ratio"] = result["drain_large_per_s"] / result["drain_small_per_s"]
    if system.has_dispatch_step:
        result["dispatch_ratio"] = result["dispatch_large_per_s"] / result["dispatch_small_per_s"]
    return result


async def scenario_idle(system: System, options: Options) -> JsonDict:
    """Scenario 7: what a running worker asks of Redis with `events` events hours ahead.

    Counts, over `window` seconds after the worker has settled, the commands it sends (round
    trips, from MONITOR) and the commands the server executes for it (INFO commandstats,
    which counts the commands scripts run as well).
    """
    await system.load_backlog(options.url, options.events, THREE_HOURS)
    # Nothing comes due, so the recorder never finishes by itself: it is the worker's stop.
    recorder = Recorder(options.events + 1)
    ready = asyncio.Event()
    worker = asyncio.ensure_future(system.work(options.url, options.variant, recorder, ready.set))
    try:
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([waiter, worker], return_when=asyncio.FIRST_COMPLETED)
        if worker.done():
            waiter.cancel()
            worker.result()
            raise RuntimeError(f"the {system.name} worker stopped by itself")
        await asyncio.sleep(IDLE_SETTLE)
        observed = await observe_commands(options.url, options.window)
    finally:
        recorder.done.set()
        await asyncio.wait_for(worker, options.timeout)
    return observed


async def observe_commands(url: str, window: float) -> JsonDict:
    """Commands other clients send (MONITOR) and the server executes (commandstats) in `window` s.

    The observer's own commands are left out: MONITOR lines from its connection, and the one
    INFO of the first snapshot, which the second snapshot counts. The server's CPU is read over
    a window of the same length before that one, since feeding a MONITOR costs the server CPU
    of its own.
    """
    cpu_start = await read_server_cpu([url])
    await asyncio.sleep(window)
    server_cpu = cpu_figures(cpu_start, await read_server_cpu([url]), None)
    observer = redis.asyncio.Redis.from_url(url, single_connection_client=True)
    watcher = redis.asyncio.Redis.from_url(url)
    sent: dict[str, int] = {}
    in_scripts: dict[str, int] = {}
    bounds: list[float] = []
    try:
        own_port = str((await observer.client_info())["addr"]).rsplit(":", 1)[1]

        async def collect(monitor: Any) -> None:
            async for line in monitor.listen():
                # The server's clock is this machine's clock (see README, "Clocks").
                if not bounds or line["time"] < bounds[0] or line["client_port"] == own_port:
                    continue
                if len(bounds) == 2 and line["time"] > bounds[1]:
                    continue
                counts = in_scripts if line["client_type"] == "lua" else sent
                name = str(line["command"]).split(" ", 1)[0].lower()
                counts[name] = counts.get(name, 0) + 1

        async with watcher.monitor() as monitor:
            listening = asyncio.ensure_future(collect(monitor))
            try:
                before = await command_stats(observer)
                bounds.append(time.time())
                await asyncio.sleep(window)
                after = await command_stats(observer)
                bounds.append(time.time())
                # MONITOR lines arrive a little after the commands run.
                await asyncio.sleep(0.2)
            finally:
                listening.cancel()
                await asyncio.gather(listening, return_exceptions=True)
    finally:
        await observer.aclose()
        await watcher.aclose()
    elapsed = bounds[1] - bounds[0]
    executed = {name: calls for name, (calls, _) in stats_delta(before, after).items()}
    executed["info"] = executed.get("info", 0) - 1
    executed = {name: calls for name, calls in executed.items() if calls > 0}
    return {
        "window_s": elapsed,
        "round_trips_per_s": sum(sent.values()) / elapsed,
        "commands_per_s": sum(executed.values()) / elapsed,
        "sent": sent,
        "run_by_scripts": in_scripts,
        "executed": executed,
        **server_cpu,
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
            # The server's CPU from here until the worker has handled the last event (it
            # reads the end itself).
            cpu_before = await read_server_cpu([options.url])
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
        "lost": worker["lost"],
        "server_clock_offset": worker["server_clock_offset"],
        "lateness_ms": [round(value * 1000, 3) for value in lateness_s],
        **cpu_figures(cpu_before, CpuReading(*worker["server_cpu_at_done"]), options.events),
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
    """The child of scenario 3: runs the worker, reports lateness and CPU time from ready on
    (the worker's pool processes included, where it has any: Celery's prefork pool)."""
    offset = await clock_offset(options.url)
    recorder = Recorder(options.events)
    marks: dict[str, float] = {}

    def on_ready() -> None:
        marks["cpu"] = tree_cpu_seconds()
        marks["wall"] = time.perf_counter()
        print(READY_LINE, flush=True)

    server_cpu_at_done: list[CpuReading] = []

    async def measure_until_done() -> None:
        await recorder.done.wait()
        marks["cpu_done"] = tree_cpu_seconds()
        marks["wall_done"] = time.perf_counter()
        server_cpu_at_done.append(await read_server_cpu([options.url]))

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
        "lost": recorder.lost(),
        "server_clock_offset": offset,
        "cpu_s": marks["cpu_done"] - marks["cpu"],
        "wall_s": marks["wall_done"] - marks["wall"],
        "server_cpu_at_done": server_cpu_at_done[0],
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


async def _run(system: System, options: Options, script: str) -> JsonDict:
    if options.scenario == "versions":
        return {"versions": system.versions()}
    if options.scenario == "enqueue":
        return await scenario_enqueue(system, options)
    if options.scenario == "drain":
        return await scenario_drain(system, options)
    if options.scenario == "drain-worker":
        return await scenario_drain_worker(system, options)
    if options.scenario == "lateness":
        return await scenario_lateness(system, options, script)
    if options.scenario == "lateness-worker":
        return await lateness_worker(system, options)
    if options.scenario == "memory":
        return await scenario_memory(system, options)
    if options.scenario == "backlog":
        return await scenario_backlog(system, options)
    if options.scenario == "idle":
        return await scenario_idle(system, options)
    raise AssertionError(options.scenario)


# A variant that runs the whole scenario, every process of it, on uvloop instead of asyncio's
# own event loop (where the system's variants() offer it).
UVLOOP = "uvloop"


def main(system: System, script: str, argv: Sequence[str] | None = None) -> None:
    """Runs the scenario named on the command line and prints its result line."""
    options = parse_options(system, sys.argv[1:] if argv is None else argv)
    if options.variant == UVLOOP:
        import uvloop

        result = uvloop.run(_run(system, options, script))
    else:
        result = asyncio.run(_run(system, options, script))
    print(RESULT_MARKER + json.dumps(result), flush=True)


def redis_py_version() -> str:
    return str(redis.__version__)
