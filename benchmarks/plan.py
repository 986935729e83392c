"""What the driver runs: the sizes, and for each scenario the table's rows (a system, a script,
the virtualenv's python, a variant) with the arguments and time limit of one run."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from common import CLUSTER_ROUNDS
from targets import BULLMQ_NODE


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


PEER_SYSTEMS = (
    "arq", "saq", "streaq", "bullmq", "bullmq-node", "celery", "dramatiq", "docket", "taskiq",
)  # fmt: skip
# Scenarios a system has no sensible way to run: its row says `n/a` (the reason is in the
# results file), and no run is made.
NOT_APPLICABLE = {
    ("celery", scenario): (
        "Celery keeps no pending tasks in Redis once a worker runs: the worker takes every eta "
        "task off the list into its own memory at once, and one due past the broker's 1 h "
        "visibility timeout is delivered again, so tasks pending 30 days or 3 h ahead are not "
        "a setup Celery supports on Redis"
    )
    for scenario in ("backlog", "idle")
} | {
    ("dramatiq", "backlog"): (
        "Dramatiq's delay queue is a list in arrival order, and a worker holds at most "
        "worker_threads x 1,000 (10,000) delayed messages in memory: due messages queued "
        "behind more pending ones are never fetched (500 due behind 20,000 pending 30 days "
        "ahead: none delivered in 40 s)"
    ),
}
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
    peers6_python: str,
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
    batch = Row(
        "aioqueue, batch handler (500, 10 ms)", "aioqueue", "system_aioqueue.py", ours, "batch"
    )
    sync_batch = Row(
        "aioqueue, sync (def) batch handler (500, 10 ms)", "aioqueue", "system_aioqueue.py",
        ours, "sync_batch",
    )  # fmt: skip
    rate_limited = Row(
        "aioqueue, rate limit far above the drain", "aioqueue", "system_aioqueue.py", ours,
        "rate_limited",
    )  # fmt: skip
    serial_keys = Row(
        "aioqueue, serial key (1,000 keys)", "aioqueue", "system_aioqueue.py", ours,
        "serial_keys",
    )  # fmt: skip
    # BenchEvent has an id and an int; this one eight fields of six types (bench_events.py).
    realistic = Row(
        "aioqueue, realistic event (8 fields)", "aioqueue", "system_aioqueue.py", ours,
        "realistic",
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
    bullmq = Row("BullMQ (Python port)", "bullmq", "system_bullmq.py", peers6_python)
    # Node runs the BullMQ side; the Python around it (server reset, MONITOR) needs redis-py.
    bullmq_node = Row(BULLMQ_NODE, "bullmq-node", "system_bullmq_node.py", peers6_python)
    peers = [streaq, bullmq, bullmq_node]
    # Each of these at its documented settings and at its fastest sensible ones (see their
    # scripts), as arq with poll_delay=0; the producers are the same in both, so the enqueue
    # and memory scenarios have one row each.
    celery, celery_fast = (
        Row("Celery", "celery", "system_celery.py", peers6_python),
        Row("Celery pool=threads, prefetch 16", "celery", "system_celery.py", peers6_python,
            "threads"),
    )  # fmt: skip
    dramatiq, dramatiq_fast = (
        Row("Dramatiq", "dramatiq", "system_dramatiq.py", peers6_python),
        Row("Dramatiq worker_timeout=10", "dramatiq", "system_dramatiq.py", peers6_python,
            "worker_timeout=10"),
    )  # fmt: skip
    docket, docket_fast = (
        Row("docket", "docket", "system_docket.py", peers6_python),
        Row("docket intervals 1 ms, execution_ttl=0", "docket", "system_docket.py",
            peers6_python, "check_interval=1ms"),
    )  # fmt: skip
    taskiq, taskiq_fast = (
        Row("taskiq", "taskiq", "system_taskiq.py", peers6_python),
        Row("taskiq update_interval=1", "taskiq", "system_taskiq.py", peers6_python,
            "update_interval=1"),
    )  # fmt: skip
    new_peers = [celery, dramatiq, docket, taskiq]
    # In pairs: each peer's documented settings, then its fastest ones.
    new_peers_both = [
        celery, celery_fast, dramatiq, dramatiq_fast, docket, docket_fast, taskiq, taskiq_fast,
    ]  # fmt: skip
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
            realistic,
            *([many] if with_enqueue_many else []),
            *(sync_rows if with_sync_producer else []),
            arq,
            saq,
            *peers,
            *new_peers,
        ],
        "drain": [
            aioqueue,
            *uvloop_rows,
            realistic,
            sync_handler,
            batch,
            sync_batch,
            rate_limited,
            serial_keys,
            arq,
            arq_spinning,
            saq,
            *peers,
            *new_peers_both,
        ],
        "lateness": [
            aioqueue,
            *uvloop_rows,
            batch,
            arq,
            arq_spinning,
            saq,
            *peers,
            *new_peers_both,
        ],
        "memory": [aioqueue, arq, saq, *peers, *new_peers],
        "ceiling": [
            Row("redis-py (aioqueue's venv)", "redis-py", "ceiling.py", ours),
            Row("redis-py (peers' venv)", "redis-py", "ceiling.py", peers_python),
            Row("redis-py (peers-redis6 venv)", "redis-py", "ceiling.py", peers6_python),
        ],
        # arq at its defaults drains about 200 events/s whatever the backlog (PITFALLS.md), so
        # it is measured in its fastest setting only, and so are the peers added with it.
        "backlog": [aioqueue, arq_spinning, saq, *peers, *new_peers_both[1::2]],
        # Both settings where they differ (Celery has none): the fastest ones cost the most
        # while idle.
        "idle": [aioqueue, arq, saq, *peers, celery, *new_peers_both[2:]],
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
        # arq at its defaults handles about 200 events/s, docket at its defaults about 100.
        events = sizes.drain_events
        return ["drain", "--events", str(events)], events / 50 + 60
    if scenario == "lateness":
        # taskiq at its defaults sees a new schedule only at its next reload, once a minute.
        events, spread = sizes.lateness_events, sizes.lateness_spread
        arguments = ["lateness", "--events", str(events), "--spread", str(spread)]
        return arguments, spread + events / 100 + 120
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
        # A window for the server's CPU, then one for the commands.
        return arguments, events / 5000 + 2 * window + 60
    if scenario == "cluster":
        # A cluster start (about 2 s), then the rounds of the enqueue and the lead and spread
        # of the due times (about 3.2 s each).
        events = sizes.cluster_events
        return ["cluster", "--events", str(events)], CLUSTER_ROUNDS * events / 500 + 80
    raise AssertionError(scenario)
