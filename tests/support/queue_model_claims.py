"""The queue model's dispatch and claims (see tests/support/queue_model.py): dispatch
counts an attempt provisionally and pushes a copy to the ready list, or parks or buries the
event; a claim spends the attempt, leaving its receipt; a claim whose reply was lost is
sent again and hands out what it took and still holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aioqueue._model.rate_limit import RateLimit
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.rate_limits import set_rate_limit
from aioqueue._wire.settings_marks import mark_recorded
from aioqueue._wire.store import Claimed, DispatchResult
from tests.support.queue_model_state import (
    BATCH_SIZE,
    EVENT_TYPE,
    HOUR_MS,
    KEYS,
    LAYOUT,
    MAX_ATTEMPTS,
    READY_CAPACITY,
    Copy,
    Held,
    LostClaim,
    ModelState,
    Pending,
    envelope_fields,
)


class Claiming(ModelState):
    """Dispatch and claims, run on Redis and on the model."""

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
                # No worker claimed it within its lease: nothing is spent.
                extended += self._lease_unclaimed_again(event_id, lease_ms, pushed)
                continue
            if event.attempt >= MAX_ATTEMPTS:
                self._bury(event_id, self._last_error(event))
                buried += 1
                continue
            self._next_attempt(event_id, lease_ms, pushed)
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
        pushed: list[str] = []
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
                self._moved(event_id)
                extended += self._lease_unclaimed_again(event_id, lease_ms, pushed)
            elif envelope_fields(raw).get("attempt", 0) == event.attempt + 1:
                self._moved(event_id)
                self._next_attempt(event_id, lease_ms, pushed)
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

    def _next_attempt(self, event_id: str, lease_ms: int, pushed: list[str]) -> None:
        """Dispatch counts the event's next attempt, provisionally, and pushes it (adds it to
        `pushed`); a claimed attempt before it lapsed with its worker."""
        event = self.pending[event_id]
        if event.claimed:
            event.error = lapsed_error(event.attempt)
            event.claimed = False
        event.attempt += 1
        event.due_now = lease_ms == 0
        event.under_way = True
        event.generation = self._new_generation()
        pushed.append(event_id)

    def _lease_unclaimed_again(self, event_id: str, lease_ms: int, pushed: list[str]) -> int:
        """An attempt no worker claimed within its lease gets another, spending nothing: its
        copy in the ready list is rewritten beside the envelope (its place kept), or, without
        one, it is pushed again (added to `pushed`). Returns 1 if a copy was rewritten."""
        event = self.pending[event_id]
        event.due_now = lease_ms == 0
        waiting = Copy(event_id, event.generation)
        event.generation = self._new_generation()
        # The copy of the stored envelope (dispatch finds it by its text), not merely the
        # first of the event's: a copy of an older version may wait before it.
        copies = [i for i, copy in enumerate(self.ready) if copy == waiting]
        if copies:
            self.ready[copies[0]] = Copy(event_id, event.generation)
            return 1
        pushed.append(event_id)
        return 0

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
            if self._is_delivered_attempt(envelope):
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

    def record_settings(self) -> None:
        """Records the type's settings as a service that handles it does (serial field, rate
        limit, then the mark); from then on every dispatch checks the mark."""
        if self.serial:
            self.run(self.client.set(KEYS.serial_field, "n"))
        if self.rate_limit is not None:
            self.run(set_rate_limit(self.client, LAYOUT, RateLimit(self.rate_limit, HOUR_MS)))
        self.run(mark_recorded(self.client, LAYOUT))
        self.recorded = True


def lapsed_error(attempt: int) -> str:
    """What dispatch.lua records for an attempt whose claimed lease lapsed."""
    return (
        f"attempt {attempt} was lost: its worker stopped renewing the lease (it died, or lost "
        "its connection to Redis) before the handler finished"
    )
