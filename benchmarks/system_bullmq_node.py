"""BullMQ on Node (npm `bullmq`) in the benchmark scenarios.

common.py's scenarios drive a System written in Python, in the scenario's own process; BullMQ
runs in Node. So this script runs the same scenarios itself, step by step in the same order
and with common.py's helpers (server reset, memory readings, the MONITOR window, lateness
percentiles, the lateness delays and their seed), and hands every step that belongs to BullMQ
to a Node process, `node bullmq_node/bench.mjs PHASE` (BullMQ's settings are described
there):

    python system_bullmq_node.py enqueue|drain|lateness|memory|backlog|idle|versions --url ...

Timings are taken inside Node around the same work as in the Python systems: an enqueue's
clock starts once the queue's connection is up, a drain's before the worker is made (so its
start-up counts), and the worker's CPU time runs from "ready" to the N-th job. Node's own
start (about 0.1 s to load the modules) is outside every clock, as the Python systems'
imports are.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Sequence

from command_observer import observe_commands
from common import (
    AN_HOUR,
    IDLE_SETTLE,
    READY_LINE,
    RESULT_MARKER,
    THIRTY_DAYS,
    THREE_HOURS,
    JsonDict,
    Options,
    clock_offset,
    lateness_summary,
    parse_options,
    parse_result,
    reset_server,
    spread_delays,
    used_memory,
)

NODE_SCRIPT = pathlib.Path(__file__).resolve().parent / "bullmq_node" / "bench.mjs"
# How long a Node worker may take to say it is ready (seconds).
READY_TIMEOUT = 60.0


class BullmqNode:
    """What common.parse_options needs: the system's name and its (no) variants."""

    name = "bullmq-node"

    def variants(self) -> Sequence[str]:
        return []


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed: BullMQ on Node cannot run")
    return node


async def node_phase(phase: str, arguments: Sequence[str], timeout: float) -> JsonDict:
    """Runs one phase of bench.mjs to its end; its result line."""
    process = await asyncio.create_subprocess_exec(
        _node(),
        str(NODE_SCRIPT),
        phase,
        *arguments,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        tail = "\n".join(stderr.decode().strip().splitlines()[-5:])
        raise RuntimeError(f"bench.mjs {phase} exited with {process.returncode}: {tail}")
    return parse_result(stdout.decode())


class NodeWorker:
    """A running `bench.mjs work` process: started, ready, then its result at the end."""

    def __init__(self, url: str, events: int, *, until_stdin_closes: bool = False) -> None:
        self._arguments = ["work", "--url", url, "--events", str(events)]
        if until_stdin_closes:
            self._arguments.append("--until-stdin-closes")
        self._until_stdin_closes = until_stdin_closes
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Starts the worker and returns once it is taking jobs."""
        # Closing stdin is how the idle scenario stops its worker; the others never write it.
        stdin = asyncio.subprocess.PIPE if self._until_stdin_closes else asyncio.subprocess.DEVNULL
        # stderr is left to ours (the driver keeps it), so that a chatty worker cannot fill a
        # pipe nobody reads while it runs.
        self._process = await asyncio.create_subprocess_exec(
            _node(), str(NODE_SCRIPT), *self._arguments, stdin=stdin, stdout=asyncio.subprocess.PIPE
        )
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), READY_TIMEOUT)
        if line.decode().strip() != READY_LINE:
            await self.kill()
            raise RuntimeError(f"the BullMQ worker did not start (said {line!r})")

    async def result(self, timeout: float) -> JsonDict:
        """Waits for the worker to finish (or, with until_stdin_closes, tells it to)."""
        assert self._process is not None
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            stdout, _ = await asyncio.wait_for(self._process.communicate(), timeout)
        finally:
            await self.kill()
        if self._process.returncode != 0:
            raise RuntimeError(f"the BullMQ worker exited with {self._process.returncode}")
        return parse_result(stdout.decode())

    async def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()


async def enqueue(options: Options, events: int, delay: float, first_index: int = 0) -> JsonDict:
    arguments = ["--url", options.url, "--events", str(events), "--delay", repr(delay),
                 "--first-index", str(first_index)]  # fmt: skip
    return await node_phase("enqueue", arguments, options.timeout)


async def timed_drain(options: Options) -> JsonDict:
    """A worker started on `events` due jobs: seconds until all handled, and jobs lost."""
    worker = NodeWorker(options.url, options.events)
    try:
        await worker.start()
        finished = await worker.result(options.timeout)
    finally:
        await worker.kill()
    return {
        "seconds": finished["seconds"],
        "events_per_s": options.events / finished["seconds"],
        "lost": options.events - finished["distinct"],
    }


async def load_backlog(options: Options, count: int, delay: float) -> float:
    """BullMQ's own batch call (addBulk) in Node; the seconds it took."""
    arguments = ["--url", options.url, "--events", str(count), "--delay", repr(delay)]
    loaded = await node_phase("load-backlog", arguments, options.timeout)
    seconds: float = loaded["seconds"]
    return seconds


async def scenario_enqueue(options: Options) -> JsonDict:
    """Scenario 1, as common.scenario_enqueue."""
    enqueued = await enqueue(options, options.events, AN_HOUR)
    return {"events_per_s": enqueued["events_per_s"], "seconds": enqueued["seconds"],
            "batch_size": 1}  # fmt: skip


async def scenario_drain(options: Options) -> JsonDict:
    """Scenario 2, as common.scenario_drain: `events` due jobs, then a worker."""
    await enqueue(options, options.events, 0.0)
    return await timed_drain(options)


async def scenario_lateness(options: Options) -> JsonDict:
    """Scenario 3, as common.scenario_lateness: a worker process, then the producer."""
    delays = spread_delays(options.events, options.spread, options.seed)
    offset = await clock_offset(options.url)
    worker = NodeWorker(options.url, options.events)
    with tempfile.TemporaryDirectory(prefix="bench-bullmq-") as directory:
        delays_file = pathlib.Path(directory) / "delays.json"
        delays_file.write_text(json.dumps(delays))
        try:
            await worker.start()
            arguments = ["--url", options.url, "--events", str(options.events),
                         "--delays-file", str(delays_file)]  # fmt: skip
            enqueued = await node_phase("enqueue", arguments, options.timeout)
            finished = await worker.result(options.timeout)
        finally:
            await worker.kill()
    lateness_s: list[float] = finished["lateness_s"]
    return {
        **lateness_summary(lateness_s),
        "worker_cpu_s": finished["cpu_s"],
        "worker_wall_s": finished["wall_s"],
        "enqueue_seconds": enqueued["seconds"],
        "handled": finished["handled"],
        "lost": options.events - finished["distinct"],
        "server_clock_offset": offset,
        "lateness_ms": [round(value * 1000, 3) for value in lateness_s],
    }


async def scenario_memory(options: Options) -> JsonDict:
    """Scenario 4, as common.scenario_memory, except that the producer's connection is closed
    at both readings (Node has exited), not open at both."""
    before = await used_memory(options.url)
    await enqueue(options, options.events, AN_HOUR)
    after = await used_memory(options.url)
    return {
        "bytes_per_event": (after - before) / options.events,
        "used_memory_before": before,
        "used_memory_after": after,
    }


async def scenario_backlog(options: Options) -> JsonDict:
    """Scenario 6, as common.scenario_backlog; BullMQ has no dispatch step of its own (due jobs
    are promoted inside moveToActive, the call that takes a job)."""
    result: JsonDict = {"backlog_small": options.backlog_small, "backlog_large": options.backlog}
    for phase, backlog in (("small", options.backlog_small), ("large", options.backlog)):
        await reset_server(options.url)
        memory_before = await used_memory(options.url)
        result[f"load_{phase}_per_s"] = backlog / await load_backlog(options, backlog, THIRTY_DAYS)
        memory_after = await used_memory(options.url)
        result[f"bytes_per_pending_event_{phase}"] = (memory_after - memory_before) / backlog
        await enqueue(options, options.events, 0.0)
        drained = await timed_drain(options)
        result[f"drain_{phase}_per_s"] = drained["events_per_s"]
        result[f"lost_{phase}"] = drained["lost"]
    result["drain_ratio"] = result["drain_large_per_s"] / result["drain_small_per_s"]
    return result


async def scenario_idle(options: Options) -> JsonDict:
    """Scenario 7, as common.scenario_idle."""
    await load_backlog(options, options.events, THREE_HOURS)
    # Nothing comes due: the worker runs until its stdin is closed.
    worker = NodeWorker(options.url, options.events + 1, until_stdin_closes=True)
    try:
        await worker.start()
        await asyncio.sleep(IDLE_SETTLE)
        observed = await observe_commands(options.url, options.window)
        await worker.result(options.timeout)
    finally:
        await worker.kill()
    return observed


async def run(options: Options) -> JsonDict:
    if options.scenario == "versions":
        return {"versions": (await node_phase("versions", [], 60))["versions"]}
    scenarios = {
        "enqueue": scenario_enqueue,
        "drain": scenario_drain,
        "lateness": scenario_lateness,
        "memory": scenario_memory,
        "backlog": scenario_backlog,
        "idle": scenario_idle,
    }
    if options.scenario not in scenarios:
        raise SystemExit(f"{options.scenario}: not a scenario BullMQ on Node runs")
    return await scenarios[options.scenario](options)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(BullmqNode(), sys.argv[1:] if argv is None else argv)
    result = asyncio.run(run(options))
    print(RESULT_MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
