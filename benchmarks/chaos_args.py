"""The chaos run's command line: the driver's options, and those it gives each worker."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

__all__ = ["parse_args"]


def seconds_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    bounds = (float(low), float(high or low))
    if not 0 < bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH seconds with 0 < LOW <= HIGH: {text}")
    return bounds


def parse_args(argv: Sequence[str], description: str) -> argparse.Namespace:
    """The driver's options, or a worker's after `worker` (see chaos.py)."""
    if argv[:1] == ["worker"]:
        worker = argparse.ArgumentParser(prog="chaos.py worker")
        worker.add_argument("--url", required=True)
        worker.add_argument("--log", required=True)
        worker.add_argument("--handler-timeout", type=float, required=True)
        worker.add_argument("--lease", type=float, required=True)
        worker.add_argument("--handler-ms", type=float, required=True)
        worker.add_argument("--retry-attempts", type=int, required=True)
        worker.add_argument("--parallelism", type=int, required=True)
        worker.add_argument("--sync-handler", action="store_true")
        worker.add_argument("--batch-handler", action="store_true")
        worker.add_argument("--rate-limit", type=int, required=True)
        worker.add_argument("--partitions", type=int, required=True)
        namespace = worker.parse_args(argv[1:])
        namespace.command = "worker"
        return namespace
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--window", type=float, default=30.0, help="seconds the due times span")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=16, help="handler slots per worker")
    parser.add_argument("--lead", type=float, default=3.0, help="seconds before the first due")
    parser.add_argument("--no-aof", dest="aof", action="store_false", help="server without AOF")
    parser.add_argument("--cluster", action="store_true", help="on a 3-master cluster")
    parser.add_argument(
        "--sentinel", action="store_true", help="on a primary and replicas behind 3 sentinels"
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="partitions of the main event type"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="with --cluster: replicas per master, the crash is then a failover; with "
        "--sentinel: replicas of the primary (default 1)",
    )
    parser.add_argument(
        "--durable-rate",
        type=float,
        default=100.0,
        help="with --replicas: durable enqueues a second during the window (0: none)",
    )
    parser.add_argument(
        "--no-faults",
        dest="faults",
        action="store_false",
        help="baseline: same load through the proxy, no kills, cuts or restart",
    )
    parser.add_argument(
        "--cuts-only",
        action="store_true",
        help="cut connections, but kill no worker and stop no server: every attempt spent "
        "with no handler call is then unexplained",
    )
    parser.add_argument(
        "--server-stop",
        choices=("kill", "term"),
        default="kill",
        help="how the server is stopped mid-window: SIGKILL (default) or SIGTERM",
    )
    parser.add_argument("--kill-every", type=seconds_range, default=(2.0, 4.0), metavar="LOW-HIGH")
    parser.add_argument(
        "--restart-every",
        type=seconds_range,
        metavar="LOW-HIGH",
        help="also stop a random worker with SIGTERM and start another in its place (a "
        "rolling restart) every LOW-HIGH s; an attempt spent with no handler call is never "
        "explained by one (default: no restarts)",
    )
    parser.add_argument("--cut-every", type=seconds_range, default=(0.1, 0.5), metavar="LOW-HIGH")
    parser.add_argument("--handler-timeout", type=float, default=2.0)
    parser.add_argument(
        "--lease", type=float, default=1.0, help="seconds a killed worker's events stay leased"
    )
    parser.add_argument("--handler-ms", type=float, default=5.0, help="most ms a handler works")
    parser.add_argument("--retry-attempts", type=int, default=3)
    parser.add_argument("--drain-timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the report here as JSON")
    parser.add_argument(
        "--logs",
        type=Path,
        help="keep the workers' logs (deliveries, flow, stderr) in this directory, to read "
        "what a failed run did; by default they go with the run's scratch directory",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    namespace = parser.parse_args(argv)
    if namespace.cluster and namespace.sentinel:
        parser.error("--cluster and --sentinel are two topologies: choose one")
    if namespace.replicas and not (namespace.cluster or namespace.sentinel):
        parser.error("--replicas needs --cluster or --sentinel")
    if namespace.sentinel:
        namespace.replicas = namespace.replicas or 1
    if namespace.logs is not None and namespace.logs.exists() and any(namespace.logs.iterdir()):
        # The report reads every log in it: another run's would count as this one's.
        parser.error(f"--logs {namespace.logs} holds files already: give a new directory")
    namespace.command = "run"
    return namespace
