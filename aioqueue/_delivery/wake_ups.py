"""Waiting for work across every queue of a service, on one connection.

A service may dispatch and consume hundreds of queues (types, partitions). Waiting on each
with a blocking command would cost a connection per queue, so it waits in-process instead,
woken by

- the messages the scripts publish (subscriber.py): a queue's `wake` channel wakes the
  dispatcher for that queue, its `ready` channel the consumer's taker of that queue;
- this service's own dispatcher, when its call pushed deliveries to a queue it consumes
  (before the message comes back);
- a sweep every scheduling interval: one pipelined call per node (peek.lua) reads the
  earliest score and the ready list's length of every queue, and wakes what is due or
  waiting. It finds what no message announced (a producer that publishes none, a message
  lost while the subscription was down) and bounds the delay by the scheduling interval,
  as the builder's setting says; idle, it costs one round trip per interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import anyio

from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff
from aioqueue._transport.subscriber import Subscriber
from aioqueue._wire.store import Peek, QueueStore, peek_queues

__all__ = ["WakeUps"]


class WakeUps:
    """The wake-ups of one service's dispatcher and consumers (see the module docstring)."""

    def __init__(
        self,
        client: RedisClient,
        interval: float,
        dispatched: Callable[[], Iterable[QueueStore]],
        wake_queue: Callable[[str], None],
        saw_earliest: Callable[[str, int | None, int], None],
    ) -> None:
        """`dispatched` gives the queues the dispatcher serves now (none without one);
        `wake_queue(schedule key)` wakes it for one queue; `saw_earliest(schedule key,
        earliest score ms or None, server now ms)` tells it what a sweep found there."""
        self._client = client
        self._interval = interval
        self._dispatched = dispatched
        self._wake_queue = wake_queue
        self._saw_earliest = saw_earliest
        self._ready: dict[str, asyncio.Event] = {}
        """Ready list key -> the event its consumer's taker waits on."""
        self._consumed: dict[str, QueueStore] = {}
        self._wake_channels: dict[str, str] = {}
        """Wake channel -> schedule key, of the queues dispatched."""
        self._subscriber = Subscriber(client, self._heard, self._resubscribed)
        self._channels_update: asyncio.Handle | None = None
        """The recomputation of the channels, while one is due (see _update_channels)."""

    def ready_event(self, store: QueueStore) -> asyncio.Event:
        """The event that is set when `store`'s ready list may hold deliveries: its taker
        clears it before each claim and waits on it when a claim found nothing."""
        event = self._ready.get(store.keys.ready)
        if event is None:
            event = self._ready[store.keys.ready] = asyncio.Event()
            self._consumed[store.keys.ready] = store
            self._update_channels()
        return event

    def forget(self, store: QueueStore) -> None:
        """`store`'s consumer stopped."""
        if self._ready.pop(store.keys.ready, None) is not None:
            del self._consumed[store.keys.ready]
            self._update_channels()

    def pushed(self, store: QueueStore) -> None:
        """This service's dispatcher pushed deliveries to `store`'s ready list."""
        event = self._ready.get(store.keys.ready)
        if event is not None:
            event.set()

    def dispatching(self) -> None:
        """The queues the dispatcher serves changed (a handler was added or removed)."""
        self._update_channels()

    def _update_channels(self) -> None:
        """Recomputes the channels once the current step of the loop is over: a service that
        adds a thousand handlers in one go then reads its queues once, not once per handler
        (which was quadratic, and held the loop for half a second at a thousand types)."""
        if self._channels_update is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a handler removed after the service stopped): now
            self._apply_channels()
            return
        self._channels_update = loop.call_soon(self._apply_channels)

    def _apply_channels(self) -> None:
        self._channels_update = None
        self._wake_channels = {store.keys.wake: store.keys.schedule for store in self._dispatched()}
        self._subscriber.set_channels(frozenset((*self._wake_channels, *self._ready)))

    async def run(self) -> None:
        """Listens and sweeps until cancelled."""
        self._apply_channels()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._subscriber.run)
            await self._sweep_forever()

    def _heard(self, channel: str) -> None:
        event = self._ready.get(channel)
        if event is not None:
            event.set()
            return
        schedule = self._wake_channels.get(channel)
        if schedule is not None:
            self._wake_queue(schedule)

    def _resubscribed(self) -> None:
        """Whatever was published while the subscription was down went unheard."""
        for event in self._ready.values():
            event.set()
        for schedule in self._wake_channels.values():
            self._wake_queue(schedule)

    async def _sweep_forever(self) -> None:
        errors = ErrorBackoff("looking for work")
        while True:
            await anyio.sleep(self._interval)
            try:
                await self.sweep()
            except REDIS_ERRORS as exc:
                await errors.sleep_after(exc)
            else:
                errors.reset()

    async def sweep(self) -> None:
        """Looks at every queue at once; wakes what is due or waiting."""
        stores = {store.keys.ready: store for store in self._dispatched()}
        stores.update(self._consumed)
        if not stores:
            return
        peeks = await peek_queues(self._client, list(stores.values()))
        for store, peek in zip(stores.values(), peeks, strict=True):
            self._note(store, peek)

    def _note(self, store: QueueStore, peek: Peek | None) -> None:
        if peek is None:
            return
        if store.keys.wake in self._wake_channels:
            self._saw_earliest(store.keys.schedule, peek.earliest_due_ms, peek.server_now_ms)
        event = self._ready.get(store.keys.ready)
        if event is not None and peek.ready_length > 0:
            event.set()
