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

The model is four modules: its state (queue_model_state.py), dispatch and claims
(queue_model_claims.py), settlements (queue_model_settling.py), and here the producing
operations, browsing, and the step that picks each operation (QueueModel.apply).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import orjson

from aioqueue._model.rate_limit import RateLimit
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import DueTime, cancel, enqueue_items, reschedule
from aioqueue._wire.browse import inspect_event
from aioqueue._wire.pausing import pause, resume
from aioqueue._wire.rate_limits import set_rate_limit
from tests.support.queue_model_claims import Claiming
from tests.support.queue_model_settling import Settling
from tests.support.queue_model_state import (
    EVENT_TYPE,
    HOUR_MS,
    KEYS,
    LAYOUT,
    Held,
    Step,
    envelope_fields,
)
from tests.support.queue_model_walk import Walk, take_page


class QueueModel(Claiming, Settling):
    """The model of one queue, and the real one it drives and checks."""

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
        elif operation == "settle-again":
            if self.settled:
                self.settle_again(step.index, step.delay_ms)
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

    def lose_data(self) -> None:
        """The server loses its data (FLUSHALL, a restart without persistence): events, dead
        letters, the pause, the rate window and the settings go; the next dispatch must take
        nothing, and the model then records the settings again as a service does. Only while
        no handler holds a delivery: what an old handler's settle does to the new data (the
        version counter starts again) is not something the library promises. For the same
        reason the settlements made before it are not sent again after it (a random run
        sent a failure of version 1, attempt 1 again, and it met the new event `a` at
        version 1, attempt 1)."""
        if self.held or self.recorded is None:
            return
        self.settled.clear()
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
        if outcome == "crash":
            return  # nothing is settled: only the lease the claim set remains
        self.settled.append((outcome, held))
        # A failure is retried after 0 or an hour, like the leases.
        self.settle_as(outcome, held, delay_ms)

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


@contextmanager
def queue_model(url: str) -> Iterator[QueueModel]:
    model = QueueModel(url)
    try:
        yield model
    finally:
        model.close()
