"""What the queue model (tests/support/queue_model.py) knows, and the bookkeeping its
operations share: the steps, each pending event, the ready list's copies, the claim whose
reply was lost, the deliveries handlers hold.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import orjson

from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue._wire.store import ClaimReceipt, QueueStore
from tests.support.common import SteppedRedis
from tests.support.queue_model_walk import Walk

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


class ModelState(SteppedRedis):
    """The model's state, with the Redis it drives; the operations are its subclasses'
    (queue_model_claims.py, queue_model_settling.py, queue_model.py)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.store = QueueStore(self.client, KEYS, EVENT_TYPE)
        self.pending: dict[str, Pending] = {}
        self.dead: dict[str, Pending] = {}
        """Dead event id -> the event as it died, `error` set."""
        self.ready: list[Copy] = []
        self.held: list[Held] = []
        self.settled: list[tuple[str, Envelope]] = []
        """The settlements made of held deliveries (outcome, delivery), to send again."""
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

    def _room(self) -> int | None:
        return None if self.rate_limit is None else self.rate_limit - self.starts

    def _is_current(self, envelope: Envelope) -> bool:
        event = self.pending.get(envelope.id)
        return event is not None and event.version == envelope.version

    def _is_delivered_attempt(self, envelope: Envelope) -> bool:
        """Whether an acknowledgement of `envelope` deletes its event: still its version and
        attempt (not replaced, nor taken again after its lease lapsed)."""
        event = self.pending.get(envelope.id)
        return event is not None and (event.version, event.attempt) == (
            envelope.version,
            envelope.attempt,
        )

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

    def _bury(self, event_id: str, error: str) -> None:
        self._moved(event_id)
        event = self.pending.pop(event_id)
        event.error = error
        self.dead[event_id] = event

    def ready_ids(self) -> list[str]:
        raws = cast("list[bytes]", self.run(self.client.lrange(KEYS.ready, 0, -1)))
        return [envelope_fields(raw)["id"] for raw in raws]


def envelope_fields(raw: bytes) -> dict[str, Any]:
    """An envelope's fields as docs/wire-format.md describes them."""
    fields = orjson.loads(raw)
    assert isinstance(fields, dict), raw
    return fields
