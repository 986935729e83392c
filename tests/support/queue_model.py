"""A model of one queue, driven against the real scripts (aioqueue._wire.store.QueueStore,
exactly as the library runs them): each operation of tests/test_properties.py runs on Redis
and on the model, checking what Redis answers; tests/support/queue_model_check.py then compares all
of Redis with the model.

Time is made deterministic by the only two leases and delays used: 0 (due at once: for a
lease, the worker is lost and its lease has already run out) and one hour (never due during
a test).

The lease protocol (aioqueue/_delivery/leases.py, lua/_leases.lua):
dispatch counts an attempt provisionally, the claim spends it (the envelope is marked
`claimed`), a delivery no worker claimed within its lease spends nothing, a worker renews
what it holds and gives back what it cannot finish. The model counts the handler calls begun
(claims, less the ones given back unbegun) apart from the attempt, and the check after every
step holds the two together: attempts counted = handler calls begun. Every claim leaves its
receipt, as a consumer's does: a claim whose reply is lost, sent again later, hands out what
it took and still holds, and takes nothing more (claim receipts in lua/_leases.lua).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import orjson

from aioqueue._model.rate_limit import RateLimit
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import DueTime, cancel, enqueue_items, reschedule
from aioqueue._wire.browse import inspect_event
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue._wire.pausing import pause, resume
from aioqueue._wire.rate_limits import set_rate_limit
from aioqueue._wire.settings_marks import mark_recorded
from aioqueue._wire.store import (
    Claimed,
    ClaimReceipt,
    DispatchResult,
    GivenBack,
    QueueStore,
    renew_leases,
)
from tests.support.common import SteppedRedis
from tests.support.queue_model_walk import Walk, take_page

EVENT_TYPE = "Prop"
KEYS = QueueKeys.for_type("prop", EVENT_TYPE)
LAYOUT = QueueLayout("prop", EVENT_TYPE)
HOUR_MS = 3_600_000
MODEL_TAKER = "model"
"""Names the model's claim receipts, as a consumer's taker names its own."""
MAX_ATTEMPTS = 2
# Large enough that every dispatch takes every due event: which ones a smaller batch takes
# depends on millisecond ties between scores, which a model cannot know.
BATCH_SIZE = 1000
READY_CAPACITY = 100_000


@dataclass(frozen=True)
class Step:
    """One operation and every argument it may use; each operation reads only its own."""

    operation: str
    event_id: str
    payload: str
    delay_ms: int
    """Enqueue delay, or retry delay of a failure."""
    lease_ms: int
    count: int
    """How many deliveries a claim asks for."""
    index: int
    """Which held delivery a settlement picks (modulo how many are held)."""


@dataclass
class Pending:
    """What the model knows of a pending event."""

    payload: str
    version: int
    attempt: int
    due_now: bool
    generation: int
    """Changes whenever the stored envelope's text changes; a ready-list copy is current
    only while its generation is the event's."""
    error: str | None = None
    under_way: bool = False
    """An attempt was dispatched and is not settled (its envelope carries `due_at`): the
    event cannot be rescheduled, even once its lease ended (due_now: the next dispatch takes
    it again, or parks it and so ends that attempt)."""
    since: int | None = None
    """A debounced event's series start, as stored."""
    claimed: bool = False
    """The attempt under way was claimed (handed to a worker): it is spent, and its lease
    is the worker's to renew."""
    begun: int = 0
    """Handler calls begun for this version: claims, less those given back unbegun."""
    parked: bool = False
    """Due, but set aside by dispatch because another event holds its serial key. Parking
    rewrites the envelope: copies in the ready list go stale, and an attempt under way (a
    lost worker's, due again) ends."""


@dataclass(frozen=True)
class Copy:
    """An entry of the ready list: the delivery of one generation of an event."""

    event_id: str
    generation: int


@dataclass
class LostClaim:
    """A claim whose reply was lost, to be sent again: what it asked, and the generation
    each event it took had then (it hands out again those still of that generation)."""

    receipt: ClaimReceipt
    count: int
    lease_ms: int
    taken: dict[str, int]
    superseded: bool = False
    """A later claim was made: sent now, it is a late copy and takes nothing."""


@dataclass(frozen=True)
class Held:
    """A delivery a handler holds: what it will settle."""

    envelope: Envelope


class QueueModel(SteppedRedis):
    """The model of one queue, and the real one it drives and checks."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.store = QueueStore(self.client, KEYS, EVENT_TYPE)
        self.pending: dict[str, Pending] = {}
        self.dead: dict[str, Pending] = {}
        """Dead event id -> the event as it died, `error` set."""
        self.ready: list[Copy] = []
        self.held: list[Held] = []
        self.sequence = 0
        self.generations = 0
        self.paused = False
        self.rate_limit: int | None = None
        """Claims allowed per hour (the window never moves during a test), or None."""
        self.starts = 0
        """Claims handed out while a limit was recorded: the rate window's content."""
        self.serial = False
        """Whether the payload field `n` is recorded as the type's serial key."""
        self.walk: Walk | None = None
        """A walk through pending() in progress (tests/support/queue_model_walk.py)."""
        self.receipts = (ClaimReceipt(MODEL_TAKER, token) for token in itertools.count())
        self.lost_claim: LostClaim | None = None
        """The last claim, if it took events and its reply was lost."""
        self.recorded: bool | None = None
        """Whether the type's settings are marked recorded (settings_marks.py), which every
        dispatch then checks; None until record_settings, and dispatches do not check."""

    def _new_generation(self) -> int:
        self.generations += 1
        return self.generations

    def _moved(self, *event_ids: str) -> None:
        """These events were written, moved or removed: a walk in progress may miss them."""
        if self.walk is not None:
            self.walk.moved.update(event_ids)

    def _schedule(
        self, event_id: str, payload: str, delay_ms: int, since: int | None = None
    ) -> None:
        self._moved(event_id)
        self.sequence += 1
        self.pending[event_id] = Pending(
            payload=payload,
            version=self.sequence,
            attempt=0,
            due_now=delay_ms == 0,
            generation=self._new_generation(),
            since=since,
        )

    # -- producing ---------------------------------------------------------------------------

    def apply(self, step: Step) -> None:
        """Runs one step against Redis and the model, checking what Redis answers."""
        operation = step.operation
        if operation in ("enqueue", "replace"):
            self.enqueue(step.event_id, step.payload, step.delay_ms, replace=operation == "replace")
        elif operation == "shared":
            self.enqueue_shared(step)
        elif operation == "debounce":
            # max_wait 0 or an hour, like the delays: the bound makes it due now, or not.
            self.debounce(step.event_id, step.payload, step.delay_ms, max_wait_ms=step.lease_ms)
        elif operation == "reschedule":
            self.reschedule(step.event_id, step.delay_ms)
        elif operation == "pause":
            self.pause()
        elif operation == "resume":
            self.resume()
        elif operation == "limit":
            self.limit(None if step.count == 4 else 2 * step.count)
        elif operation == "serial":
            self.toggle_serial_key()
        elif operation == "cancel":
            self.cancel(step.event_id)
        elif operation == "requeue":
            self.requeue(step.event_id)
        elif operation == "dispatch":
            self.dispatch(step.lease_ms)
        elif operation == "claim":
            self.claim(step.count, step.lease_ms)
        elif operation == "lost-reply":
            self.claim(step.count, step.lease_ms, reply_lost=True)
        elif operation == "claim-again":
            # Asking for 0 to 3: a repeat ignores it. A stopping consumer asks for none.
            self.claim_again(step.count - 1)
        elif operation == "batch":
            self.settle_batch(step.index, step.delay_ms, step.lease_ms)
        elif operation == "browse":
            # Pages of one or two events: a few events make a walk of several pages, with
            # other operations between them.
            self.browse(1 + step.count // 3)
        elif operation == "legacy":
            self.rewrite_with_long_keys(step.event_id)
        elif operation == "lose":
            self.lose_data()
        elif self.held:
            self.settle(operation, step.index, step.payload, step.delay_ms)
        self._note_unparked()
        if self.walk is not None and operation != "browse":
            self.next_page()

    def _note_unparked(self) -> None:
        """An event that settled freed its serial key and put the earliest event parked on it
        back in the schedule, due (at its parked time): which one, among score ties, the
        server knows. That nothing stays parked for good is checked after every step."""
        if any(event.parked for event in self.pending.values()):
            scheduled = set(self.run(self.client.zrange(KEYS.schedule, 0, -1)))
            for event_id, event in self.pending.items():
                if event.parked and event_id.encode() in scheduled:
                    event.parked, event.due_now = False, True
                    self._moved(event_id)

    def enqueue(self, event_id: str, payload: str, delay_ms: int, *, replace: bool) -> None:
        item = EnqueueItem(event_id, payload, "{}", delay_ms, absolute=False)
        [scheduled] = self.run(
            enqueue_items(self.client, KEYS, EVENT_TYPE, [item], mode=WriteMode(replace=replace))
        )
        assert scheduled is self._enqueued(event_id, payload, delay_ms, replace=replace)

    def _enqueued(self, event_id: str, payload: str, delay_ms: int, *, replace: bool) -> bool:
        """What one enqueue does to the model: schedules the event unless it is pending and
        the enqueue does not replace; whether it did (what the script answers)."""
        scheduled = replace or event_id not in self.pending
        if scheduled:
            self._schedule(event_id, payload, delay_ms)
        return scheduled

    def enqueue_shared(self, step: Step) -> None:
        """`step.count` enqueues in one script call, as concurrent callers share one (the
        service's coalescer, a SyncProducer's threads): the same as those enqueues one after
        another, in order, each with its own answer; an id the call holds twice is kept
        pending the second time unless the call replaces. The ids are taken in turn from the
        pending ones and the step's (from `step.index`); a lease of 0 makes it a replacing
        call (a third of them)."""
        known = sorted({*self.pending, step.event_id})
        ids = [known[(step.index + k) % len(known)] for k in range(step.count)]
        replace = step.lease_ms == 0
        items = [EnqueueItem(id_, step.payload, "{}", step.delay_ms, absolute=False) for id_ in ids]
        scheduled = self.run(
            enqueue_items(self.client, KEYS, EVENT_TYPE, items, mode=WriteMode(replace=replace))
        )
        expected = [
            self._enqueued(event_id, step.payload, step.delay_ms, replace=replace)
            for event_id in ids
        ]
        assert scheduled == expected

    def debounce(self, event_id: str, payload: str, delay_ms: int, *, max_wait_ms: int) -> None:
        """A replacement bounded by max_wait: a pending version that no handler took (not
        dispatched, or its current copy still in the ready list) passes its series start on;
        otherwise a new series starts now."""
        before = self.pending.get(event_id)
        unclaimed = before is not None and (
            not before.under_way
            or any(c.event_id == event_id and c.generation == before.generation for c in self.ready)
        )
        item = EnqueueItem(event_id, payload, "{}", delay_ms, absolute=False)
        [scheduled] = self.run(
            enqueue_items(
                self.client,
                KEYS,
                EVENT_TYPE,
                [item],
                mode=WriteMode(replace=True, max_wait_ms=max_wait_ms),
            )
        )
        assert scheduled
        since = envelope_fields(cast("bytes", self.run(self.client.hget(KEYS.events, event_id))))[
            "since"
        ]
        if before is not None and unclaimed and before.since is not None:
            assert since == before.since, "a debounce series lost its start"
        elif before is not None and before.since is not None:
            assert since >= before.since
        self._schedule(event_id, payload, 0 if max_wait_ms == 0 else delay_ms, since)

    def reschedule(self, event_id: str, delay_ms: int) -> None:
        due = DueTime(delay_ms, absolute=False, due_in=0.0)
        outcome = self.run(reschedule(self.client, LAYOUT, event_id, due))
        event = self.pending.get(event_id)
        if event is None:
            assert outcome == "missing"
        elif event.under_way:
            assert outcome == "in_flight"
        else:
            assert outcome == "moved"
            self._moved(event_id)
            event.due_now = delay_ms == 0  # only the score moves: copies stay current
            event.parked = False  # a parked event is back in the schedule

    def pause(self) -> None:
        """Deliveries waiting in the ready list go back to the schedule, uncounted."""
        returned = self.run(pause(self.client, LAYOUT))
        current = [
            copy
            for copy in self.ready
            if copy.event_id in self.pending
            and self.pending[copy.event_id].generation == copy.generation
        ]
        assert returned == len(current)
        for copy in current:
            self._moved(copy.event_id)
            event = self.pending[copy.event_id]
            event.attempt -= 1
            event.due_now = True  # back at its own due time, which had passed
            event.under_way = False
            event.generation = self._new_generation()
        self.ready = []
        self.paused = True

    def resume(self) -> None:
        assert self.run(resume(self.client, LAYOUT)) is self.paused
        self.paused = False

    def limit(self, per_hour: int | None) -> None:
        limit = None if per_hour is None else RateLimit(per_hour, HOUR_MS)
        self.run(set_rate_limit(self.client, LAYOUT, limit))
        self.rate_limit = per_hour

    def toggle_serial_key(self) -> None:
        """Serial keys on or off; what is parked stays parked until its key's holder settles."""
        self.serial = not self.serial
        if self.serial:
            self.run(self.client.set(KEYS.serial_field, "n"))
        else:
            self.run(self.client.delete(KEYS.serial_field))

    def record_settings(self) -> None:
        """Records the type's settings as a service that handles it does (serial field, rate
        limit, then the mark); from then on every dispatch checks the mark."""
        if self.serial:
            self.run(self.client.set(KEYS.serial_field, "n"))
        if self.rate_limit is not None:
            self.run(set_rate_limit(self.client, LAYOUT, RateLimit(self.rate_limit, HOUR_MS)))
        self.run(mark_recorded(self.client, LAYOUT))
        self.recorded = True

    def lose_data(self) -> None:
        """The server loses its data (FLUSHALL, a restart without persistence): events, dead
        letters, the pause, the rate window and the settings go; the next dispatch must take
        nothing, and the model then records the settings again as a service does. Only while
        no handler holds a delivery: what an old handler's settle does to the new data (the
        version counter starts again) is not something the library promises."""
        if self.held or self.recorded is None:
            return
        self._moved(*self.pending)
        self.run(self.client.flushdb())
        self.pending.clear()
        self.dead.clear()
        self.ready.clear()
        self.sequence = 0
        self.paused = False
        self.starts = 0
        self.recorded = False
        self.lost_claim = None  # its receipt is gone too: sent again, it claims anew

    def _room(self) -> int | None:
        return None if self.rate_limit is None else self.rate_limit - self.starts

    def cancel(self, event_id: str) -> None:
        removed = self.run(cancel(self.client, KEYS, event_id))
        assert removed is (event_id in self.pending)
        self.pending.pop(event_id, None)
        self._moved(event_id)

    def requeue(self, event_id: str) -> None:
        outcome = self.run(self.store.requeue(event_id))
        if event_id not in self.dead:
            assert outcome == "missing"
        elif event_id in self.pending:
            assert outcome == "pending"
        else:
            assert outcome == "requeued"
            self._schedule(event_id, self.dead.pop(event_id).payload, 0)

    def rewrite_with_long_keys(self, event_id: str) -> None:
        """Rewrites the event's stored envelope and dead letter with `payload` and `version`,
        as aioqueue 0.1 wrote them: nothing the model knows may change. An event with a copy
        in the ready list is left alone: a copy and the stored text it must equal are always
        written together, by one release."""
        if any(copy.event_id == event_id for copy in self.ready):
            return
        long_keys = {"p": "payload", "v": "version"}
        for key in (KEYS.events, KEYS.dead_letters):
            raw = cast("bytes | None", self.run(self.client.hget(key, event_id)))
            if raw is not None:
                fields = {
                    long_keys.get(name, name): value for name, value in envelope_fields(raw).items()
                }
                self.run(self.client.hset(key, event_id, orjson.dumps(fields)))

    # -- dispatching and claiming -------------------------------------------------------------

    def dispatch(self, lease_ms: int) -> None:
        # What parking rewrote is told from the stored text before and after (_dispatch_some).
        before = cast("dict[bytes, bytes]", self.run(self.client.hgetall(KEYS.events)))
        result = self.run(
            self.store.dispatch(
                batch_size=BATCH_SIZE,
                lease_ms=lease_ms,
                max_attempts=MAX_ATTEMPTS,
                ready_capacity=READY_CAPACITY,
                check_recorded=self.recorded is not None,
            )
        )
        if self.recorded is False:
            assert result.unrecorded
            assert (result.dispatched, result.buried, result.parked) == (0, 0, 0)
            self.record_settings()
            return
        assert not result.unrecorded
        due = [
            event_id
            for event_id, event in self.pending.items()
            if event.due_now and not event.parked
        ]
        if self.paused:
            assert (result.dispatched, result.buried, result.parked) == (0, 0, 0)
            return
        room = self._room()
        if room is not None and room - len(self.ready) < len(due):
            self._dispatch_some(result, due, max(0, room - len(self.ready)), lease_ms, before)
            return
        if self.serial:
            self._dispatch_some(result, due, None, lease_ms, before)
            return
        pushed: list[str] = []
        buried = extended = 0
        self._moved(*due)  # each one is pushed, extended or buried
        for event_id in due:
            event = self.pending[event_id]
            if event.under_way and not event.claimed:
                # No worker claimed it within its lease: nothing is spent. Its copy in the
                # ready list is rewritten beside the envelope (another lease, its place
                # kept); without one it is pushed again.
                event.due_now = lease_ms == 0
                event.generation = self._new_generation()
                copies = [i for i, copy in enumerate(self.ready) if copy.event_id == event_id]
                if copies:
                    self.ready[copies[0]] = Copy(event_id, event.generation)
                    extended += 1
                else:
                    pushed.append(event_id)
                continue
            if event.attempt >= MAX_ATTEMPTS:
                self._bury(event_id, self._last_error(event))
                buried += 1
                continue
            if event.claimed:
                event.error = lapsed_error(event.attempt)
                event.claimed = False
            event.attempt += 1
            event.due_now = lease_ms == 0
            event.under_way = True
            event.generation = self._new_generation()
            pushed.append(event_id)
        assert (result.dispatched, result.buried, result.extended) == (
            len(pushed),
            buried,
            extended,
        )
        # The order of one dispatch's pushes follows the scores' millisecond ties, which the
        # model does not know: take the server's order, after checking it is these events.
        tail = self.ready_ids()[len(self.ready) :]
        assert sorted(tail) == sorted(pushed)
        self.ready += [Copy(event_id, self.pending[event_id].generation) for event_id in tail]

    @staticmethod
    def _last_error(event: Pending) -> str:
        """The error an event out of attempts is buried with by dispatch."""
        if event.claimed:
            return lapsed_error(event.attempt)
        return event.error or f"out of attempts after attempt {event.attempt}"

    def _dispatch_some(
        self,
        result: DispatchResult,
        due: list[str],
        taken: int | None,
        lease_ms: int,
        before: dict[bytes, bytes],
    ) -> None:
        """A rate limit let dispatch take only `taken` of the due events (the earliest by
        score), or serial keys parked some of them (all but the earliest of each free key):
        score ties are milliseconds the model does not know, so the server's state says which
        went to the ready list, which to the dead letters and which were parked (`before`
        holds the stored envelopes from before the call). That the choice kept one event per
        key under way is checked after every step."""
        stored = cast("dict[bytes, bytes]", self.run(self.client.hgetall(KEYS.events)))
        scheduled = self.run(self.client.zrange(KEYS.schedule, 0, -1))
        parked = set()
        pushed = []
        extended = 0
        for event_id in due:
            event = self.pending[event_id]
            raw = stored.get(event_id.encode())
            if raw is None:
                assert event.attempt >= MAX_ATTEMPTS, f"{event_id} vanished"
                assert not (event.under_way and not event.claimed), "an unclaimed one buried"
                self._bury(event_id, self._last_error(event))
            elif event_id.encode() not in scheduled:
                assert "parked" in envelope_fields(raw), f"{event_id} left the schedule unparked"
                self._park(event_id)
                event.parked = True
                parked.add(event_id)
            elif raw != before.get(event_id.encode()) and "parked" in envelope_fields(raw):
                # Parked and back in the same call (see below): rewritten all the same.
                self._park(event_id)
            elif raw == before.get(event_id.encode()):
                continue  # not taken by this call
            elif event.under_way and not event.claimed:
                # Unclaimed within its lease: another lease where its copy waits, or pushed
                # again (see dispatch).
                self._moved(event_id)
                event.due_now = lease_ms == 0
                event.generation = self._new_generation()
                copies = [i for i, copy in enumerate(self.ready) if copy.event_id == event_id]
                if copies:
                    self.ready[copies[0]] = Copy(event_id, event.generation)
                    extended += 1
                else:
                    pushed.append(event_id)
            elif envelope_fields(raw).get("attempt", 0) == event.attempt + 1:
                self._moved(event_id)
                if event.claimed:
                    event.error = lapsed_error(event.attempt)
                    event.claimed = False
                event.attempt += 1
                event.due_now = lease_ms == 0
                event.under_way = True
                event.generation = self._new_generation()
                pushed.append(event_id)
        assert len(pushed) == result.dispatched
        assert extended == result.extended
        if taken is not None:
            assert result.dispatched + result.buried + result.parked + result.extended == taken
        # Parked and back in the same call (its key was freed by a burial or a replacement
        # that moved to another key) counts as parked, and is due again.
        assert len(parked) <= result.parked
        tail = self.ready_ids()[len(self.ready) :]
        assert sorted(tail) == sorted(pushed)
        self.ready += [Copy(event_id, self.pending[event_id].generation) for event_id in tail]

    def _park(self, event_id: str) -> None:
        """Dispatch parked the event on its serial key: the envelope it rewrote (`parked`,
        `serial`) leaves every copy in the ready list stale, and an attempt under way, a lost
        worker's whose lease ended, is over (its `due_at` dropped: it may not run beside the
        key's holder). Its attempt count stays: parking spends none."""
        self._moved(event_id)
        event = self.pending[event_id]
        if event.claimed:
            event.error = lapsed_error(event.attempt)
            event.claimed = False
        event.under_way = False
        event.generation = self._new_generation()

    def claim(
        self,
        count: int,
        lease_ms: int,
        acknowledge: Sequence[Envelope] = (),
        *,
        reply_lost: bool = False,
    ) -> None:
        """Takes up to `count` deliveries, acknowledging `acknowledge` first in the same
        call (what a consumer's claim does with the successes of its last handler calls).
        With `reply_lost`, no handler receives them (until the call is sent again)."""
        receipt = next(self.receipts)
        claimed = self.run(
            self.store.claim(count, lease_ms=lease_ms, acknowledge=acknowledge, receipt=receipt)
        )
        envelopes = self._claimed(claimed, count, lease_ms, acknowledge, reply_lost=reply_lost)
        # Every claim leaves its receipt: a lost one sent again now would take nothing.
        if self.lost_claim is not None:
            self.lost_claim.superseded = True
        if reply_lost:
            taken = {envelope.id: self.pending[envelope.id].generation for envelope in envelopes}
            self.lost_claim = LostClaim(receipt, count, lease_ms, taken)

    def _claimed(
        self,
        claimed: Claimed,
        count: int,
        lease_ms: int,
        acknowledge: Sequence[Envelope],
        *,
        reply_lost: bool,
    ) -> list[Envelope]:
        """Checks a claim's reply against the model and takes it in; what it handed out."""
        for envelope in acknowledge:
            if self._is_current(envelope):
                del self.pending[envelope.id]
                self._moved(envelope.id)
        if self.paused:
            assert (claimed.paused, claimed.envelopes) == (True, [])
            return []
        room = self._room()
        if room is not None and room < count:
            count = room
            if count < 1:
                assert claimed.limited_until_ms is not None
                assert claimed.envelopes == []
                return []
        popped, self.ready = self.ready[:count], self.ready[count:]
        current = [
            copy
            for copy in popped
            if copy.event_id in self.pending
            and self.pending[copy.event_id].generation == copy.generation
        ]
        envelopes = [Envelope.parse(raw, event_type=EVENT_TYPE) for raw in claimed.envelopes]
        assert [envelope.id for envelope in envelopes] == [copy.event_id for copy in current]
        for envelope in envelopes:
            self._moved(envelope.id)  # to the end of its lease
            event = self.pending[envelope.id]
            assert (envelope.version, envelope.attempt) == (event.version, event.attempt)
            assert envelope.payload == event.payload
            event.due_now = lease_ms == 0
            # The claim marks the stored envelope: every other copy of it is stale.
            event.claimed = True
            event.begun += 1
            event.generation = self._new_generation()
            if not reply_lost:
                self.held.append(Held(envelope))
        if self.rate_limit is not None:
            self.starts += len(envelopes)
        return envelopes

    def claim_again(self, count: int) -> None:
        """The claim whose reply was lost, sent again asking for `count`: it takes nothing
        new, whatever it asks and the ready list holds, and hands out those it took that it
        still holds (not settled, replaced, cancelled, parked, nor dispatched again after the
        lease lapsed), each on the attempt it spent then, whether the type is paused or
        rate-limited now or not. Once a later claim was made it is a copy the server runs
        late, and hands out nothing. (A consumer that stops between tries sends it asking for
        none, and gives back what it hands out: the hand-back step.)"""
        if self.lost_claim is None:
            return
        lost, self.lost_claim = self.lost_claim, None
        claimed = self.run(self.store.claim(count, lease_ms=lost.lease_ms, receipt=lost.receipt))
        still_held = [
            event_id
            for event_id, generation in lost.taken.items()
            if not lost.superseded
            and event_id in self.pending
            and self.pending[event_id].generation == generation
        ]
        envelopes = [Envelope.parse(raw, event_type=EVENT_TYPE) for raw in claimed.envelopes]
        assert [envelope.id for envelope in envelopes] == still_held
        for envelope in envelopes:
            event = self.pending[envelope.id]
            assert (envelope.version, envelope.attempt) == (event.version, event.attempt)
            assert envelope.payload == event.payload
            self.held.append(Held(envelope))

    def browse(self, page_size: int) -> None:
        """Begins a walk through pending() (or takes the next page of the one in progress),
        and inspecting finds each event as the model has it."""
        if self.walk is not None:
            self.next_page()
            return
        for event_id, event in self.pending.items():
            info = self.run(inspect_event(self.client, LAYOUT, event_id))
            assert info is not None
            assert (info.attempt, info.payload, info.last_error) == (
                event.attempt, event.payload, event.error
            )  # fmt: skip
            if event.parked:
                assert info.state == "parked"
            elif event.due_now:
                assert info.state == "due"
        for event_id in self.dead.keys() - self.pending.keys():  # else inspect shows the pending
            info = self.run(inspect_event(self.client, LAYOUT, event_id))
            assert info is not None
            assert info.state == "dead"
        in_schedule = {event_id for event_id, event in self.pending.items() if not event.parked}
        self.walk = Walk(page_size, in_schedule)
        self.next_page()

    def next_page(self) -> None:
        assert self.walk is not None
        if take_page(self, self.walk):
            self.walk = None

    def finish_walk(self) -> None:
        """Takes the remaining pages of a walk in progress, with nothing in between."""
        while self.walk is not None:
            self.next_page()

    # -- settling ----------------------------------------------------------------------------

    def _is_current(self, envelope: Envelope) -> bool:
        event = self.pending.get(envelope.id)
        return event is not None and event.version == envelope.version

    def settle(self, outcome: str, index: int, payload: str, delay_ms: int) -> None:
        """A handler finishes one of the held deliveries, its worker dies, or a producer
        changes the event while the handler still holds it."""
        held = self.held[index % len(self.held)].envelope
        if outcome == "replace-held":
            self.enqueue(held.id, payload, delay_ms, replace=True)
            return
        if outcome == "cancel-held":
            self.cancel(held.id)
            return
        if outcome == "extend-held":  # the worker renews its lease (0 or an hour)
            self.renew(held, delay_ms)
            return
        self.held.remove(Held(held))
        if outcome == "success":
            self.succeed(held)
        elif outcome == "crash":
            pass  # nothing is settled: only the lease the claim set remains
        elif outcome == "hand-back":  # its worker stops before the handler began
            self.hand_back(held, cut_off=None)
        elif outcome == "cut-off":  # its worker stops after its grace, the handler cut off
            self.hand_back(held, cut_off=f"attempt {held.attempt} was cut off")
        else:
            # With retry 0 or an hour, like the leases.
            self.fail(held, delay_ms, bury=outcome == "undecodable")

    def settle_batch(self, failures: int, retry_ms: int, lease_ms: int) -> None:
        """A batch handler's outcome for every held delivery at once: those whose position
        has its bit set in `failures` failed (each settled on its own, retried after
        `retry_ms`), the others succeeded, and are acknowledged by the batch's next claim,
        which takes as many as the batch held in the same call."""
        batch, self.held = [held.envelope for held in self.held], []
        succeeded = []
        for position, envelope in enumerate(batch):
            if failures >> position & 1:
                self.fail(envelope, retry_ms, bury=False)
            else:
                succeeded.append(envelope)
        self.claim(max(1, len(batch)), lease_ms, acknowledge=succeeded)

    def succeed(self, envelope: Envelope) -> None:
        deleted = self.run(self.store.acknowledge([envelope]))
        assert deleted == (1 if self._is_current(envelope) else 0)
        if deleted:
            del self.pending[envelope.id]
            self._moved(envelope.id)

    def _holds(self, envelope: Envelope) -> bool:
        """Whether the claimed attempt `envelope` is still the one under way: not settled,
        replaced, cancelled, parked, nor taken again after its lease lapsed."""
        event = self.pending.get(envelope.id)
        return (
            event is not None
            and event.under_way
            and event.claimed
            and (event.version, event.attempt) == (envelope.version, envelope.attempt)
        )

    def renew(self, envelope: Envelope, lease_ms: int) -> None:
        """Only the attempt still under way may be renewed: never another version, nor an
        attempt dispatched again or settled meanwhile."""
        held = self._holds(envelope)
        renewal = self.store.renewal([envelope], lease_ms)
        [lost] = self.run(renew_leases(self.client, [renewal]))
        assert lost == ([] if held else [1])
        if held:
            self._moved(envelope.id)
            self.pending[envelope.id].due_now = lease_ms == 0

    def hand_back(self, envelope: Envelope, *, cut_off: str | None) -> None:
        """A stopping worker gives the attempt back, due now: uncounted when no handler began
        it (its count is what it was before the claim), spent when its handler was cut off."""
        held = self._holds(envelope)
        given = self.run(self.store.hand_back([GivenBack(envelope, cut_off)]))
        assert given == (1 if held else 0)
        if not held:
            return
        self._moved(envelope.id)
        event = self.pending[envelope.id]
        if cut_off is None:
            event.attempt -= 1
            event.begun -= 1
        else:
            event.error = cut_off
        event.claimed = event.under_way = False
        event.due_now = True
        event.generation = self._new_generation()

    def fail(self, envelope: Envelope, retry_ms: int, *, bury: bool) -> None:
        error = f"failed attempt {envelope.attempt} of version {envelope.version}"
        outcome = self.run(
            self.store.fail(
                envelope, error, retry_delay_ms=retry_ms, max_attempts=MAX_ATTEMPTS, bury=bury
            )
        )
        event = self.pending.get(envelope.id)
        if not self._is_current(envelope) or (event and event.attempt != envelope.attempt):
            # Replaced or cancelled, or taken again by another worker after this attempt's
            # lease lapsed.
            assert outcome == "stale"
            return
        self._moved(envelope.id)
        event = self.pending[envelope.id]
        if bury or event.attempt >= MAX_ATTEMPTS:
            assert outcome == "dead"
            self._bury(envelope.id, error)
        else:
            assert outcome == "retry"
            event.error = error
            event.due_now = retry_ms == 0
            event.under_way = event.claimed = False
            # A lost attempt parked since: its retry is scheduled, out of the parked set.
            event.parked = False
            event.generation = self._new_generation()

    def _bury(self, event_id: str, error: str) -> None:
        self._moved(event_id)
        event = self.pending.pop(event_id)
        event.error = error
        self.dead[event_id] = event

    # -- what Redis must hold after every step ----------------------------------------------
    def ready_ids(self) -> list[str]:
        raws = cast("list[bytes]", self.run(self.client.lrange(KEYS.ready, 0, -1)))
        return [envelope_fields(raw)["id"] for raw in raws]


def lapsed_error(attempt: int) -> str:
    """What dispatch.lua records for an attempt whose claimed lease lapsed."""
    return (
        f"attempt {attempt} was lost: its worker stopped renewing the lease (it died, or lost "
        "its connection to Redis) before the handler finished"
    )


def envelope_fields(raw: bytes) -> dict[str, Any]:
    """An envelope's fields as docs/wire-format.md describes them."""
    fields = orjson.loads(raw)
    assert isinstance(fields, dict), raw
    return fields


@contextmanager
def queue_model(url: str) -> Iterator[QueueModel]:
    model = QueueModel(url)
    try:
        yield model
    finally:
        model.close()
