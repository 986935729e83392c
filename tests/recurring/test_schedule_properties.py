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
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aioqueue._producing.enqueue_calls import EnqueueItem
from aioqueue._recurring.misfire import Misfire, ticks_to_produce
from aioqueue._recurring.names import NameEntry, claim_name, read_entry, settle
from aioqueue._recurring.records import (
    ScheduleRecord,
    after_gone,
    claim_floor,
    declare,
    declare_record,
    fence,
    list_schedules,
    make_live,
    produce_tick,
    read_record,
    read_stored,
    still_owned,
)
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedServer
from tests.support.common import SteppedRedis, server_time_ms

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
    declaration: int = 0
    """Which declaration the keeper's read saw."""


class Model(SteppedRedis):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        # Services that declared the schedule with different policies.
        self.keepers = [
            Keeper("all", 3), Keeper("once", 100), Keeper("all", 10_000), Keeper("skip", 100)
        ]  # fmt: skip
        self.since_declared: list[int] = []
        self.spec = SPECS[0]
        self.declaration = 0
        self.run(declare(self.client, "prop", "Beat", "beat", self.spec))

    def apply(self, operation: str, keeper_index: int, spec_index: int, hours: int) -> None:
        keeper = self.keepers[keeper_index]
        if operation == "read" or (operation == "produce" and keeper.seen is None):
            keeper.seen = self.run(read_record(self.client, KEYS, "beat"))
            keeper.declaration = self.declaration
        elif operation == "produce":
            self.produce(keeper)
        elif operation == "declare":
            outcome, _ = self.run(declare(self.client, "prop", "Beat", "beat", SPECS[spec_index]))
            if SPECS[spec_index] != self.spec:
                assert outcome == self.spec
                self.spec = SPECS[spec_index]
                self.declaration += 1
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
        current = keeper.declaration == self.declaration and (
            seen.tick == (self.since_declared[-1] if self.since_declared else seen.tick)
        )
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


@pytest.mark.timeout(300)
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(steps=STEPS)
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


# -- one name, two event types: moves and removals on Redis Cluster's terms ------------------
#
# A move or removal is a claim in the name directory, then fences and a declaration in the
# types' own slots (a record written pending, the directory read again, the record made
# live), then a settle (aioqueue/_recurring/names.py): on a cluster those are separate
# calls, and anything may happen between them. So each mover here takes one
# step at a time, two movers overlap, either may stop for good at any step (a process that
# died), and keepers of both types read, produce and check ownership in between. A type's
# slot may lose its data (its node failed over to an empty replica): a keeper that then
# reads no live record declares the name again where records.after_gone says so, as a
# mover of its own. After every step: at most one type holds a live record, schedules()
# lists exactly that one, no type without a live record has a tick still to come, a tick is
# only produced by the live record's keepers, and once every mover finished, with none dead
# half-way and no loss since the claim of the last one to finish, the directory names the
# live type (or none, after a removal): a loss neither revives a removed name nor, once a
# keeper declared it again, leaves it unheld.

TYPES = ("Beat", "Other")
TYPE_KEYS = {event_type: QueueKeys.for_type("prop", event_type) for event_type in TYPES}
NAME_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["move", "move", "move", "read", "produce", "check", "die", "lose"]),
        st.integers(min_value=0, max_value=2),  # mover, or keeper
        st.sampled_from([*TYPES, None]),  # a mover's target type (None: remove the name)
    ),
    min_size=10,
    max_size=50,
)


@dataclass
class Mover:
    """One declaration (or removal) in progress: its claim's token and what is left to do."""

    target: str | None
    token: int
    to_fence: list[str]
    claimed_at: int
    """The model's step count at the claim."""
    declared: bool = False
    pending: bool = False
    """Its record was written pending: it reads the directory, then makes it live (or not)."""
    entry: NameEntry | bool | None = False
    """The directory's entry as it read it after its record was written (False: not yet)."""


@dataclass
class TypedKeeper:
    event_type: str
    seen: ScheduleRecord | None = None


class NameModel(SteppedRedis):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.movers: list[Mover | None] = [None, None, None]
        self.keepers = [TypedKeeper("Beat"), TypedKeeper("Other"), TypedKeeper("Beat")]
        self.run(declare(self.client, "prop", "Beat", "beat", SPECS[0]))
        self.steps = 0
        self.last_death = -1
        self.settled = True
        """The last mover to finish claimed after every mover that died half-way."""
        self.owner: str | None = "Beat"
        """The target of the latest claim: the type meant to hold the name (None: removed)."""

    def apply(self, operation: str, index: int, target: str | None) -> None:
        self.steps += 1
        if operation == "move":
            self.step_mover(index, target)
        elif operation == "die":
            if self.movers[index] is not None:
                # Its process is gone, whatever it had left to do.
                self.movers[index] = None
                self.last_death = self.steps
                self.settled = False
        elif operation == "lose":
            keys = TYPE_KEYS[TYPES[index % len(TYPES)]]
            self.run(self.client.delete(keys.schedules, keys.schedule, keys.events))
            self.last_death = self.steps
            self.settled = False
        else:
            self.keeper_step(operation, self.keepers[index])

    def step_mover(self, index: int, target: str | None) -> None:
        mover = self.movers[index]
        if mover is None:
            floor = (
                0
                if target is None
                else self.run(claim_floor(self.client, TYPE_KEYS[target], "beat"))
            )
            token, stale = self.run(claim_name(self.client, "prop", "beat", target, floor))
            self.movers[index] = Mover(target, token, stale, claimed_at=self.steps)
            self.owner = target
        elif mover.to_fence:
            stale_type = mover.to_fence.pop(0)
            self.run(fence(self.client, TYPE_KEYS[stale_type], "beat", mover.token))
        elif mover.target is not None and not mover.declared:
            keys = TYPE_KEYS[mover.target]
            _, record = self.run(declare_record(self.client, keys, "beat", SPECS[0], mover.token))
            mover.declared = True
            mover.pending = record is not None and record.pending
        elif mover.pending and mover.entry is False:
            mover.entry = self.run(read_entry(self.client, "prop", "beat"))
        elif mover.pending:
            assert mover.target is not None
            assert not isinstance(mover.entry, bool)
            keys = TYPE_KEYS[mover.target]
            self.run(make_live(self.client, keys, "beat", mover.target, mover.token, mover.entry))
            mover.pending = False
        else:
            self.run(settle(self.client, "prop", "beat", mover.token))
            self.movers[index] = None
            self.settled = mover.claimed_at > self.last_death

    def keeper_step(self, operation: str, keeper: TypedKeeper) -> None:
        keys = TYPE_KEYS[keeper.event_type]
        if operation == "read" or keeper.seen is None:
            stored = self.run(read_stored(self.client, keys, "beat"))
            if isinstance(stored, ScheduleRecord) and not stored.pending:
                keeper.seen = stored
                return
            keeper.seen = None
            if isinstance(stored, ScheduleRecord):  # pending: as keeper.py, no record at all
                stored = None
            again, _ = self.run(after_gone(self.client, "prop", keeper.event_type, "beat", stored))
            # Declared again exactly where the name is meant to be this type's: a lost record
            # or a declaration under way, never a name that was removed or moved away.
            assert again == (keeper.event_type == self.owner)
            idle = [index for index, mover in enumerate(self.movers) if mover is None]
            if again and idle:  # the keeper's service declares the name again, step by step
                self.step_mover(idle[0], keeper.event_type)
            return
        seen = keeper.seen
        if operation == "check":
            self.run(still_owned(self.client, "prop", keeper.event_type, "beat", seen))
            return
        tick = next(ScheduleSpec.from_key(seen.spec).ticks_after(seen.tick or seen.now))
        item = EnqueueItem(f"beat-{tick}", "{}", "{}", tick, absolute=True)
        live_before = self.live_types()
        outcome, _ = self.run(
            produce_tick(self.client, keys, "beat", seen.spec, seen.tick, tick, item, seen.token)
        )
        if outcome in ("produced", "kept"):
            assert live_before == [keeper.event_type], "a record that was not live fired"
        keeper.seen = None

    def live_types(self) -> list[str]:
        live = []
        for event_type in TYPES:
            if self.run(read_record(self.client, TYPE_KEYS[event_type], "beat")) is not None:
                live.append(event_type)
        return live

    def check(self) -> None:
        live = self.live_types()
        assert len(live) <= 1, f"the name is live under {live}"
        listed = self.run(list_schedules(self.client, "prop"))
        assert [(info.name, info.event_type) for info in listed] == [("beat", t) for t in live]
        now = self.run(server_time_ms(self.client))
        for event_type in set(TYPES) - set(live):
            ahead = self.run(self.client.zcount(TYPE_KEYS[event_type].schedule, f"({now}", "+inf"))
            assert ahead == 0, f"{event_type} left a tick to come without a live record"
        if self.settled and all(mover is None for mover in self.movers):
            entry = self.run(read_entry(self.client, "prop", "beat"))
            assert entry is not None
            if entry.event_type is not None and not entry.unsettled:
                assert live == [entry.event_type], "a finished move left the name unheld"
            elif entry.event_type is None and not entry.unsettled:
                assert live == [], "a finished removal left the name live"


# Found by random sequences, shrunk: mover 1 claims the name for Beat, which holds it
# already; mover 0 moves it to Other, fencing Beat; Beat's slot loses its data, tombstone and
# all; mover 1 then writes Beat's record. Written live, it stood beside Other's.
OVERTAKEN_AFTER_A_LOSS = [
    ("move", 0, "Beat"), ("move", 0, "Beat"), ("move", 0, "Beat"), ("move", 1, "Beat"),
    ("move", 2, "Beat"), ("move", 0, "Other"), ("move", 0, "Beat"), ("move", 0, "Beat"),
    ("lose", 0, "Beat"), ("move", 1, "Beat"),
]  # fmt: skip


@pytest.mark.timeout(300)
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(steps=NAME_STEPS)
@example(steps=OVERTAKEN_AFTER_A_LOSS)
def test_a_name_is_live_under_one_type_whatever_moves_interleave(
    redis_server: EmbeddedServer, steps: list[tuple[str, int, str | None]]
) -> None:
    model = NameModel(redis_server.url)
    try:
        for operation, index, target in steps:
            model.apply(operation, index, target)
            model.check()
    finally:
        model.close()
