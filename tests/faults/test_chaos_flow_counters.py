"""The chaos run's serial-key counter (benchmarks/chaos_flow.py) on flow logs written by hand:
an overlap counts against the promise unless the log proves the earlier call ran past its
lease's end, which the guarantees page allows."""

from __future__ import annotations

import math
import pathlib
from types import ModuleType

import pytest

from tests.support.benchmark_scripts import import_benchmark_script


@pytest.fixture
def chaos_flow(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/chaos_flow.py: a module of a script, not of a package."""
    return import_benchmark_script(monkeypatch, "chaos_flow")


def call(event_id: str, attempt: int, due: float, claimed: float, ran: tuple[float, float]) -> str:
    """The flow log's lines for one call of a key-7 event (ms): its start, with its attempt,
    due and claim times, and its end (none when `ran` ends at infinity: its worker killed)."""
    began, ended = ran
    lines = f"S\t{event_id}\t7\t{began:.1f}\t{attempt}\t{due:.1f}\t{claimed:.1f}\n"
    return lines if ended == math.inf else lines + f"E\t{event_id}\t7\t{ended:.1f}\n"


# key-1's first call, from 1,000 to 4,000 ms: its worker stalled mid-handler.
STALLED = call("key-1", 1, 900, 1_000, ran=(1_000, 4_000))


@pytest.mark.parametrize(
    ("workers", "counted", "counted_apart"),
    [
        # key-1's lease ended at 2,000 ms, when its second attempt came due and another
        # worker took it, and key-2 of the same key was claimed after that: both later calls
        # began while the first ran, and the log proves the lease had ended before either.
        pytest.param(
            {
                "w1": STALLED,
                "w2": call("key-1", 2, 2_000, 2_005, ran=(2_010, 2_015))
                + call("key-2", 1, 500, 2_100, ran=(2_101, 2_105)),
            },
            *(0, 2),
            id="claimed after the lease ended",
        ),
        # key-2 was claimed at 1,500 ms, before the lease of key-1's running call ended (its
        # next attempt came due at 2,000): the key's hold was broken, whatever came later;
        # key-1's own second attempt, claimed after that, is excused.
        pytest.param(
            {
                "w1": STALLED,
                "w2": call("key-2", 1, 500, 1_500, ran=(1_501, 1_505))
                + call("key-1", 2, 2_000, 2_005, ran=(2_010, 2_015)),
            },
            *(1, 1),
            id="claimed before the lease ended",
        ),
        # Nothing shows key-1's lease ended: its event was not handed out again while its
        # call ran (on a worker killed at 3,000 ms, where its call ends).
        pytest.param(
            {
                "w3": call("key-1", 1, 900, 1_000, ran=(1_000, math.inf)),
                "w2": call("key-2", 1, 500, 2_100, ran=(2_101, 2_105)),
            },
            *(1, 0),
            id="event not taken again",
        ),
        # key-1's worker, stalled, was killed at 3,000 ms: its next attempt, due when its
        # lease ended (2,000), was handed out only after the kill, but key-2 was claimed
        # after that lease's end, which its due time proves.
        pytest.param(
            {
                "w3": call("key-1", 1, 900, 1_000, ran=(1_000, math.inf)),
                "w2": call("key-2", 1, 500, 2_100, ran=(2_101, 2_105))
                + call("key-1", 2, 2_000, 3_500, ran=(3_505, 3_510)),
            },
            *(0, 1),
            id="taken again after its worker's kill",
        ),
        # A failover lost the claim of key-1's first call, and the key's hold with it: the
        # same attempt was handed out again while that call ran.
        pytest.param(
            {
                "w1": STALLED,
                "w2": call("key-2", 1, 500, 2_100, ran=(2_101, 2_105))
                + call("key-1", 1, 900, 2_150, ran=(2_200, 2_210)),
            },
            *(0, 2),
            id="claim lost in a failover",
        ),
    ],
)
def test_an_overlap_counts_unless_the_log_proves_the_earlier_lease_ended(
    chaos_flow: ModuleType,
    tmp_path: pathlib.Path,
    workers: dict[str, str],
    counted: int,
    counted_apart: int,
) -> None:
    for name, text in workers.items():
        (tmp_path / f"{name}.flow").write_text(text)
    keyed = [chaos_flow.ChaosKeyed(id=f"key-{n}", due_ms=0, key=7) for n in (1, 2)]
    report = chaos_flow.analyse_flow(
        tmp_path,
        rate_limit=5,
        limited=[],
        keyed=keyed,
        handed_out={event.id for event in keyed},
        pending=set(),
        kills_ms={"w3": 3_000.0},
        restart_ms=None,
    )

    assert (report.key_overlaps, report.key_overlaps_lease_ended) == (counted, counted_apart)
    assert report.lost == 0
    assert report.keyed_calls == sum(text.count("S\t") for text in workers.values())
