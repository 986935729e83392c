"""Runs every scenario for aioqueue and its peers against one embedded server; see README.md.

Started by run.sh inside .venv-aioqueue. Each scenario run is a fresh subprocess (a
`system_*.py`, `ceiling.py` or `cluster.py` script, in the virtualenv of the system it
measures) that prints one JSON result line; the server is flushed before every run. Repeats
are interleaved (every system runs once per repeat before the next repeat starts), so a slow
phase of the machine touches all systems alike.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

import psutil
import redis
from common import RESULT_MARKER, JsonDict, parse_result, reset_server
from plan import FULL, NOT_APPLICABLE, QUICK, SCENARIOS, Row, plan, scenario_arguments
from report import METRICS, lateness_chart, render_table, server_name, summarize
from targets import check_targets, render_targets

import aioqueue
from aioqueue import EventService, EventServiceBuilder
from aioqueue.testing import EmbeddedServer

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent


def run_script(row: Row, arguments: list[str], timeout: float) -> JsonDict:
    """Runs one scenario subprocess; its result, or {"error": ...} on failure or timeout."""
    command = [row.python, str(HERE / row.script), *arguments]
    if row.variant:
        command += ["--variant", row.variant]
    if row.script != "ceiling.py":
        command += ["--timeout", str(timeout - 20)]
    # A session of its own, so that a timeout can end the scenario and any worker it started.
    process = subprocess.Popen(
        command,
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    if process.returncode != 0 or RESULT_MARKER not in stdout:
        tail = "\n".join(stderr.strip().splitlines()[-5:])
        return {"error": f"exit code {process.returncode}: {tail}"}
    return parse_result(stdout)


def server_cpu_seconds(server: psutil.Process) -> float:
    times = server.cpu_times()
    return float(times.user + times.system)


def one_line(scenario: str, result: JsonDict) -> str:
    if "error" in result:
        error: str = result["error"]
        return "FAILED: " + error.splitlines()[-1][:120]
    if "not_applicable" in result:
        return "n/a: " + str(result["not_applicable"])[:100] + "..."
    shown = [m for m in METRICS if m.scenario == scenario and m.key in result]
    return ", ".join(f"{m.short} {m.format(result[m.key])} {m.unit}" for m in shown)


def versions(rows: dict[str, list[Row]], url: str) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for row in (row for scenario_rows in rows.values() for row in scenario_rows):
        if row.system in found or row.script == "ceiling.py":
            continue
        result = run_script(row, ["versions", "--url", url], 60)
        found[row.system] = result.get("versions", {"error": result.get("error", "?")})
    return found


def git_commit() -> str:
    try:
        finished = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return str(finished.stdout).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", required=True, help="python of .venv-peers")
    parser.add_argument("--peers6-python", required=True, help="python of .venv-peers-redis6")
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repeat")
    parser.add_argument("--repeats", type=int, help="runs per scenario and system (default 3)")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {SCENARIOS}"
    )
    parser.add_argument("--results", type=pathlib.Path, default=HERE / "results")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    chosen = [name for name in args.scenarios.split(",") if name]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown or repeats < 1:
        parser.error(f"unknown scenarios {sorted(unknown)}" if unknown else "--repeats >= 1")

    with_enqueue_many = hasattr(EventService, "enqueue_many")
    with_durability = hasattr(EventServiceBuilder, "durability")
    with_sync_producer = hasattr(aioqueue, "SyncProducer")
    with_uvloop = importlib.util.find_spec("uvloop") is not None
    rows = plan(
        args.peers_python,
        args.peers6_python,
        with_enqueue_many=with_enqueue_many,
        with_durability=with_durability,
        with_sync_producer=with_sync_producer,
        with_uvloop=with_uvloop,
    )
    rows = {scenario: rows[scenario] for scenario in SCENARIOS if scenario in chosen}
    runs: list[JsonDict] = []
    started_at = datetime.now(timezone.utc)
    # Other work on the machine slows every system; the load averages show how much there was.
    load_before = os.getloadavg()
    with EmbeddedServer() as server:
        client = redis.Redis.from_url(server.url)
        server_info = client.info()  # the server and memory sections: server_name
        assert server.pid is not None
        server_process = psutil.Process(server.pid)
        print(
            f"server: {server_name(server_info)} on {server.url}; sizes {asdict(sizes)}; "
            f"{repeats} repeat(s)",
            file=sys.stderr,
        )
        found_versions = versions(rows, server.url)
        for repeat in range(repeats):
            for scenario, scenario_rows in rows.items():
                arguments, timeout = scenario_arguments(scenario, sizes)
                for row in scenario_rows:
                    reason = NOT_APPLICABLE.get((row.system, scenario))
                    asyncio.run(reset_server(server.url))
                    cpu_before = server_cpu_seconds(server_process)
                    wall_started = time.perf_counter()
                    if reason is not None:
                        result: JsonDict = {"not_applicable": reason}
                    else:
                        result = run_script(row, [*arguments, "--url", server.url], timeout)
                    wall = time.perf_counter() - wall_started
                    if "error" not in result and reason is None:
                        result["server_cpu_s"] = server_cpu_seconds(server_process) - cpu_before
                    runs.append(
                        {
                            "scenario": scenario,
                            "row": row.label,
                            "system": row.system,
                            "variant": row.variant,
                            "repeat": repeat,
                            "wall_s": wall,
                            "result": result,
                        }
                    )
                    print(
                        f"[{repeat + 1}/{repeats}] {scenario:8} {row.label:44} "
                        f"{one_line(scenario, result)} ({wall:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
        client.close()

    all_rows = [row for scenario_rows in rows.values() for row in scenario_rows]
    summary = summarize(runs)
    meta: dict[str, Any] = {
        "started_at": started_at.isoformat(),
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "quick": args.quick,
        "repeats": repeats,
        "sizes": asdict(sizes),
        "server": {
            "binary": str(server.binary),
            "name": server_name(server_info),
            "valkey_version": server_info.get("valkey_version"),
            "redis_version": server_info.get("redis_version"),
        },
        "versions": found_versions,
        "aioqueue_commit": git_commit(),
        "enqueue_many_measured": with_enqueue_many,
        "durability_measured": with_durability,
        "python": platform.python_version(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
    }
    table = render_table(
        summary,
        rows_by_scenario={scenario: [row.label for row in rs] for scenario, rs in rows.items()},
        peers={row.label for row in all_rows if row.is_peer},
        ours={row.label for row in all_rows if row.system == "aioqueue"},
        meta=meta,
    )
    targets = check_targets(summary, runs)
    print(table)
    print()
    print(render_targets(targets))

    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "latest.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "targets": targets, "runs": runs}, indent=1)
        + "\n"
    )
    chart = lateness_chart(runs, args.results / "lateness.png", meta=meta)
    print(f"\nraw results: {args.results / 'latest.json'}", file=sys.stderr)
    if chart is not None:
        print(f"lateness chart: {chart}", file=sys.stderr)
    failed = [run for run in runs if "error" in run["result"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
