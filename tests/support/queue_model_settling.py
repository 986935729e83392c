"""How the queue model's held deliveries are settled (see tests/support/queue_model.py):
acknowledged, renewed, given back by a stopping worker (unbegun, or cut off), failed and
retried or buried. Which settlement a step makes, and a batch handler's outcome for all it
holds, are QueueModel.settle and settle_batch.
"""

from __future__ import annotations

from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import GivenBack, renew_leases
from tests.support.queue_model_state import MAX_ATTEMPTS, ModelState


class Settling(ModelState):
    """Settlements, run on Redis and on the model."""

    def succeed(self, envelope: Envelope) -> None:
        deleted = self.run(self.store.acknowledge([envelope]))
        assert deleted == (1 if self._is_delivered_attempt(envelope) else 0)
        if deleted:
            del self.pending[envelope.id]
            self._moved(envelope.id)

    def settle_again(self, index: int, retry_ms: int) -> None:
        """A settlement (a success, a failure, a bury, a hand-back unbegun or cut off) sent
        again, as a worker does after a Redis error: its first call's reply was lost, or it
        lands once the server is back from an outage, while the event may have been taken
        again, replaced, cancelled or settled since. It acts only on the attempt it names
        while that attempt is the stored one: succeed, fail and hand_back check what Redis
        answers."""
        outcome, envelope = self.settled[index % len(self.settled)]
        self.settle_as(outcome, envelope, retry_ms)

    def settle_as(self, outcome: str, envelope: Envelope, retry_ms: int) -> None:
        """Settles held delivery `envelope` as `outcome` says: "success", "hand-back" (its
        worker stops, or is held up past the lease, before the handler began), "cut-off"
        (its worker stops after its grace, the handler cut off), else a failure retried after
        `retry_ms` ("undecodable": buried at once)."""
        if outcome == "success":
            self.succeed(envelope)
        elif outcome == "hand-back":
            self.hand_back(envelope, cut_off=None)
        elif outcome == "cut-off":
            self.hand_back(envelope, cut_off=f"attempt {envelope.attempt} was cut off")
        else:
            self.fail(envelope, retry_ms, bury=outcome == "undecodable")

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
