"""Settling what handlers ended, through Redis errors (settle, which failures' records use
too), and acknowledgements sent on their own: concurrent successes of one partition share a
call.

Most acknowledgements ride the consumer's next claim instead (see Consumer); these are the
ones that would otherwise wait for a claim that is not coming soon."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from aioqueue._transport.coalescer import Coalescer
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import QueueStore

__all__ = ["SETTLE_TIMEOUT", "Acknowledger", "NotSettledError", "settle"]

T = TypeVar("T")

# Acknowledgements run shielded from shutdown (the coalescer shields its flushes), so a
# handler that finished is not delivered again just because the service was closing; the
# bound keeps a dead server from stalling it.
SETTLE_TIMEOUT = 5.0
# Events per acknowledge call: a consumer never has more out than its parallelism anyway.
MAX_BATCH = 500


class NotSettledError(Exception):
    """A settlement (an acknowledgement, a failure's record) that did not reach Redis within
    SETTLE_TIMEOUT; its text says why."""


async def settle(call: Callable[[], Awaitable[T]], what: str) -> T:
    """Runs `call`, a settlement of attempts a handler ended, until it succeeds: after a Redis
    error it is tried again at once (a pooled connection that died with a server restart),
    then after the loops' backoff (ErrorBackoff, logged as `what` failing), for up to
    SETTLE_TIMEOUT in all; then raises NotSettledError.

    Trying again is safe because a settlement acts only on the attempt it names, while that
    attempt is the stored one (acknowledge_deliveries and fail.lua): one that lands after the
    event was taken again does nothing. And it is worth it: a settlement given up leaves the
    attempt to lapse, delivered again and spent, while the server may be back within
    seconds (a restart, a Sentinel or cluster failover) with the attempt still its own."""
    problem = f"no answer within {SETTLE_TIMEOUT:g} s"
    backoff: ErrorBackoff | None = None  # made on a second error only: most calls succeed
    with anyio.move_on_after(SETTLE_TIMEOUT):
        for tries in itertools.count():
            try:
                result = await call()
            except REDIS_ERRORS as exc:
                problem = f"{type(exc).__name__}: {exc}"
                if tries:
                    backoff = backoff or ErrorBackoff(what)
                    await backoff.sleep_after(exc)
                continue
            if backoff is not None:
                backoff.reset()
            return result
    raise NotSettledError(problem)


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
        event_type = self._store.event_type
        try:
            await settle(
                lambda: self._store.acknowledge(envelopes), f"acknowledging {event_type} events"
            )
        except NotSettledError as exc:
            # Not acknowledged: the pre-scheduled retries deliver them again (at-least-once).
            logger.warning(
                "could not acknowledge %d %s events, they will be delivered again: %s",
                len(envelopes),
                event_type,
                exc,
            )
        return [None] * len(envelopes)
