"""Tick lateness of a 1 s recurring job: aioqueue's schedules, arq's cron and saq's CronJob.

    benchmarks/run.sh --cron [--seconds 60]     # all three on one embedded server, in turn

Each system runs its own recurring mechanism at its defaults (one worker, one job firing
every second) for `--seconds`, and its handler records how late each tick arrived: handler
start minus the tick's scheduled time, on this machine's clock (server and workers share
it). The tick's scheduled time comes from the system itself: aioqueue's tick is in the
event, arq's cron job id ends with it (`name:epoch_ms`), saq's job carries it as `scheduled`
(whole seconds). arq's cron fires at microsecond 123456 of each second by default; its
lateness is measured from that moment, as arq intends it.

`drive` (in aioqueue's venv) starts the server and runs `run --system X` for each system in
the venv that has it, then prints p50 / p99 / max per system and writes
`results/cron_lateness.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULT_MARKER = "CRON-RESULT "


def summary(lateness_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(lateness_ms)
    if not ordered:
        return {"ticks": 0}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "ticks": len(ordered),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "max_ms": ordered[-1],
        "mean_ms": statistics.fmean(ordered),
    }


async def run_aioqueue(url: str, seconds: float) -> list[float]:
    from dataclasses import dataclass
    from datetime import datetime

    from aioqueue import Event, EventService

    @dataclass
    class Tick(Event):
        id: str
        at_ms: int

    def tick(moment: datetime) -> Tick:
        at_ms = round(moment.timestamp() * 1000)
        return Tick(id=f"tick-{at_ms}", at_ms=at_ms)

    lateness: list[float] = []

    async def handle(event: Tick) -> bool:
        lateness.append(time.time() * 1000 - event.at_ms)
        return True

    service = EventService.builder().url(url).build()
    service.add_schedule("tick", every=1, event=tick)
    service.add_handler(Tick, handle)
    async with service:
        await asyncio.sleep(seconds)
    return lateness


async def run_arq(url: str, seconds: float) -> list[float]:
    from arq import Worker
    from arq.connections import RedisSettings
    from arq.cron import cron

    lateness: list[float] = []

    async def tick(ctx: dict[str, Any]) -> None:
        scheduled_ms = int(str(ctx["job_id"]).rsplit(":", 1)[1])
        lateness.append(time.time() * 1000 - scheduled_ms)

    worker = Worker(
        cron_jobs=[cron(tick, second=set(range(60)))],
        redis_settings=RedisSettings.from_dsn(url),
        handle_signals=False,
    )
    runner = asyncio.ensure_future(worker.async_run())
    await asyncio.sleep(seconds)
    runner.cancel()
    await worker.close()
    return lateness


async def run_saq(url: str, seconds: float) -> list[float]:
    from saq import CronJob, Queue, Worker

    lateness: list[float] = []

    async def tick(ctx: dict[str, Any]) -> None:
        lateness.append(time.time() * 1000 - ctx["job"].scheduled * 1000)

    queue = Queue.from_url(url)
    worker = Worker(queue, functions=[], cron_jobs=[CronJob(tick, cron="* * * * * *")])
    runner = asyncio.ensure_future(worker.start())
    await asyncio.sleep(seconds)
    await worker.stop()
    runner.cancel()
    await queue.disconnect()
    return lateness


RUNNERS = {"aioqueue": run_aioqueue, "arq": run_arq, "saq": run_saq}


def drive(seconds: float, peers_python: str) -> int:
    import redis

    from aioqueue.testing import EmbeddedServer

    results: dict[str, Any] = {"seconds": seconds}
    with EmbeddedServer() as server:
        for system in RUNNERS:
            with redis.Redis.from_url(server.url) as client:
                client.flushall()
            python = sys.executable if system == "aioqueue" else peers_python
            done = subprocess.run(
                [python, str(HERE / "cron_lateness.py"), "run", "--system", system,
                 "--url", server.url, "--seconds", str(seconds)],
                capture_output=True, text=True, timeout=seconds + 120,
            )  # fmt: skip
            lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARKER)]
            if done.returncode != 0 or not lines:
                results[system] = {"error": done.stderr[-2000:]}
                continue
            results[system] = summary(json.loads(lines[-1][len(RESULT_MARKER) :]))
    print(f"tick lateness of a job every second, {seconds:g} s per system [ms, lower is better]")
    print(f"{'system':10} {'ticks':>6} {'p50':>9} {'p99':>9} {'max':>9}")
    for system in RUNNERS:
        row = results[system]
        if "error" in row:
            print(f"{system:10} failed: {row['error'].splitlines()[-1:]}")
            continue
        print(f"{system:10} {row['ticks']:>6} {row['p50_ms']:>9.1f} {row['p99_ms']:>9.1f} "
              f"{row['max_ms']:>9.1f}")  # fmt: skip
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "cron_lateness.json").write_text(json.dumps(results, indent=2))
    return 0 if all("error" not in results[system] for system in RUNNERS) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["drive", "run"])
    parser.add_argument("--system", choices=sorted(RUNNERS))
    parser.add_argument("--url")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--peers-python", default=sys.executable)
    args = parser.parse_args()
    if args.mode == "drive":
        return drive(args.seconds, args.peers_python)
    lateness = asyncio.run(RUNNERS[args.system](args.url, args.seconds))
    print(RESULT_MARKER + json.dumps(lateness), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
