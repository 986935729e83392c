"""The scenarios themselves, written once against common.py's `System` protocol, and the
command line that runs one (`main`, which every `system_*.py` script calls):

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
server themselves (FLUSHALL) between their phases. Each scenario also reads the server's CPU
over its measured part (server_cpu.py).

Runs in every benchmark virtualenv, so it needs only the standard library and redis-py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence

from command_observer import observe_commands
from common import (
    AN_HOUR,
    IDLE_SETTLE,
    IN_FLIGHT,
    READY_LINE,
    RESULT_MARKER,
    THIRTY_DAYS,
    THREE_HOURS,
    UVLOOP,
    JsonDict,
    Options,
    Producer,
    Recorder,
    System,
    clock_offset,
    lateness_summary,
    parse_options,
    parse_result,
    reset_server,
    run_in_flight,
    spread_delays,
    used_memory,
)
from process_cpu import tree_cpu_seconds
from server_cpu import CpuReading, cpu_figures, read_server_cpu


def servers_of(producer: Producer, url: str) -> list[str]:
    """The servers a producer writes to: its own `server_urls`, or the scenario's server."""
    own: list[str] | None = getattr(producer, "server_urls", None)
    return list(own) if own else [url]


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
    """Seconds from starting a worker until it has handled `events` events, its record, the
    server's CPU over those seconds (cpu_figures), and the worker's own CPU per event from
    its ready signal on (`worker_cpu_us_per_event`: its start-up left out). On a busy
    machine the worker's CPU per event varies far less than its rate does."""
    recorder = Recorder(options.events)
    cpu_before = await read_server_cpu([options.url])
    started = time.perf_counter()
    finished = 0.0
    cpu_after: CpuReading | None = None
    worker_cpu: list[float] = []

    def on_ready() -> None:
        worker_cpu.append(tree_cpu_seconds())

    async def watch() -> None:
        nonlocal finished, cpu_after
        await recorder.done.wait()
        finished = time.perf_counter()
        worker_cpu.append(tree_cpu_seconds())
        # The worker is stopping meanwhile: what it still asks of the server is for these
        # events too (a last acknowledgement), or its shutdown, a few commands at most.
        cpu_after = await read_server_cpu([options.url])

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait_for(
            system.work(options.url, options.variant, recorder, on_ready), options.timeout
        )
        await watcher
    finally:
        watcher.cancel()
    assert cpu_after is not None
    figures = cpu_figures(cpu_before, cpu_after, options.events)
    if len(worker_cpu) == 2:
        figures["worker_cpu_us_per_event"] = (worker_cpu[1] - worker_cpu[0]) / options.events * 1e6
    return finished - started, recorder, figures


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


async def lateness_worker(system: System, options: Options) -> JsonDict:
    """The child of scenario 3: runs the worker, reports lateness and CPU time from ready on
    (the worker's pool processes included, where it has any: Celery's prefork pool)."""
    offset = await clock_offset(options.url)
    recorder = Recorder(options.events, cross_checks=True)
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


def main(system: System, script: str, argv: Sequence[str] | None = None) -> None:
    """Runs the scenario named on the command line and prints its result line."""
    options = parse_options(system, sys.argv[1:] if argv is None else argv)
    if options.variant == UVLOOP:
        import uvloop

        result = uvloop.run(_run(system, options, script))
    else:
        result = asyncio.run(_run(system, options, script))
    print(RESULT_MARKER + json.dumps(result), flush=True)
