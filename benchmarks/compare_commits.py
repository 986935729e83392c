"""aioqueue at two commits, back to back on one server: what a change costs on the hot path.

    python benchmarks/compare_commits.py BASE                 # BASE against the working tree
    python benchmarks/compare_commits.py BASE --rounds 7 --scenarios drain,lateness,enqueue

BASE is any git revision; the other side is this checkout as it is (uncommitted changes
included), or `--head REV`. Each revision's tree is exported (`git archive`) to a scratch
directory, and its own benchmarks/system_aioqueue.py runs each scenario with that tree's
aioqueue first on the import path, so both sides run the code they shipped with. The rounds
alternate BASE and HEAD (the order flips each round) on ONE embedded server, so that a
machine's drift touches both sides alike; the table shows each side's median and the
ratio HEAD / BASE. Run it with nothing else on the machine: on 2 cores another process's
work is the largest noise there is.

Scenarios, as in benchmarks/README.md: `drain` (events/s for --events due events, one
worker, the worker's CPU per event, which a busy machine moves far less than the rate, and
the server's, which bounds a batch handler's drain; a tree whose harness predates either
figure leaves it out), `lateness` (p50 / p99 ms of
--events events due over --spread s, with the worker's CPU seconds), `enqueue` (events/s
with 32 calls in flight).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio
from common import reset_server

from aioqueue.testing import EmbeddedServer

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT_MARKER = "BENCH-RESULT "
# What each scenario reports, and whether higher is better.
METRICS = {
    "drain": [("events_per_s", "events/s", True),
              ("worker_cpu_us_per_event", "worker µs/ev", False),
              ("server_cpu_us_per_event", "server µs/ev", False)],
    "lateness": [("p50_ms", "p50 ms", False), ("p99_ms", "p99 ms", False),
                 ("worker_cpu_s", "worker CPU s", False)],
    "enqueue": [("events_per_s", "events/s", True)],
}  # fmt: skip


def export(revision: str, into: Path) -> Path:
    """The tree of `revision` (or this checkout for "WORKTREE") under `into`."""
    if revision == "WORKTREE":
        return REPO
    tree = into / revision.replace("/", "_")
    if tree.exists():  # the same revision on both sides: one tree serves both
        return tree
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run(tree: Path, scenario: str, args: argparse.Namespace, url: str) -> dict[str, float]:
    """One scenario run of `tree`'s system_aioqueue.py; its result."""
    command = [sys.executable, str(tree / "benchmarks" / "system_aioqueue.py"), scenario]
    command += ["--url", url, "--events", str(args.events), "--spread", str(args.spread)]
    if args.variant:
        command += ["--variant", args.variant]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        command, cwd=tree / "benchmarks", env=env, capture_output=True, text=True, timeout=600
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            result: dict[str, float] = json.loads(line[len(RESULT_MARKER) :])
            return result
    raise RuntimeError(f"{tree.name} {scenario} failed: {done.stderr.strip()[-2000:]}")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("base", help="the revision to compare against")
    parser.add_argument("--head", default="WORKTREE", help="default: this checkout as it is")
    parser.add_argument("--scenarios", default="drain,lateness")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--spread", type=float, default=5.0, help="seconds (lateness)")
    parser.add_argument("--variant", default="", help="of system_aioqueue.py, e.g. sync_handler")
    args = parser.parse_args(argv)
    scenarios = args.scenarios.split(",")
    with tempfile.TemporaryDirectory(prefix="aioqueue-compare-") as scratch:
        trees = {"base": export(args.base, Path(scratch)), "head": export(args.head, Path(scratch))}
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        with EmbeddedServer() as server:
            for round_number in range(args.rounds):
                order = ["base", "head"] if round_number % 2 == 0 else ["head", "base"]
                for scenario in scenarios:
                    for side in order:
                        # Every run on an empty server: the enqueue scenario's events (an
                        # hour ahead) would otherwise hold the ids a drain enqueues next.
                        anyio.run(reset_server, server.url)
                        result = run(trees[side], scenario, args, server.url)
                        results.setdefault((scenario, side), []).append(result)
                        print(f"round {round_number + 1} {scenario} {side}: done", file=sys.stderr)
    variant = f", variant {args.variant}" if args.variant else ""
    print(
        f"aioqueue {args.base} (base) against {args.head} (head){variant}, medians of {args.rounds}"
    )
    for scenario in scenarios:
        for key, unit, higher_is_better in METRICS[scenario]:
            if any(key not in r for side in ("base", "head") for r in results[scenario, side]):
                print(f"  {scenario:9} {unit:13} not measured by both trees' harness")
                continue
            base = statistics.median(r[key] for r in results[scenario, "base"])
            head = statistics.median(r[key] for r in results[scenario, "head"])
            runs = {
                side: ", ".join(f"{r[key]:,.2f}" for r in results[scenario, side])
                for side in ("base", "head")
            }
            better = "higher" if higher_is_better else "lower"
            print(
                f"  {scenario:9} {unit:13} base {base:12,.2f}  head {head:12,.2f}  "
                f"head/base {head / base:5.3f} ({better} is better)\n"
                f"            runs: base {runs['base']}; head {runs['head']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
