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
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import psutil
import redis
from common import CLUSTER_ROUNDS, RESULT_MARKER, JsonDict, parse_result, reset_server
from report import METRICS, lateness_chart, render_table, summarize
from targets import BULLMQ_NODE, check_targets, render_targets

import aioqueue
from aioqueue import EventService, EventServiceBuilder
from aioqueue.testing import EmbeddedServer

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent


@dataclass(frozen=True)
class Sizes:
    enqueue_events: int
    drain_events: int
    lateness_events: int
    lateness_spread: float
    memory_events: int
    ceiling_ops: int
    backlog_events: int
    """Due events drained (and dispatched) on top of each backlog."""
    backlog_small: int
    backlog_large: int
    idle_events: int
    idle_window: float
    cluster_events: int


FULL = Sizes(
    enqueue_events=20_000,
    drain_events=20_000,
    lateness_events=5_000,
    lateness_spread=5.0,
    memory_events=100_000,
    ceiling_ops=50_000,
    backlog_events=20_000,
    backlog_small=1_000,
    backlog_large=1_000_000,
    idle_events=100_000,
    idle_window=5.0,
    cluster_events=3_000,
)
QUICK = Sizes(
    enqueue_events=2_000,
    drain_events=2_000,
    lateness_events=1_000,
    lateness_spread=2.0,
    memory_events=10_000,
    ceiling_ops=5_000,
    backlog_events=2_000,
    backlog_small=1_000,
    backlog_large=100_000,
    idle_events=10_000,
    idle_window=3.0,
    cluster_events=1_000,
)


@dataclass(frozen=True)
class Row:
    """One line of the table: a system (or Redis client) with an optional variant."""

    label: str
    system: str  # "aioqueue", one of PEER_SYSTEMS, or "redis-py" for the ceiling
    script: str
    python: str
    variant: str = ""

    @property
    def is_peer(self) -> bool:
        return self.system in PEER_SYSTEMS


PEER_SYSTEMS = ("arq", "saq", "streaq", "bullmq", "bullmq-node")
SCENARIOS = (
    "enqueue",
    "drain",
    "lateness",
    "memory",
    "ceiling",
    "backlog",
    "idle",
    "cluster",
    "durable",
)


def plan(
    peers_python: str,
    bullmq_python: str,
    *,
    with_enqueue_many: bool,
    with_durability: bool,
    with_sync_producer: bool = False,
    with_uvloop: bool = False,
) -> dict[str, list[Row]]:
    """The rows each scenario runs, in table order."""
    ours = sys.executable
    aioqueue = Row("aioqueue", "aioqueue", "system_aioqueue.py", ours)
    many = Row(
        "aioqueue enqueue_many (100/call)",
        "aioqueue",
        "system_aioqueue.py",
        ours,
        "enqueue_many",
    )
    sync_handler = Row(
        "aioqueue, sync (def) handler", "aioqueue", "system_aioqueue.py", ours, "sync_handler"
    )
    rate_limited = Row(
        "aioqueue, rate limit far above the drain", "aioqueue", "system_aioqueue.py", ours,
        "rate_limited",
    )  # fmt: skip
    serial_keys = Row(
        "aioqueue, serial key (1,000 keys)", "aioqueue", "system_aioqueue.py", ours,
        "serial_keys",
    )  # fmt: skip
    sync_rows = [
        Row("aioqueue SyncProducer (32 threads)", "aioqueue", "system_aioqueue.py", ours, "sync"),
        Row(
            "aioqueue SyncProducer enqueue_many (100/call, 32 threads)", "aioqueue",
            "system_aioqueue.py", ours, "sync_enqueue_many",
        ),
        Row(
            "aioqueue SyncProducer (1 thread)", "aioqueue", "system_aioqueue.py", ours,
            "sync_one_thread",
        ),
    ]  # fmt: skip
    arq = Row("arq", "arq", "system_arq.py", peers_python)
    arq_spinning = Row("arq poll_delay=0", "arq", "system_arq.py", peers_python, "poll_delay=0")
    saq = Row("saq", "saq", "system_saq.py", peers_python)
    streaq = Row("streaq", "streaq", "system_streaq.py", peers_python)
    bullmq = Row("BullMQ (Python port)", "bullmq", "system_bullmq.py", bullmq_python)
    # Node runs the BullMQ side; the Python around it (server reset, MONITOR) needs redis-py.
    bullmq_node = Row(BULLMQ_NODE, "bullmq-node", "system_bullmq_node.py", bullmq_python)
    peers = [streaq, bullmq, bullmq_node]
    # Durable enqueue (issue 28) runs on a primary with a replica of its own (see
    # system_aioqueue.py), so it is shown beside the same enqueue on such a pair without it:
    # a scenario of its own, since no peer has durability.
    durable = [
        Row("aioqueue, primary + replica", "aioqueue", "system_aioqueue.py", ours,
            "replica_attached"),
        Row("aioqueue, durability(replicas=1)", "aioqueue", "system_aioqueue.py", ours,
            "durable"),
        Row("aioqueue enqueue_many, primary + replica", "aioqueue", "system_aioqueue.py",
            ours, "replica_attached_many"),
        Row("aioqueue enqueue_many, durability(replicas=1)", "aioqueue", "system_aioqueue.py",
            ours, "durable_many"),
    ] if with_durability else []  # fmt: skip
    cluster = [
        Row("aioqueue, single server", "aioqueue", "cluster.py", ours, "single"),
        Row("aioqueue, 3-master cluster", "aioqueue", "cluster.py", ours, "cluster"),
        Row("aioqueue, 3-master cluster, partitions(Tick, 8)", "aioqueue", "cluster.py", ours,
            "cluster-partitioned"),
    ]  # fmt: skip
    # The same runs on uvloop, where the benchmark's environment has it (run.sh installs it).
    on_uvloop = Row(
        "aioqueue on uvloop", "aioqueue", "system_aioqueue.py", ours, "uvloop"
    ) if with_uvloop else None  # fmt: skip
    uvloop_rows = [on_uvloop] if on_uvloop is not None else []
    return {
        "enqueue": [
            aioqueue,
            *uvloop_rows,
            *([many] if with_enqueue_many else []),
            *(sync_rows if with_sync_producer else []),
            arq,
            saq,
            *peers,
        ],
        "drain": [
            aioqueue,
            *uvloop_rows,
            sync_handler,
            rate_limited,
            serial_keys,
            arq,
            arq_spinning,
            saq,
            *peers,
        ],
        "lateness": [aioqueue, *uvloop_rows, arq, arq_spinning, saq, *peers],
        "memory": [aioqueue, arq, saq, *peers],
        "ceiling": [
            Row("redis-py (aioqueue's venv)", "redis-py", "ceiling.py", ours),
            Row("redis-py (peers' venv)", "redis-py", "ceiling.py", peers_python),
            Row("redis-py (bullmq's venv)", "redis-py", "ceiling.py", bullmq_python),
        ],
        # arq at its defaults drains about 200 events/s whatever the backlog (PITFALLS.md), so
        # it is measured in its fastest setting only.
        "backlog": [aioqueue, arq_spinning, saq, *peers],
        "idle": [aioqueue, arq, saq, *peers],
        "cluster": cluster,
        "durable": durable,
    }


def scenario_arguments(scenario: str, sizes: Sizes) -> tuple[list[str], float]:
    """Command-line arguments for one scenario, and how long it may take (seconds)."""
    if scenario in ("enqueue", "durable"):
        # Durable rows start a primary and a replica of their own first (a few seconds).
        events = sizes.enqueue_events
        return ["enqueue", "--events", str(events)], events / 500 + 60
    if scenario == "drain":
        # arq at its defaults handles about 200 events/s.
        events = sizes.drain_events
        return ["drain", "--events", str(events)], events / 100 + 60
    if scenario == "lateness":
        events, spread = sizes.lateness_events, sizes.lateness_spread
        arguments = ["lateness", "--events", str(events), "--spread", str(spread)]
        return arguments, spread + events / 100 + 60
    if scenario == "memory":
        events = sizes.memory_events
        return ["memory", "--events", str(events)], events / 500 + 60
    if scenario == "ceiling":
        return ["--ops", str(sizes.ceiling_ops)], sizes.ceiling_ops / 1000 + 60
    if scenario == "backlog":
        events, large = sizes.backlog_events, sizes.backlog_large
        arguments = ["backlog", "--events", str(events), "--backlog", str(large),
                     "--backlog-small", str(sizes.backlog_small)]  # fmt: skip
        # Two loads at >= 5,000 events/s, four drains at >= 200 events/s.
        return arguments, (large + sizes.backlog_small) / 5000 + 4 * events / 200 + 60
    if scenario == "idle":
        events, window = sizes.idle_events, sizes.idle_window
        arguments = ["idle", "--events", str(events), "--window", str(window)]
        return arguments, events / 5000 + window + 60
    if scenario == "cluster":
        # A cluster start (about 2 s), then the rounds of the enqueue and the lead and spread
        # of the due times (about 3.2 s each).
        events = sizes.cluster_events
        return ["cluster", "--events", str(events)], CLUSTER_ROUNDS * events / 500 + 80
    raise AssertionError(scenario)


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
    parser.add_argument("--bullmq-python", required=True, help="python of .venv-bullmq")
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
        args.bullmq_python,
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
        server_info = client.info("server")
        assert server.pid is not None
        server_process = psutil.Process(server.pid)
        print(
            f"server: valkey {server_info.get('valkey_version', server_info['redis_version'])}"
            f" on {server.url}; sizes {asdict(sizes)}; {repeats} repeat(s)",
            file=sys.stderr,
        )
        found_versions = versions(rows, server.url)
        for repeat in range(repeats):
            for scenario, scenario_rows in rows.items():
                arguments, timeout = scenario_arguments(scenario, sizes)
                for row in scenario_rows:
                    asyncio.run(reset_server(server.url))
                    cpu_before = server_cpu_seconds(server_process)
                    wall_started = time.perf_counter()
                    result = run_script(row, [*arguments, "--url", server.url], timeout)
                    wall = time.perf_counter() - wall_started
                    if "error" not in result:
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
