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
            realistic,
            *([many] if with_enqueue_many else []),
            *(sync_rows if with_sync_producer else []),
            arq,
            saq,
            *peers,
        ],
        "drain": [
            aioqueue,
            *uvloop_rows,
            realistic,
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
