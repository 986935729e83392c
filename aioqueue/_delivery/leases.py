"""The lease protocol, client side: the attempts a service holds, renewed while held and given
back when the service stops.

An attempt is spent when a worker claims it (claim.lua marks it `claimed`), and from then on
it is the worker's for one lease: its schedule score is the lease's end. A live worker renews
the leases of everything it holds every third of the lease, in one pipelined call for all its
queues, so a lease can be a few seconds while a handler runs as long as its handler timeout;
a worker that dies or loses Redis stops renewing, and its events are due again within one
lease. A stopping worker gives back at once what no handler began (the attempt uncounted)
and, once its grace is over, what its handlers were cut off in (the attempt spent). The
scripts, and the rules they follow, are in lua/_leases.lua.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import msgspec

from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import GivenBack, QueueStore, renew_leases

__all__ = ["HAND_BACK_TIMEOUT", "RENEWALS_PER_LEASE", "Lease", "Leases"]

# A lease is renewed this many times over its length, so that one renewal lost with a
# connection, or a loop that stalled for a moment, still leaves time for the next.
RENEWALS_PER_LEASE = 3
# A hand-back runs while the service stops, shielded; this bounds it when Redis is gone (the
# attempts then come back when their leases end, as a dead worker's would).
HAND_BACK_TIMEOUT = 5.0


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
    started: float | None = None
    """When (monotonic) its handler began; None while none has."""

    @property
    def claimed_late(self) -> float:
        """Seconds between the attempt's due time and its claim, on the server's clock: what
        the metrics report (exact, and what a rate limit counts)."""
        return max(0.0, (self.claimed_at_ms - self.envelope.due_at) / 1000)

    def lateness(self, now: float) -> float:
        """Seconds between the attempt's due time and `now` (monotonic)."""
        return max(0.0, (self.claimed_at_ms - self.envelope.due_at) / 1000 + now - self.claimed_at)


class Leases:
    """The attempts one service holds, by queue."""

    def __init__(self, client: RedisClient, lease_ms: int) -> None:
        self._client = client
        self._lease_ms = lease_ms
        self._held: dict[QueueStore, set[Lease]] = {}

    def hold(self, store: QueueStore, envelope: Envelope, claimed_at_ms: int) -> Lease:
        """A claimed attempt: renewed from now on, until end()."""
        lease = Lease(store, envelope, claimed_at_ms, time.monotonic())
        held = self._held.get(store)
        if held is None:
            held = self._held[store] = set()
        held.add(lease)
        return lease

    def end(self, lease: Lease) -> None:
        """The attempt is settled (or given back): no more renewals."""
        held = self._held.get(lease.store)
        if held is not None:
            held.discard(lease)

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
        replies = await renew_leases(self._client, renewals)
        for (store, leases), lost in zip(batches, replies, strict=True):
            for position in lost:
                lease = leases[position - 1]
                self.end(lease)
                logger.info(
                    "%s %r (attempt %d) is no longer this worker's: settled, cancelled or "
                    "replaced elsewhere, or taken again after its lease ran out",
                    store.event_type,
                    lease.envelope.id,
                    lease.envelope.attempt,
                )

    async def hand_back(self, leases: Sequence[Lease], cut_off: str | None = None) -> None:
        """Gives `leases` back, due now (shielded; bounded by HAND_BACK_TIMEOUT): with
        `cut_off`, why their handlers were cut off (the attempts are spent); without, no
        handler began them (their attempts are not counted)."""
        by_store: dict[QueueStore, list[GivenBack]] = {}
        for lease in leases:
            self.end(lease)
            by_store.setdefault(lease.store, []).append(GivenBack(lease.envelope, cut_off))
        with anyio.CancelScope(shield=True), anyio.move_on_after(HAND_BACK_TIMEOUT):
            for store, given in by_store.items():
                try:
                    await store.hand_back(given)
                except REDIS_ERRORS as exc:
                    logger.warning(
                        "could not give back %d %s events; they come back when their leases "
                        "end: %s: %s",
                        len(given),
                        store.event_type,
                        type(exc).__name__,
                        exc,
                    )
