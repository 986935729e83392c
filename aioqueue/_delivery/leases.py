"""The lease protocol, client side: the attempts a service holds, renewed while held and given
back when the service stops.

An attempt is spent when a worker claims it (claim.lua marks it `claimed`), and from then on
it is the worker's for one lease: its schedule score is the lease's end. A live worker renews
the leases of everything it holds every third of the lease, in one pipelined call for all its
queues, so a lease can be a few seconds while a handler runs as long as its handler timeout;
a worker that dies or loses Redis stops renewing, and its events are due again within one
lease. A handler begins only while its worker knows the lease still runs (Lease.held_until):
one held up past it gives the event back instead, since another worker may have taken it
again by then. A stopping worker gives back at once what no handler began (the attempt
uncounted) and, once its grace is over, what its handlers were cut off in (the attempt
spent). The scripts, and the rules they follow, are in lua/_leases.lua.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence

import anyio
import msgspec

from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import ErrorBackoff, logger
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import GivenBack, QueueStore, renew_leases

from .acknowledger import SETTLE_TIMEOUT, NotSettledError, settle

__all__ = [
    "HAND_BACK_TIMEOUT",
    "NOT_BEGUN_AFTER_LAPSE",
    "RENEWALS_PER_LEASE",
    "Lease",
    "Leases",
]

# A lease is renewed this many times over its length, so that one renewal lost with a
# connection, or a loop that stalled for a moment, still leaves time for the next.
RENEWALS_PER_LEASE = 3
# A hand-back runs while the service stops, shielded, and is tried again through Redis
# errors as a settlement is (a restart, a failover); this bounds it when Redis stays gone (the
# attempts then come back when their leases end, as a dead worker's would).
HAND_BACK_TIMEOUT = SETTLE_TIMEOUT
# Events a warning of leases that lapsed before their handlers began names (a batch's are
# hundreds): as many as a chaos run's batch holds, whose analysis reads them.
NAMED_IN_A_WARNING = 20
# What that warning says of them, after their ids and attempts.
NOT_BEGUN_AFTER_LAPSE = "not begun: their leases may have ended"


class Lease(msgspec.Struct, gc=False, eq=False):
    """One attempt this service holds, from its claim until it is settled or given back.

    Compared and hashed by identity (eq=False: held in sets). One is made per event, and
    the garbage collector does not track it (gc=False): a lease refers to its queue's store
    and its envelope, neither of which refers back to a lease, so it is part of no cycle."""

    store: QueueStore
    envelope: Envelope
    claimed_at_ms: int
    """When it was claimed, on the server's clock (ms)."""
    claimed_at: float
    """When it was claimed, on this process's monotonic clock."""
    held_until: float
    """Until when (monotonic) the lease surely runs: one lease from when the call that
    claimed it, or that last renewed it, was sent, since the server ran that call no
    earlier. No handler begins it later (see Leases.give_back_lapsed): by then the lease
    may have ended and the event be another worker's."""
    claimed_late: float
    """Seconds between the attempt's due time and its claim, on the server's clock: what
    the metrics report (exact, and what a rate limit counts). Worked out once, when the
    lease is made (see claimed_late()): a batch's runner, its metrics and its records read
    it for every event."""
    started: float | None = None
    """When (monotonic) its handler began; None while none has."""

    def lapsed(self, now: float) -> bool:
        """Whether a handler beginning at `now` (monotonic) might begin after the lease ended
        (see held_until): it must not begin; the event is given back."""
        return now >= self.held_until

    def lateness(self, now: float) -> float:
        """Seconds between the attempt's due time and `now` (monotonic)."""
        return max(0.0, (self.claimed_at_ms - self.envelope.due_at) / 1000 + now - self.claimed_at)


def claimed_late(envelope: Envelope, claimed_at_ms: int) -> float:
    """Seconds between the attempt's due time and its claim at `claimed_at_ms` (server ms)."""
    return max(0.0, (claimed_at_ms - envelope.due_at) / 1000)


class Leases:
    """The attempts one service holds, by queue."""

    def __init__(self, client: RedisClient, lease_ms: int) -> None:
        self._client = client
        self._lease_ms = lease_ms
        self._held: dict[QueueStore, set[Lease]] = {}

    def hold(
        self,
        store: QueueStore,
        envelopes: Sequence[Envelope],
        claimed_at_ms: int,
        sent_at: float,
    ) -> list[Lease]:
        """The attempts one claim took, whose call was first sent at `sent_at` (monotonic):
        renewed from now on, each until end()."""
        now = time.monotonic()
        held_until = sent_at + self._lease_ms / 1000
        leases = [
            Lease(
                store,
                envelope,
                claimed_at_ms,
                now,
                held_until,
                claimed_late(envelope, claimed_at_ms),
            )
            for envelope in envelopes
        ]
        held = self._held.get(store)
        if held is None:
            held = self._held[store] = set()
        held.update(leases)
        return leases

    def end(self, lease: Lease) -> None:
        """The attempt is settled (or given back): no more renewals."""
        held = self._held.get(lease.store)
        if held is not None:
            held.discard(lease)

    def end_all(self, store: QueueStore, leases: Sequence[Lease]) -> None:
        """end() of each of `leases`, all of the queue at `store` (one claim's successes)."""
        held = self._held.get(store)
        if held is not None:
            held.difference_update(leases)

    def __len__(self) -> int:
        return sum(len(held) for held in self._held.values())

    def held_in(self, stores: Sequence[QueueStore]) -> int:
        """How many attempts of these queues (one type's partitions) are held."""
        return sum(len(self._held.get(store, ())) for store in stores)

    async def run(self) -> None:
        """Renews every held lease each third of the lease, until cancelled."""
        period = self._lease_ms / 1000 / RENEWALS_PER_LEASE
        errors = ErrorBackoff("renewing leases")
        while True:
            await anyio.sleep(period)
            # After a failure, again as soon as the backoff allows rather than a period later:
            # the leases are running out.
            while not await errors.attempt(self.renew):
                pass

    async def renew(self) -> None:
        """Renews what is held now, in one pipeline; forgets what is no longer this
        service's (settled elsewhere, cancelled, replaced, or taken again after its lease
        lapsed: its handler may still run, but nothing it settles counts)."""
        batches = [(store, list(held)) for store, held in self._held.items() if held]
        if not batches:
            return
        renewals = [
            store.renewal([lease.envelope for lease in leases], self._lease_ms)
            for store, leases in batches
        ]
        held_until = time.monotonic() + self._lease_ms / 1000
        replies = await renew_leases(self._client, renewals)
        for (store, leases), lost in zip(batches, replies, strict=True):
            for lease in leases:
                lease.held_until = held_until
            for position in lost:
                lease = leases[position - 1]
                lease.held_until = -math.inf  # not to be begun: it is someone else's
                self.end(lease)
                logger.info(
                    "%s %r (attempt %d) is no longer this worker's: settled, cancelled or "
                    "replaced elsewhere, or taken again after its lease ran out",
                    store.event_type,
                    lease.envelope.id,
                    lease.envelope.attempt,
                )

    async def give_back_lapsed(self, leases: Sequence[Lease], now: float) -> None:
        """Gives back, uncounted, claimed attempts whose handlers were about to begin after
        their leases may have ended (`now` is past `held_until`): this process was held up
        longer than a lease since it claimed or last renewed them (a loop blocked, a machine
        starved of CPU, Redis out of reach), and the server may have handed them to another
        worker meanwhile. Begun here, a handler would then run beside that worker's, two
        calls of one serial key at once. The hand-back gives back only what is still this
        service's (see hand_back.lua): an event taken again elsewhere is left to its new
        worker."""
        overdue = now - min(lease.held_until for lease in leases)
        named = ", ".join(
            f"{lease.envelope.id!r} (attempt {lease.envelope.attempt})"
            for lease in leases[:NAMED_IN_A_WARNING]
        )
        more = len(leases) - NAMED_IN_A_WARNING
        logger.warning(
            f"%s %s%s {NOT_BEGUN_AFTER_LAPSE} before their handlers could begin (%s; this "
            "process was held up, or Redis out of reach, since it claimed or last renewed "
            "them); given back",
            leases[0].envelope.event_type,
            named,
            f" and {more} more" if more > 0 else "",
            "taken again elsewhere" if math.isinf(overdue) else f"{overdue:.3g} s ago",
        )
        await self.hand_back(leases)

    async def hand_back(self, leases: Sequence[Lease], cut_off: str | None = None) -> None:
        """Gives `leases` back, due now (shielded; each queue's call tried again through Redis
        errors for up to HAND_BACK_TIMEOUT, as settlements are): with `cut_off`, why their
        handlers were cut off (the attempts are spent); without, no handler began them (their
        attempts are not counted). Queues are given back to at once, so that the bound holds
        for all of them."""
        by_store: dict[QueueStore, list[GivenBack]] = {}
        for lease in leases:
            self.end(lease)
            by_store.setdefault(lease.store, []).append(GivenBack(lease.envelope, cut_off))
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for store, given in by_store.items():
                    group.start_soon(give_back_to, store, given)


async def give_back_to(store: QueueStore, given: list[GivenBack]) -> None:
    """Gives `given` back to `store` (hand_back.lua), tried again like a settlement: a
    hand-back that lands twice gives back once, as it acts only on the attempt it names while
    that attempt is claimed and under way. Given up, the attempts come back when their leases
    end, as a dead worker's would, spent."""
    try:
        await settle(
            functools.partial(store.hand_back, given), f"giving back {store.event_type} events"
        )
    except NotSettledError as exc:
        logger.warning(
            "could not give back %d %s events; they come back when their leases end: %s",
            len(given),
            store.event_type,
            exc,
        )
