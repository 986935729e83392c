"""Chaos run: many events due over a short window, delivered through crashes and cuts.

    python benchmarks/chaos.py              # 50,000 events over 30 s, 4 workers, AOF on
    python benchmarks/chaos.py --no-aof     # the same without AOF: what a restart loses
    python benchmarks/chaos.py --no-faults  # the same load without faults: the baseline
    python benchmarks/chaos.py --cluster --partitions 4   # on a 3-master cluster

One embedded server (AOF on, `appendfsync everysec`), N worker processes (this script with
`worker`) that reach it through aioqueue.testing.CuttingProxy, and one producer that
schedules every event before the window opens. While events come due the driver

- SIGKILLs a random worker every few seconds and starts a new one in its place,
- cuts random proxied connections (a TCP reset on both sides) several times a second,
- SIGKILLs the server once, in the middle of the window (of what is left of it, when
  scheduling ran late), and starts it again on its data;
- with `--restart-every`, stops a random worker with SIGTERM every few seconds and starts a
  new one in its place: a rolling restart, which must spend no attempt.

With `--cluster` the same runs on a 3-master cluster: a cut closes one client connection
of a random master, and the crash is one master's (chaos_topology.py). `--partitions N`
spreads the main event type over N partitions, and so over the masters. `--replicas N`
gives each master N replicas, and the crash becomes a failover: the master is killed, its
replica promoted, and the old master comes back as a replica; a producer with
`durability(replicas=N)` then enqueues events all through the window, and none it was told
were stored may be lost (chaos_durable.py). `--sentinel` runs it on a primary with a replica
(or `--replicas N`) behind three sentinels: a cut closes a client connection of the
primary, and the crash is a failover as on the cluster with replicas.

Each worker appends one line per handler call (`id  due_ms  now_ms  attempt  attempt_due_ms`,
the last two from current_delivery()) to a file of its own
with a single write(2) on an O_APPEND descriptor, *before* the handler returns and the event
is acknowledged. A SIGKILL cannot undo a write that returned, and the files are outside the
server under test, so the record is truthful: an acknowledged event was recorded first, and
an event recorded twice was handed to handlers twice. Every 1000th event is poisoned (its
handler always raises) and must end in the dead letters, which proves that failures are
settled through the chaos as well.

Half the workers run the handler as a plain function (in worker threads), and every worker
declares the same recurring schedule (a tick every 0.25 s, misfire="all"), whose ticks are
logged like events. A rate-limited type and a serial-key type run beside them (chaos_flow.py):
their limit violations and overlapping calls of one key must be 0.

At the end: delivered, duplicated, lost (scheduled, never handed to a handler, not dead),
dead, invented (delivered but never scheduled), the lateness of first deliveries, and the
schedule's ticks missing between the first and the last delivered one. Two counters watch the
lease protocol: events dead-lettered without any handler call, and events a killed worker
had begun whose next attempt was due later than two leases (`--lease`, 1 s: one, and one
for a renewal sent just before the kill that the server ran after it) plus the scheduling
interval after the kill; give `--handler-timeout` above that bound, so that an event
returned by its handler timeout instead would count. A third counts the attempts spent with
no handler call that no kill and no server crash explains (chaos_leases.py): a claim whose
reply a cut lost must hand out what it took when sent again. `--cuts-only` leaves out the
kills and the crash, so that every such attempt is unexplained (with `--restart-every` too:
a graceful stop gives back what no handler began, uncounted). The exit status is 1 if anything was
invented or wrongly dead, a lease counter is not 0, or, with AOF on or replicas,
something was lost, left pending or a tick missing, or, with replicas, a durable enqueue's
event lost, invented or given up.
The worker processes are driven by chaos_pool.py, the options are in chaos_args.py, and what
the run leaves is judged into its report in chaos_judge.py.
Every loop is bounded in count and in time; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import anyio
import redis.asyncio as redis
from chaos_args import parse_args
from chaos_durable import DurableProducer
from chaos_flow import (
    ChaosKeyed,
    ChaosLimited,
    analyse_flow,
    plan_flow_events,
    rate_limit_for,
)
from chaos_judge import RunRecord, judge
from chaos_leases import (
    read_deliveries,
    read_lapsed_not_begun,
)
from chaos_pool import WORKER_READY_TIMEOUT, WorkerPool
from chaos_report import (
    Chaos,
    Report,
    print_report,
)
from chaos_topology import Target, cluster, sentinel_group, single_server
from chaos_worker import (
    EVENT_TYPE,
    PREFIX,
    ChaosEvent,
    producer_builder,
    run_worker,
)

from aioqueue._wire.keys import QueueKeys, QueueLayout

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
POISON_EVERY = 1000
# Due times are grouped into buckets of this many ms, one enqueue_many call each.
BUCKET_MS = 10
ENQUEUE_CALLS_IN_FLIGHT = 16


# -- the driver ------------------------------------------------------------------------------


DueEvent = ChaosEvent | ChaosLimited | ChaosKeyed


async def enqueue_all(url: str, events: Sequence[DueEvent], partitions: int) -> tuple[int, float]:
    """Schedules every event, bucket by bucket in due order; returns (scheduled, seconds)."""
    buckets: dict[int, list[DueEvent]] = {}
    for event in events:
        buckets.setdefault(event.due_ms, []).append(event)
    scheduled = 0
    limiter = anyio.CapacityLimiter(ENQUEUE_CALLS_IN_FLIGHT)
    producer = producer_builder(url, partitions).build()
    started = time.monotonic()

    async def enqueue(due_ms: int, bucket: list[DueEvent]) -> None:
        nonlocal scheduled
        async with limiter:
            at = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc)
            outcomes = await producer.enqueue_many(bucket, at=at)
        scheduled += sum(outcomes)

    async with producer, anyio.create_task_group() as enqueues:
        # Started in due order and admitted first-come, first-served: earliest written first.
        for due_ms in sorted(buckets):
            enqueues.start_soon(enqueue, due_ms, buckets[due_ms])
    return scheduled, time.monotonic() - started


def plan_events(
    count: int, first_due_ms: int, window_ms: int, rng: random.Random
) -> list[ChaosEvent]:
    events = []
    for index in range(count):
        offset = rng.uniform(0, window_ms)
        due_ms = first_due_ms + int(offset // BUCKET_MS) * BUCKET_MS
        events.append(
            ChaosEvent(id=f"c-{index:06d}", due_ms=due_ms, poison=index % POISON_EVERY == 0)
        )
    return events


async def now_and_then(
    fault: Callable[[], Awaitable[object]],
    every: tuple[float, float],
    rng: random.Random,
    until: float,
) -> None:
    """Runs `fault` after a random pause of `every` (LOW-HIGH seconds), again and again until
    the monotonic time `until`: the cuts and the worker kills."""
    low, high = every
    for _ in range(math.ceil((until - time.monotonic()) / low) + 1):
        await anyio.sleep(rng.uniform(low, high))
        if time.monotonic() >= until:
            return
        await fault()


async def restart_server(
    target: Target, chaos: Chaos, at: float, how: str, rng: random.Random, after: anyio.Event
) -> None:
    """Crashes the server at `at`, not before `after` is set, and starts it again."""
    await after.wait()
    await anyio.sleep(max(0.0, at - time.monotonic()))
    chaos.server_restart_at_ms = time.time() * 1000
    started = time.monotonic()
    await target.crash_and_restart(how, rng)
    chaos.server_down_seconds = time.monotonic() - started
    chaos.server_restarts += 1


async def run_durable_producer(
    durable: DurableProducer,
    target: Target,
    args: argparse.Namespace,
    window_opens: float,
    until: float,
    started: anyio.Event,
) -> None:
    """The durable enqueues, from the window's opening to the end of the chaos; `started`
    is set once the producer's service has started."""
    await anyio.sleep(max(0.0, window_opens - time.monotonic()))
    await durable.run(target.producer_url, args.partitions, until, started)


async def wait_drained(
    client: redis.Redis | redis.RedisCluster, keys: Sequence[QueueKeys], within: float
) -> bool:
    """Waits until nothing is pending (all acknowledged or dead); False after `within` s."""
    with anyio.move_on_after(within):
        while True:
            try:
                if sum([await client.hlen(queue.events) for queue in keys]) == 0:
                    return True
            except (redis.RedisError, OSError):
                pass
            # Another process's progress offers nothing to await: poll at a short interval.
            await anyio.sleep(0.2)
    return False


async def drive(args: argparse.Namespace) -> Report:
    rng = random.Random(args.seed)
    chaos = Chaos()
    main_keys = QueueLayout(PREFIX, EVENT_TYPE, args.partitions).all_keys
    flow_keys = [QueueKeys.for_type(PREFIX, cls.__name__) for cls in (ChaosLimited, ChaosKeyed)]
    run_started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aioqueue-chaos-") as scratch:
        scratch_dir = Path(scratch)
        logs = args.logs or scratch_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        topology = (
            cluster(aof=args.aof, replicas=args.replicas)
            if args.cluster
            else sentinel_group(aof=args.aof, replicas=args.replicas)
            if args.sentinel
            else single_server(scratch_dir / "server", aof=args.aof)
        )
        async with (
            topology as target,
            target.observer() as observer,
            contextlib.AsyncExitStack() as on_the_way_out,
            anyio.create_task_group() as tg,
        ):
            rate_limit = rate_limit_for(args.events // 20, args.window)
            pool = WorkerPool(args, target.worker_url, logs, chaos, rate_limit)
            # A run that fails (a producer that cannot start, a server that does not come
            # back) stops its workers too: left running, they retried a server that was gone
            # for as long as the machine ran, and slowed whatever ran next.
            on_the_way_out.push_async_callback(pool.stop_all)
            for slot in range(args.workers):
                await pool.start(slot, tg)
            await pool.wait_all_ready(WORKER_READY_TIMEOUT)

            first_due_ms = int(time.time() * 1000 + args.lead * 1000)
            window_ms = int(args.window * 1000)
            events = plan_events(args.events, first_due_ms, window_ms, rng)
            limited, keyed = plan_flow_events(args.events, first_due_ms, window_ms, rng)
            poisoned = {event.id for event in events if event.poison}
            scheduled, enqueue_seconds = await enqueue_all(
                target.producer_url, events, args.partitions
            )
            await enqueue_all(target.producer_url, [*limited, *keyed], args.partitions)
            log(args, f"scheduled {scheduled} events in {enqueue_seconds:.1f} s on {target.name}")

            window_opens = time.monotonic() + (first_due_ms / 1000 - time.time())
            # The faults go on for a whole window from the end of scheduling, if that came
            # after the window opened: on a loaded machine (the suite's server matrix beside
            # other files) scheduling outlasted the lead, and the faults, timed by the due
            # window alone, came too few to test anything (no worker killed in some runs).
            faults_begin = max(window_opens, time.monotonic())
            chaos_until = faults_begin + args.window + 1.0
            # The server's crash halfway through what is left of the due window: timed by the
            # window alone, after such a late start it came as the faults began, before the
            # durable producer's first enqueue had returned.
            crash_at = faults_begin + max(0.0, window_opens + args.window - faults_begin) / 2
            durable = None
            if args.replicas and args.durable_rate > 0:
                durable = DurableProducer(args.durable_rate, args.replicas)
            # The crash waits for the durable producer's start: a service cannot start while
            # the node its URL names is down (it says so, RedisUnavailableError), and after a
            # late scheduling the crash came as the producer started, failing the whole run.
            producer_started = anyio.Event()
            async with anyio.create_task_group() as chaos_tasks:
                if durable is not None:
                    chaos_tasks.start_soon(
                        run_durable_producer,
                        durable,
                        target,
                        args,
                        window_opens,
                        chaos_until,
                        producer_started,
                    )
                else:
                    producer_started.set()
                if args.faults:
                    cut = functools.partial(target.cut, rng)
                    chaos_tasks.start_soon(now_and_then, cut, args.cut_every, rng, chaos_until)

                    async def kill() -> None:
                        await pool.kill_and_replace(rng.randrange(args.workers), tg)

                    async def restart() -> None:
                        pool.restart_in_background(rng, tg)

                    if args.restart_every is not None:
                        chaos_tasks.start_soon(
                            now_and_then, restart, args.restart_every, rng, chaos_until
                        )
                    if not args.cuts_only:
                        chaos_tasks.start_soon(
                            now_and_then, kill, args.kill_every, rng, chaos_until
                        )
                        chaos_tasks.start_soon(
                            restart_server,
                            target,
                            chaos,
                            crash_at,
                            args.server_stop,
                            rng,
                            producer_started,
                        )
                else:
                    # The baseline: same load and topology, no faults.
                    await anyio.sleep(max(0.0, chaos_until - time.monotonic()))
            log(args, "chaos over; waiting for the queue to drain")
            drained = await wait_drained(observer, [*main_keys, *flow_keys], args.drain_timeout)
            pending_ids: set[str] = set()
            dead_ids: set[str] = set()
            for queue in main_keys:
                pending_ids.update(map(str, await observer.hkeys(queue.events)))
                dead_ids.update(map(str, await observer.hkeys(queue.dead_letters)))
            # Dead or pending at the end is not lost (the main report's rule).
            flow_pending: set[str] = set()
            for queue in flow_keys:
                flow_pending.update(map(str, await observer.hkeys(queue.events)))
                flow_pending.update(map(str, await observer.hkeys(queue.dead_letters)))
            await pool.stop_all()
            target.count_cuts(chaos)
            tg.cancel_scope.cancel()
        calls, torn = read_deliveries(logs)
        lapsed_not_begun = read_lapsed_not_begun(logs)
        flow = analyse_flow(
            logs,
            rate_limit=rate_limit,
            limited=limited,
            keyed=keyed,
            handed_out={call[0] for call in calls},
            pending=flow_pending,
            kills_ms=chaos.kills_ms,
            restart_ms=(chaos.server_restart_at_ms, chaos.server_down_seconds * 1000)
            if chaos.server_restarts
            else None,
        )

    record = RunRecord(
        topology=target.name,
        events=events,
        poisoned=frozenset(poisoned),
        first_due_ms=first_due_ms,
        scheduled=scheduled,
        calls=calls,
        torn_lines=torn,
        lapsed_not_begun=lapsed_not_begun,
        pending_ids=pending_ids,
        dead_ids=dead_ids,
        flow=flow,
        durable=durable,
        chaos=chaos,
        drained=drained,
        started=run_started,
    )
    return judge(args, record)


def log(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(f"[chaos] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv, __doc__ or "")
    if args.command == "worker":
        anyio.run(run_worker, args)
        return 0
    report = anyio.run(drive, args)
    print_report(report)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    flow = report.flow
    failed = report.invented > 0 or report.dead_unexpected > 0 or report.dead_unhandled > 0
    failed = failed or report.late_after_kill > 0 or report.unbegun_unexplained > 0
    failed = failed or flow.limit_violations > 0 or flow.key_overlaps > 0
    if report.aof or report.replicas:
        # Kept on disk, or on the replica that takes over: nothing may be missing.
        failed = failed or report.lost > 0 or not report.drained or report.tick_gaps > 0
        failed = failed or flow.lost > 0
    durable = report.durable
    if durable is not None:
        failed = failed or durable.lost > 0 or durable.invented > 0 or durable.given_up > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
