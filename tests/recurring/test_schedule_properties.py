"""Property-based: any interleaving of keepers produces each tick at most once, in order.

Hypothesis interleaves several keepers of one schedule, each reading the record at its own
moments (so it may act on a stale read), producing ticks as ScheduleKeeper does (through
the misfire policy: each keeper has its own), a redeclaration with another spec, a producer
that takes tick events out (handled), and downtimes (every service away for hours or weeks:
the record's latest tick lies far in the past). After every step, on a real server: no
tick was produced twice, produced ticks only go forward, the record's tick is the latest
produced since the last declaration, a changed spec left no pending tick of the old one,
and a catch-up produced exactly the latest missed ticks its policy allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from aioqueue._producing.enqueue_calls import EnqueueItem
from aioqueue._recurring.misfire import Misfire, ticks_to_produce
from aioqueue._recurring.records import (
    ScheduleRecord,
    declare,
    produce_tick,
    read_record,
)
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedServer
from tests.support.common import SteppedRedis, server_time_ms
from tests.support.properties import property_settings

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
        st.sampled_from(
            ["read", "read", "produce", "produce", "produce", "declare", "handle", "downtime"]
        ),
        st.integers(min_value=0, max_value=3),  # keeper
        st.integers(min_value=0, max_value=1),  # spec
        st.integers(min_value=1, max_value=24 * 60),  # downtime, in hours
    ),
    min_size=10,
    max_size=40,
)


@dataclass
class Keeper:
    misfire: Misfire
    max_catch_up: int
    seen: ScheduleRecord | None = None


class Model(SteppedRedis):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        # Services that declared the schedule with different policies.
        self.keepers = [
            Keeper("all", 3), Keeper("once", 100), Keeper("all", 10_000), Keeper("skip", 100)
        ]  # fmt: skip
        self.since_declared: list[int] = []
        self.spec = SPECS[0]
        self.run(declare(self.client, "prop", "Beat", "beat", self.spec))

    def apply(self, operation: str, keeper_index: int, spec_index: int, hours: int) -> None:
        keeper = self.keepers[keeper_index]
        if operation == "read" or (operation == "produce" and keeper.seen is None):
            keeper.seen = self.run(read_record(self.client, KEYS, "beat"))
        elif operation == "produce":
            self.produce(keeper)
        elif operation == "declare":
            outcome, _ = self.run(declare(self.client, "prop", "Beat", "beat", SPECS[spec_index]))
            if SPECS[spec_index] != self.spec:
                assert outcome == self.spec
                self.spec = SPECS[spec_index]
                self.since_declared = []
                # The old spec's tick still to come is gone (ticks a catch-up made due stay).
                now = self.run(server_time_ms(self.client))
                assert self.run(self.client.zcount(KEYS.schedule, f"({now}", "+inf")) == 0
        elif operation == "downtime":
            self.go_down(hours)
        else:  # handle: a consumer took every tick event out
            self.run(self.client.delete(KEYS.events, KEYS.schedule))

    def go_down(self, hours: int) -> None:
        """Every service was away: the tick events were handled long ago, and the latest
        tick produced lies `hours` back (rounded to the spec's ticks)."""
        self.run(self.client.delete(KEYS.events, KEYS.schedule))
        record = self.run(read_record(self.client, KEYS, "beat"))
        assert record is not None
        spec = ScheduleSpec.from_key(record.spec)
        latest = spec.latest_at_or_before(record.now - hours * HOUR_MS)
        assert latest is not None
        raw = self.run(self.client.hget(KEYS.schedules, "beat"))
        assert raw is not None
        stored = orjson.loads(raw)
        stored.update(tick=latest, tick_id=f"beat-{latest}", produced_at=latest)
        self.run(self.client.hset(KEYS.schedules, "beat", orjson.dumps(stored)))
        self.since_declared = [latest]

    def produce(self, keeper: Keeper) -> None:
        """What ScheduleKeeper._step does with the keeper's (possibly stale) read; a read
        whose tick is still to come is tried as well, which the script must refuse."""
        seen = keeper.seen
        assert seen is not None
        keeper.seen = None
        spec = ScheduleSpec.from_key(seen.spec)
        # Current: the record is still what the keeper read. A read from before a change
        # can be current again (the spec changed and changed back, and the same tick was
        # produced since, or a downtime brought the latest tick back to the one read): the
        # script cannot tell it from a fresh read, and need not, for the record is the same.
        stored = self.run(read_record(self.client, KEYS, "beat"))
        current = stored is not None and (stored.spec, stored.tick, stored.token) == (
            seen.spec, seen.tick, seen.token,
        )  # fmt: skip
        if seen.tick is not None and seen.tick > seen.now:
            ticks = [next(spec.ticks_after(seen.tick))]
        else:
            ticks = ticks_to_produce(
                spec, seen.tick, seen.now, keeper.misfire, keeper.max_catch_up
            ).ticks
            if current:
                assert ticks == self.expected_ticks(spec, seen, keeper)
        previous = seen.tick
        for tick in ticks:
            item = EnqueueItem(f"beat-{tick}", "{}", "{}", tick, absolute=True)
            outcome, record = self.run(
                produce_tick(self.client, KEYS, "beat", seen.spec, previous, tick, item, seen.token)
            )
            if current and previous is not None and previous > seen.now:
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
            if outcome not in ("produced", "kept"):
                return
            previous = tick

    @staticmethod
    def expected_ticks(spec: ScheduleSpec, seen: ScheduleRecord, keeper: Keeper) -> list[int]:
        """The ticks the policy allows, counted forward from the latest produced (the slow
        way the keeper no longer takes, for a downtime of at most 60 days of hourly ticks)."""
        if seen.tick is None:
            return [next(spec.ticks_after(seen.now))]
        missed = []
        for tick in spec.ticks_after(seen.tick):
            if tick > seen.now:
                upcoming = tick
                break
            missed.append(tick)
        if not missed:
            return [upcoming]
        if keeper.misfire == "skip":
            return [upcoming]
        return missed[-(1 if keeper.misfire == "once" else keeper.max_catch_up) :]


# Found by random sequences, shrunk: reads from before a change that are current again.
# Keeper 0 reads the record and its next tick, the spec changes and changes back, and keeper
# 2 produces that same tick again: keeper 0's read is the record as it is, the tick still to
# come. Or the spec changes and back, and a downtime brings the latest tick back to the one
# keeper 0 read: it produces the next tick, once.
COME_BACK_AFTER_TWO_CHANGES = [
    ("read", 0, 0, 1), ("produce", 0, 0, 1), ("read", 0, 0, 1), ("declare", 0, 1, 1),
    ("declare", 0, 0, 1), ("read", 2, 0, 1), ("produce", 2, 0, 1), ("produce", 0, 0, 1),
]  # fmt: skip
COME_BACK_AFTER_A_DOWNTIME = [
    ("read", 0, 0, 1), ("downtime", 0, 0, 1), ("read", 0, 0, 1), ("declare", 0, 1, 1),
    ("declare", 0, 0, 1), ("downtime", 0, 0, 1), ("produce", 0, 0, 1),
]  # fmt: skip


@pytest.mark.timeout(300)
@property_settings(100, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
@example(steps=COME_BACK_AFTER_TWO_CHANGES)
@example(steps=COME_BACK_AFTER_A_DOWNTIME)
def test_keepers_never_produce_a_tick_twice(
    redis_server: EmbeddedServer, steps: list[tuple[str, int, int, int]]
) -> None:
    model = Model(redis_server.url)
    try:
        for operation, keeper, spec, hours in steps:
            model.apply(operation, keeper, spec, hours)
            record = model.run(read_record(model.client, KEYS, "beat"))
            assert record is not None
            assert record.spec == model.spec
            if model.since_declared:
                assert record.tick == model.since_declared[-1]
    finally:
        model.close()
