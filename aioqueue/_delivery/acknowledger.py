"""Acknowledgements sent on their own: concurrent successes of one partition share a call.

Most acknowledgements ride the consumer's next claim instead (see Consumer); these are the
ones that would otherwise wait for a claim that is not coming soon."""

from __future__ import annotations

import anyio

from aioqueue._transport.coalescer import Coalescer
from aioqueue._transport.recovery import REDIS_ERRORS, logger
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import QueueStore

__all__ = ["Acknowledger"]

# Acknowledgements run shielded from shutdown (the coalescer shields its flushes), so a
# handler that finished is not delivered again just because the service was closing; the
# bound keeps a dead server from stalling it.
SETTLE_TIMEOUT = 5.0
# Events per acknowledge call: a consumer never has more out than its parallelism anyway.
MAX_BATCH = 500


class Acknowledger:
    """Deletes the events of successful deliveries, concurrent ones in one script call.

    There is no timer: while one batch is on its way to Redis the next one fills up, so a
    quiet consumer acknowledges each event at once and a busy one sends one call for many.
    """

    def __init__(self, store: QueueStore) -> None:
        self._store = store
        self._coalescer: Coalescer[Envelope, None] = Coalescer([self.acknowledge_all], MAX_BATCH)

    async def acknowledge(self, envelope: Envelope) -> None:
        """Returns once the event is deleted, or once deleting it failed (logged; the event
        is then delivered again at its pre-scheduled attempt)."""
        await self._coalescer.submit(envelope)

    async def acknowledge_all(self, envelopes: list[Envelope]) -> list[None]:
        """Acknowledges `envelopes` in one call, as acknowledge() does one."""
        problem = f"no answer within {SETTLE_TIMEOUT:g} s"
        with anyio.move_on_after(SETTLE_TIMEOUT):
            # Deleting a version twice is harmless, so one more try is safe; it spares a
            # duplicate delivery when a pooled connection died with a server restart.
            for _ in range(2):
                try:
                    await self._store.acknowledge(envelopes)
                    return [None] * len(envelopes)
                except REDIS_ERRORS as exc:
                    problem = f"{type(exc).__name__}: {exc}"
        # Not acknowledged: the pre-scheduled retries deliver them again (at-least-once).
        logger.warning(
            "could not acknowledge %d %s events, they will be delivered again: %s",
            len(envelopes),
            self._store.event_type,
            problem,
        )
        return [None] * len(envelopes)
