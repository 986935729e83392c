"""The chaos run of benchmarks/chaos.py at CI size: nothing is lost through worker SIGKILLs,
cut connections and a server SIGKILL with AOF on, with a sync handler on one worker, a
batch handler on another, and
a recurring schedule that misses no tick, and rate-limit and serial-key types that keep their
promises through it all; on one server, and on a 3-master cluster with the main type in 4
partitions (a cut there closes a connection at a node, between two of its commands; the
crash is one master's), without replicas and with one per master (the crash is then a
failover), and on a primary with a replica behind three sentinels (the crash is a failover
too). Through each failover a producer with durability enqueues all along, and no event it
was told was stored may be lost. The lease protocol's counters read 0: no event in the dead
letters that no handler was handed (a delivery waiting unclaimed through a failover or on a
starved worker spends no attempt), and no event of a killed worker due again later than
two leases (one, and one for a renewal it sent just before the kill that a busy server ran
after it) plus the scheduling interval, far below the handler timeout, and no attempt spent
with no handler call that a kill or the crash does not explain. A run of cut connections
(one every 20 to 100 ms) and rolling restarts (a worker stopped with SIGTERM and replaced
every 1 to 2 s) spends none at all: a claim whose reply a cut lost is sent again and hands
out what it took (the claim receipts), and a stopping worker gives back what no handler
began, uncounted. The durable producers run at
DURABLE_RATE here to add little load of their own."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import time
from types import ModuleType
from typing import Any, NamedTuple

import pytest

from aioqueue._delivery.leases import NAMED_IN_A_WARNING, Leases
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.store import QueueStore
from tests.support.benchmark_scripts import import_benchmark_script

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAOS = REPO_ROOT / "benchmarks" / "chaos.py"

EVENTS = 3000
WINDOW = 8.0
WORKERS = 3
DURABLE_RATE = 30


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "topology",
    [
        [],
        ["--cluster", "--partitions", "4"],
        ["--cluster", "--partitions", "4", "--replicas", "1"],
        ["--sentinel"],
    ],
    ids=["single-server", "cluster-partitioned", "cluster-failover", "sentinel-failover"],
)
def test_a_small_chaos_run_with_aof_or_failover_loses_nothing(
    tmp_path: pathlib.Path, topology: list[str], server_binary: pathlib.Path
) -> None:
    """3,000 events due over 8 s, 3 workers (async, sync and batch handlers) killed with
    SIGKILL every 1.5-3 s and restarted, connections cut every 0.1-0.4 s, and the server (on
    a cluster one master) SIGKILLed and restarted on its AOF halfway, or, with replicas (the
    cluster's, Sentinel's), failed over to its replica and back as a replica: every healthy
    event must reach a handler, every poisoned one the dead letters, and nothing may be
    invented or left pending; with replicas, every durable enqueue that returned must be
    delivered too."""
    report, summary = run_chaos(
        tmp_path,
        server_binary,
        "--kill-every", "1.5-3",
        "--cut-every", "0.1-0.4",
        # The driver's own load adds to the workers' starvation (see the module's note).
        "--durable-rate", str(DURABLE_RATE),
        *topology,
    )  # fmt: skip
    chaos = report["chaos"]
    poisoned = EVENTS // 1000

    assert report["scheduled"] == EVENTS
    assert report["lost"] == 0
    assert report["invented"] == 0
    assert report["drained"] is True
    assert report["pending_at_end"] == 0
    assert report["delivered"] == EVENTS - poisoned
    assert report["dead"] == poisoned
    assert report["dead_unexpected"] == 0
    # The lease protocol: nothing dead that no handler was handed, and a killed worker's
    # events due again within its lease (with a renewal in flight at the kill, two).
    assert report["dead_unhandled"] == 0
    assert report["late_after_kill"] == 0, (
        report["latest_after_kill_ms"],
        report["latest_kill_after_crash_ms"],
        report["latest_after_kill_calls"],
    )
    # The claim receipts: no attempt spent with no handler call unless a worker was killed
    # while it could hold it, or the server was down (see unbegun_attempts in chaos_leases.py).
    assert report["unbegun_unexplained"] == 0, report["unbegun_examples"]
    assert report["torn_lines"] == 0
    # One worker ran the handler as a plain function in threads, one as a batch handler;
    # every worker kept the recurring schedule, and no tick went missing through the kills,
    # cuts and restart.
    assert report["sync_workers"] == 1
    assert report["batch_workers"] == 1
    assert report["tick_gaps"] == 0
    assert report["ticks_delivered"] >= WINDOW / 0.25 * 0.8
    # The faults happened, and the restart came while events were still flowing.
    assert chaos["worker_kills"] >= 2
    assert chaos["connections_cut"] >= 5
    assert chaos["server_restarts"] == 1
    assert 0 < report["delivered_before_server_restart"] < EVENTS - poisoned
    assert report["lateness_ms"]["p50"] >= 0
    # A rate-limited and a serial-key type went through the same faults: all delivered, no
    # window above the limit, never two calls of one key at once.
    flow = report["flow"]
    assert (flow["limited_scheduled"], flow["keyed_scheduled"]) == (EVENTS // 20, EVENTS // 10)
    assert flow["lost"] == 0
    assert flow["limit_violations"] == 0
    assert flow["key_overlaps"] == 0
    assert flow["keyed_calls"] >= EVENTS // 10
    if "--replicas" in topology or "--sentinel" in topology:
        check_durable_enqueues(report["durable"], summary)
    else:
        assert report["durable"] is None


def test_a_chaos_run_of_cut_connections_and_rolling_restarts_spends_no_attempt_unhandled(
    tmp_path: pathlib.Path, server_binary: pathlib.Path
) -> None:
    """3,000 events due over 8 s, 3 workers, a connection cut every 20 to 100 ms and a worker
    stopped with SIGTERM and replaced every 1 to 2 s (a rolling restart), and nothing else:
    no attempt may be spent with no handler call. Without claim receipts a claim whose reply
    a cut lost left its events to wait out their lease and spent their attempt (16 and 19
    attempts in two runs of cuts alone); a stopping worker gives back what it claimed and no
    handler began, uncounted. Every event must be delivered, none twice as dead."""
    report = run_chaos(
        tmp_path, server_binary, "--cuts-only", "--cut-every", "0.02-0.1", "--restart-every", "1-2"
    ).report
    assert report["chaos"]["connections_cut"] >= 50
    assert report["chaos"]["worker_restarts"] >= 3
    assert (report["chaos"]["worker_kills"], report["chaos"]["server_restarts"]) == (0, 0)
    assert report["unbegun_spent"] == 0, report["unbegun_examples"]
    assert (report["lost"], report["invented"], report["pending_at_end"]) == (0, 0, 0)
    assert report["delivered"] == EVENTS - EVENTS // 1000
    assert report["dead_unexpected"] == 0


class ChaosRun(NamedTuple):
    report: dict[str, Any]
    summary: str
    """What the run printed: its whole report, for a failure's message."""


def run_chaos(tmp_path: pathlib.Path, server_binary: pathlib.Path, *options: str) -> ChaosRun:
    """benchmarks/chaos.py at CI size with `options`, once it exited 0 (its own counters
    read 0), else the test fails with its output."""
    report_path = tmp_path / "chaos.json"
    result = subprocess.run(
        [
            sys.executable,
            str(CHAOS),
            "--events", str(EVENTS),
            "--window", str(WINDOW),
            "--workers", str(WORKERS),
            "--lead", "2",
            # Above the lease counter's bound (two leases and the scheduling interval), so
            # that an event returned by its handler timeout rather than its lease counts.
            "--handler-timeout", "4",
            "--drain-timeout", "30",
            "--quiet",
            "--json", str(report_path),
            # Kept with the test's temporary directory: what a failed run did is in them.
            "--logs", str(tmp_path / "logs"),
            *options,
        ],
        cwd=REPO_ROOT,
        # Every server the run starts is this run's version (`--servers all`: each of them).
        env={**os.environ, "AIOQUEUE_SERVER_BINARY": str(server_binary)},
        capture_output=True,
        text=True,
        timeout=110,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}{result.stderr}(logs: {tmp_path / 'logs'})"
    return ChaosRun(json.loads(report_path.read_text()), result.stdout)


def check_durable_enqueues(durable: dict[str, Any], summary: str) -> None:
    """Enqueues with durability(replicas=1), from a service and from a SyncProducer, went on
    from the window's opening to its end, so some returned before the failover and some
    after; whatever returned was delivered. A failure shows the run's whole summary: the
    counts of tries refused and failed tell why none returned."""
    before, _, after = durable["acknowledged_by_crash"]
    assert before > 0, summary
    assert after > 0, summary
    assert durable["acknowledged_by_sync_producer"] > 0, summary  # blocking code's too
    assert durable["lost"] == 0, summary
    assert durable["delivered"] == durable["acknowledged"], summary
    assert durable["invented"] == 0, summary
    assert durable["given_up"] == 0, summary


@pytest.fixture
def chaos_leases(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/chaos_leases.py, the chaos run's lease counters, which these tests check:
    a module of a script, not of a package."""
    return import_benchmark_script(monkeypatch, "chaos_leases")


def test_the_lease_counter_tells_every_call_of_the_latest_return(chaos_leases: ModuleType) -> None:
    """A late return must be diagnosable from the report alone: the latest one's calls,
    each timed from the kill of the worker it came back from, with any other kill."""
    Call, late_after_kills = chaos_leases.Call, chaos_leases.late_after_kills

    calls = [
        Call("e-1", 0, 100.0, 1, 0, "w1"),
        Call("e-1", 0, 2_500.0, 2, 1_900, "w2"),
        Call("e-1", 0, 6_000.0, 3, 5_200, "w3"),
        Call("e-2", 0, 200.0, 1, 0, "w1"),
        Call("e-2", 0, 1_500.0, 2, 1_500, "w3"),
    ]
    killed = late_after_kills(calls, {"w1": 1_000.0, "w2": 3_000.0}, lease_ms=1_000)

    # w1's e-1 and e-2 came back 900 and 500 ms after its kill; w2's e-1 2,200 ms after
    # its kill, past the bound of two leases and the scheduling interval (2,100 ms).
    assert (killed.came_back, killed.late) == (3, 1)
    assert (killed.latest_after_kill_ms, killed.latest_kill_ms) == (2_200, 3_000.0)
    assert killed.latest_calls == [
        "e-1 attempt 1 on w1: began -2,900 ms, due -3,000 ms, its worker killed -2,000 ms",
        "e-1 attempt 2 on w2: began -500 ms, due -1,100 ms, its worker killed +0 ms",
        "e-1 attempt 3 on w3: began +3,000 ms, due +2,200 ms",
    ]


def test_the_lease_counter_leaves_untimed_a_next_attempt_that_no_handler_began(
    chaos_leases: ModuleType,
) -> None:
    """Workers log handler calls, not claims: a next attempt claimed by a worker stopped
    before its handler began shows only as a gap in the attempts, and the attempt after it
    was due when that claim's lease ended. Such a return is counted as untimed, not late;
    a gap later in a judged event's history is named in its diagnosis."""
    Call, late_after_kills = chaos_leases.Call, chaos_leases.late_after_kills

    calls = [
        Call("e-1", 0, 100.0, 1, 0, "w1"),
        Call("e-1", 0, 5_900.0, 3, 3_700, "w2"),  # attempt 2 began no handler
        Call("e-2", 0, 200.0, 1, 0, "w1"),
        Call("e-2", 0, 3_500.0, 2, 3_300, "w3"),  # due 2,300 ms after the kill: late
        Call("e-2", 0, 9_000.0, 4, 8_000, "w3"),  # attempt 3 began no handler
    ]
    killed = late_after_kills(calls, {"w1": 1_000.0}, lease_ms=1_000)

    assert (killed.came_back, killed.late, killed.untimed) == (2, 1, 1)
    assert (killed.latest_after_kill_ms, killed.latest_kill_ms) == (2_300, 1_000.0)
    assert killed.latest_calls == [
        "e-2 attempt 1 on w1: began -800 ms, due -1,000 ms, its worker killed +0 ms",
        "e-2 attempt 2 on w3: began +2,500 ms, due +2,300 ms",
        "e-2 attempt 3: no handler call (claimed by a worker stopped before its handler "
        "began, or whose claim's reply was lost and the call sent again did not reach the "
        "server within its lease)",
        "e-2 attempt 4 on w3: began +8,000 ms, due +7,000 ms",
    ]


def test_the_unbegun_counter_explains_a_gap_only_by_a_kill_the_crash_or_its_worker(
    chaos_leases: ModuleType,
) -> None:
    """An attempt spent with no handler call is explained by a worker killed while it could
    hold the attempt (from a lease before the attempt's lease began, for a renewal the server
    ran late, to a renewal period and half a lease after), by the server's crash, or by its
    worker's warning that it gave it back unbegun, held up past its lease; any other is
    counted, and named, since a lost claim reply must not spend one."""
    Call, unbegun_attempts = chaos_leases.Call, chaos_leases.unbegun_attempts

    calls = [
        Call("e-1", 0, 100.0, 1, 0, "w1"),
        Call("e-1", 0, 3_800.0, 3, 3_700, "w2"),  # attempt 2's lease began at 2,700
        Call("e-2", 0, 6_100.0, 2, 6_000, "w2"),  # attempt 1's lease began at 5,000
        Call("e-3", 0, 200.0, 1, 0, "w2"),
        Call("e-3", 0, 9_600.0, 3, 9_500, "w2"),  # attempt 2's lease began at 8,500
    ]
    kills = {"w1": 2_800.0}  # while w1 could hold e-1's attempt 2
    unbegun = unbegun_attempts(calls, kills, lease_ms=1_000, crash_ms=(8_000.0, 1_000.0))

    assert (unbegun.spent, unbegun.unexplained) == (3, 1)
    assert unbegun.examples == [
        "e-2: attempt 1 began no handler, its lease from 5000; calls: attempt 2 on w2 due 6000"
    ]
    # Without the crash, e-3's gap is unexplained too; a kill 1.1 s after e-2's lease began
    # (more than a renewal period and half a lease) explains nothing.
    unbegun = unbegun_attempts(calls, {**kills, "w3": 6_100.0}, lease_ms=1_000, crash_ms=None)
    assert unbegun.unexplained == 2
    # e-2's attempt 1 was given back unbegun by its worker, held up past its lease: its
    # worker's warning explains it.
    unbegun = unbegun_attempts(
        calls, kills, lease_ms=1_000, crash_ms=(8_000.0, 1_000.0), lapsed_not_begun={("e-2", 1)}
    )
    assert (unbegun.spent, unbegun.held_up, unbegun.unexplained) == (3, 1, 0)


@pytest.mark.backends("standalone")
async def test_the_unbegun_counter_reads_what_a_held_up_worker_gave_back(
    chaos_leases: ModuleType,
    redis_client: RedisClient,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker that gives back attempts whose leases may have ended before their handlers
    began names each in its warning (id and attempt, up to NAMED_IN_A_WARNING of them): the
    chaos run reads them back from the worker's stderr."""
    leases = Leases(redis_client, lease_ms=1_000)
    store = QueueStore(
        redis_client, QueueLayout("chaos", "PaymentCheck").all_keys[0], "PaymentCheck"
    )
    held = leases.hold(
        store,
        [
            Envelope.parse(
                '{"p":"{}","v":1,"attempt":2}', event_type="PaymentCheck", event_id=f"e-{n}"
            )
            for n in range(NAMED_IN_A_WARNING + 5)
        ],
        0,
        sent_at=0.0,
    )
    caplog.set_level(logging.WARNING, logger="aioqueue")
    await leases.give_back_lapsed(held, time.monotonic())
    stderr = "\n".join(record.getMessage() for record in caplog.records)
    (tmp_path / "w0-1.stderr").write_text(f"something else\n{stderr}\n")

    named = chaos_leases.read_lapsed_not_begun(tmp_path)
    assert named == {(f"e-{n}", 2) for n in range(NAMED_IN_A_WARNING)}
    assert "and 5 more" in stderr
