"""Profiles aioqueue's hot paths with py-spy and shows where the time goes; see README.md.

    benchmarks/run.sh --profile [--quick]

Six aioqueue runs against one embedded server, each under `py-spy record --native`:
enqueue with 32 calls in flight (of the benchmark's event, and of a realistic one), a
worker draining due events (through a handler of one event, a batch handler, and a sync
handler), and the worker process of the lateness scenario (the dispatcher's hot path). For
each run it writes the collapsed stacks to `results/profiles/<name>.txt` (speedscope.app and
flamegraph.pl open them) and prints where
the sampled CPU time of the process went, and what the server spent on each Lua script
(SLOWLOG with a low threshold, so every script call is logged with its duration).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import redis
from collapsed_stacks import analyse
from common import JsonDict, parse_options, parse_result, reset_server
from scenarios import enqueue_due
from system_aioqueue import AioqueueSystem

from aioqueue._wire.scripts import LuaScript
from aioqueue.testing import EmbeddedServer

HERE = pathlib.Path(__file__).resolve().parent
# Samples per second. py-spy pauses the process for each sample, so the profiled runs are a
# little slower than the benchmark's; their own rates are printed beside the profile.
RATE = 250
# Script calls take tens of microseconds or more, the commands inside them about one: this
# threshold logs the first and hardly any of the second.
SLOWLOG_THRESHOLD_US = 10
SLOWLOG_LENGTH = 1_000_000
TOP = 12


@dataclass(frozen=True)
class Run:
    name: str
    title: str
    arguments: list[str]
    """The scenario and its options, the variant's aside."""
    variant: str = ""
    """The benchmark's event or handler variant (--variant); empty for the default."""
    due_events: int = 0
    """Due events enqueued (unprofiled) before the run starts, of the run's variant."""
    process: str = ""
    """Keep only the samples of the process whose command line contains this."""

    def variant_arguments(self) -> list[str]:
        return ["--variant", self.variant] if self.variant else []


def runs(quick: bool) -> list[Run]:
    events, due, spread = (2_000, 1_000, 2) if quick else (20_000, 5_000, 5)
    return [
        Run(
            "enqueue",
            f"enqueue: {events:,} events an hour ahead, 32 calls in flight",
            ["enqueue", "--events", str(events)],
        ),
        Run(
            "enqueue-realistic",
            f"enqueue: {events:,} realistic events (8 fields) an hour ahead, 32 in flight",
            ["enqueue", "--events", str(events)],
            variant="realistic",
        ),
        Run(
            "drain",
            f"drain: one worker handling {events:,} due events (enqueued before it starts)",
            ["drain-worker", "--events", str(events)],
            due_events=events,
        ),
        Run(
            "drain-batch",
            f"drain: one worker's batch handler (500, 10 ms) handling {events:,} due events",
            ["drain-worker", "--events", str(events)],
            variant="batch",
            due_events=events,
        ),
        Run(
            "drain-realistic",
            f"drain: one worker handling {events:,} due realistic events (8 fields)",
            ["drain-worker", "--events", str(events)],
            variant="realistic",
            due_events=events,
        ),
        Run(
            "drain-sync",
            f"drain: one worker's sync (def) handler, parallelism 10, {events:,} due events",
            ["drain-worker", "--events", str(events)],
            variant="sync_handler",
            due_events=events,
        ),
        Run(
            "lateness",
            f"lateness run, worker process only: {due:,} events due over {spread} s",
            ["lateness", "--events", str(due), "--spread", str(spread)],
            process="lateness-worker",
        ),
    ]


# -- the server's side -------------------------------------------------------------------------


def script_names() -> dict[str, str]:
    import aioqueue._wire.scripts as scripts

    return {
        value.sha: value.name for value in vars(scripts).values() if isinstance(value, LuaScript)
    }


def prepare_server(client: redis.Redis) -> None:
    client.config_set("slowlog-log-slower-than", SLOWLOG_THRESHOLD_US)
    client.config_set("slowlog-max-len", SLOWLOG_LENGTH)
    client.slowlog_reset()
    client.config_resetstat()


def script_times(client: redis.Redis) -> JsonDict:
    """Per script: calls SLOWLOG caught, µs per call (mean, p99, max), total ms."""
    names = script_names()
    durations: dict[str, list[int]] = {}
    for entry in client.slowlog_get(SLOWLOG_LENGTH):
        command = entry["command"].split(b" ", 2)
        if command[0].upper() == b"FCALL":
            # aioqueue_<hash>_<script>: the library's function of that script.
            name = command[1].decode().split("_", 2)[-1]
        elif command[0].upper() == b"EVALSHA":
            name = names.get(command[1].decode(), "unknown script")
        elif command[0].upper() == b"EVAL":
            name = "EVAL (first call of a script)"
        else:
            continue
        durations.setdefault(name, []).append(int(entry["duration"]))
    found = {}
    for name, values in durations.items():
        values.sort()
        found[name] = {
            "calls": len(values),
            "us_per_call": sum(values) / len(values),
            "p99_us": values[min(len(values) - 1, int(len(values) * 0.99))],
            "max_us": values[-1],
            "total_ms": sum(values) / 1000,
        }
    stats = client.info("commandstats")
    script_calls = sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("fcall", "eval", "evalsha")
    )
    return {"scripts": found, "script_calls": script_calls}


def restore_server(client: redis.Redis) -> None:
    client.config_set("slowlog-log-slower-than", 10_000)
    client.config_set("slowlog-max-len", 128)
    client.slowlog_reset()


# -- running -----------------------------------------------------------------------------------


def record(run: Run, url: str, out: pathlib.Path, py_spy: str) -> JsonDict:
    """Runs one scenario under py-spy; the scenario's result line."""
    command = [
        py_spy, "record", "--native", "--subprocesses", "--rate", str(RATE),
        "--format", "raw", "-o", str(out),
        "--", sys.executable, str(HERE / "system_aioqueue.py"), *run.arguments,
        *run.variant_arguments(), "--url", url,
    ]  # fmt: skip
    finished = subprocess.run(command, cwd=HERE, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        tail = "\n".join(finished.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"py-spy run {run.name} failed: {tail}")
    return parse_result(finished.stdout)


def profile_one(run: Run, url: str, server: psutil.Process, out_dir: pathlib.Path,
                py_spy: str) -> JsonDict:  # fmt: skip
    asyncio.run(reset_server(url))
    if run.due_events:
        # Of the run's variant, as the benchmark's drain enqueues them: the realistic drain
        # takes realistic events.
        due = ["drain", "--url", url, "--events", str(run.due_events), *run.variant_arguments()]
        options = parse_options(AioqueueSystem(), due)
        asyncio.run(enqueue_due(AioqueueSystem(), options))
    client = redis.Redis.from_url(url)
    try:
        prepare_server(client)
        cpu_before = sum(server.cpu_times()[:2])
        started = time.perf_counter()
        result = record(run, url, out_dir / f"{run.name}.txt", py_spy)
        wall = time.perf_counter() - started
        server_cpu = sum(server.cpu_times()[:2]) - cpu_before
        server_side = script_times(client)
    finally:
        restore_server(client)
        client.close()
    profile = analyse(out_dir / f"{run.name}.txt", run.process)
    return {
        "name": run.name,
        "title": run.title,
        "result": {key: value for key, value in result.items() if key != "lateness_ms"},
        "wall_s": wall,
        "server_cpu_s": server_cpu,
        "server": server_side,
        "profile": {
            "rate": RATE,
            "samples": profile.samples,
            "waiting": profile.waiting,
            "start_up": profile.start_up,
            "buckets": dict(profile.buckets.most_common()),
            "components": dict(profile.components.most_common()),
            "functions": dict(profile.functions.most_common(3 * TOP)),
        },
    }


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f} %" if whole else "  n/a"


def describe(found: JsonDict) -> Iterator[str]:
    profile, result = found["profile"], found["result"]
    active = profile["samples"] - profile["waiting"] - profile["start_up"]
    yield f"## {found['title']}"
    shown = ", ".join(
        f"{key} {value:,.2f}" for key, value in result.items() if isinstance(value, int | float)
    )
    yield f"run under py-spy: {shown}; wall {found['wall_s']:.1f} s (with start-up)"
    yield (
        f"process: {active / profile['rate']:.2f} s of CPU samples ({active} at {profile['rate']}"
        f" Hz; left out: {profile['start_up']} of imports, {profile['waiting']} of waiting); "
        f"server CPU {found['server_cpu_s']:.2f} s"
    )
    yield "where the process's CPU went (innermost matching frame):"
    for name, count in profile["buckets"].items():
        yield f"  {share(count, active)}  {name}"
    yield "by part of aioqueue (outermost aioqueue frame):"
    for name, count in profile["components"].items():
        yield f"  {share(count, active)}  {name}"
    yield f"library functions on the stack (inclusive), top {TOP}:"
    for name, count in list(profile["functions"].items())[:TOP]:
        yield f"  {share(count, active)}  {name}"
    scripts = found["server"]["scripts"]
    logged = sum(values["calls"] for values in scripts.values())
    yield (
        f"server, per Lua script ({logged:,} of {found['server']['script_calls']:,} script "
        f"calls took >= {SLOWLOG_THRESHOLD_US} µs and were logged):"
    )
    for name, values in sorted(scripts.items(), key=lambda item: -item[1]["total_ms"]):
        yield (
            f"  {name:32} {values['calls']:>7,} calls {values['us_per_call']:8.1f} µs/call "
            f"p99 {values['p99_us']:>6,} max {values['max_us']:>6,} µs, "
            f"total {values['total_ms']:8.1f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument(
        "--only",
        help="comma-separated run names: enqueue, enqueue-realistic, drain, drain-batch, "
        "drain-realistic, drain-sync, lateness",
    )
    parser.add_argument("--results", type=pathlib.Path, default=HERE / "results")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent))
    if py_spy is None:
        parser.error("py-spy is not installed in this virtualenv: run benchmarks/run.sh first")
    # Whole names: "drain" is part of "drain-batch", and must not run with it.
    available = runs(args.quick)
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - {run.name for run in available})
    if unknown:
        parser.error(f"no run named {', '.join(unknown)}")
    chosen = [run for run in available if only is None or run.name in only]
    out_dir = args.results / "profiles"
    out_dir.mkdir(parents=True, exist_ok=True)
    found = []
    with EmbeddedServer() as server:
        assert server.pid is not None
        server_process = psutil.Process(server.pid)
        for run in chosen:
            print(f"profiling {run.name} ...", file=sys.stderr, flush=True)
            found.append(profile_one(run, server.url, server_process, out_dir, py_spy))
    text = "\n\n".join("\n".join(describe(one)) for one in found)
    print(text)
    (out_dir / "summary.txt").write_text(text + "\n")
    (out_dir / "summary.json").write_text(json.dumps(found, indent=1) + "\n")
    print(f"\nstacks and summary: {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
