"""Property-based: any interleaving of keepers produces each tick at most once, in order.

Hypothesis interleaves several keepers of one schedule, each reading the record at its own
moments (so it may act on a stale read), producing ticks, a redeclaration with another spec,
and a producer that takes tick events out (handled). After every step, on a real server:
no tick was produced twice, produced ticks only go forward, the record's tick is the latest
produced since the last declaration, and a changed spec left no pending tick of the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioqueue._engine.keys import QueueKeys
from aioqueue._engine.writes import EnqueueItem
from aioqueue._recurring.records import ScheduleRecord, declare, produce_tick, read_record
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue.testing import EmbeddedServer
from tests.support import SteppedRedis

T = TypeVar("T")
KEYS = QueueKeys.for_type("prop", "Beat")
HOUR_MS = 3_600_000
# Hourly and two-hourly ticks far in the future, so no tick's time comes during a test: the
# ticks a keeper produces are then chosen by its (possibly stale) read alone.
SPECS = [
    ScheduleSpec.of(cron=None, every=HOUR_MS / 1000, tz="UTC").key,
    ScheduleSpec.of(cron=None, every=2 * HOUR_MS / 1000, tz="UTC").key,
]
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["read", "read", "produce", "produce", "produce", "declare", "handle"]),
        st.integers(min_value=0, max_value=2),  # keeper
        st.integers(min_value=0, max_value=1),  # spec
    ),
    min_size=10,
    max_size=40,
)


@dataclass
class Keeper:
    seen: ScheduleRecord | None = None
    declaration: int = 0
    """Which declaration the keeper's read saw."""


class Model(SteppedRedis):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.keepers = [Keeper(), Keeper(), Keeper()]
        self.since_declared: list[int] = []
        self.spec = SPECS[0]
        self.declaration = 0
        self.run(declare(self.client, KEYS, "prop", "Beat", "beat", self.spec))

    def apply(self, operation: str, keeper_index: int, spec_index: int) -> None:
        keeper = self.keepers[keeper_index]
        if operation == "read" or (operation == "produce" and keeper.seen is None):
            keeper.seen = self.run(read_record(self.client, KEYS, "beat"))
            keeper.declaration = self.declaration
        elif operation == "produce":
            self.produce(keeper)
        elif operation == "declare":
            outcome, _ = self.run(
                declare(self.client, KEYS, "prop", "Beat", "beat", SPECS[spec_index])
            )
            if SPECS[spec_index] != self.spec:
                assert outcome == self.spec
                self.spec = SPECS[spec_index]
                self.declaration += 1
                self.since_declared = []
                # The old spec's pending tick is gone: nothing of it is left to fire.
                assert self.run(self.client.hlen(KEYS.events)) == 0
        else:  # handle: a consumer took every tick event out
            self.run(self.client.delete(KEYS.events, KEYS.schedule))

    def produce(self, keeper: Keeper) -> None:
        seen = keeper.seen
        assert seen is not None
        spec = ScheduleSpec.from_key(seen.spec)
        tick = next(spec.ticks_after(seen.tick if seen.tick is not None else seen.now))
        item = EnqueueItem(f"beat-{tick}", "{}", "{}", tick, absolute=True)
        outcome, record = self.run(
            produce_tick(self.client, KEYS, "beat", seen.spec, seen.tick, tick, item)
        )
        current = keeper.declaration == self.declaration and (
            seen.tick == (self.since_declared[-1] if self.since_declared else seen.tick)
        )
        if current and self.since_declared:
            # The record's tick is still to come (ticks are hours ahead): one at a time.
            assert outcome == "early"
        elif outcome in ("produced", "kept"):
            assert current, "a stale read produced a tick"
            assert tick not in self.since_declared, "a tick was produced twice"
            assert not self.since_declared or tick > self.since_declared[-1]
            self.since_declared.append(tick)
            assert record is not None
            assert record.tick == tick
        else:
            assert not current
            assert outcome in ("moved", "changed")
        keeper.seen = None


@pytest.mark.timeout(300)
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(steps=STEPS)
def test_keepers_never_produce_a_tick_twice(
    redis_server: EmbeddedServer, steps: list[tuple[str, int, int]]
) -> None:
    model = Model(redis_server.url)
    try:
        for operation, keeper, spec in steps:
            model.apply(operation, keeper, spec)
            record = model.run(read_record(model.client, KEYS, "beat"))
            assert record is not None
            assert record.spec == model.spec
            if model.since_declared:
                assert record.tick == model.since_declared[-1]
    finally:
        model.close()
