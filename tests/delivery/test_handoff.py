"""Handoff: deliveries reach idle workers, waking no more of them than the handlers need."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aioqueue._delivery.handoff import Handoff


@pytest.mark.parametrize("pauses", [False, True])
async def test_items_reach_workers_and_only_pausing_handlers_spread_over_them(
    pauses: bool,
) -> None:
    handoff: Handoff[int | None] = Handoff()
    handled_by: dict[int, int] = {}
    release, all_started = anyio.Event(), anyio.Event()

    async def worker(number: int) -> None:
        while (item := await handoff.get()) is not None:
            handled_by[item] = number
            if len(handled_by) == 3:
                all_started.set()
            if pauses:
                await release.wait()

    async with anyio.create_task_group() as workers:
        for number in range(3):
            workers.start_soon(worker, number)
        await anyio.wait_all_tasks_blocked()
        for item in range(3):
            handoff.put(item)
        with anyio.fail_after(5):
            await all_started.wait()
        release.set()
        for _ in range(3):
            handoff.put(None)
    assert sorted(handled_by) == [0, 1, 2]
    # Handlers that never pause run back to back in the first worker woken; handlers that
    # pause get a worker each.
    assert len(set(handled_by.values())) == (3 if pauses else 1)


async def test_cancelling_a_worker_just_woken_loses_no_item() -> None:
    """A worker woken for an item and cancelled before it runs either still takes the item
    (anyio delivers the cancellation at its next pause) or passes the wake-up on."""
    handoff: Handoff[int] = Handoff()
    taken: list[int] = []
    first_scope = anyio.CancelScope()

    async def first() -> None:
        with first_scope:
            taken.append(await handoff.get())
            await anyio.sleep_forever()

    async def second() -> None:
        taken.append(await handoff.get())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as workers:
            workers.start_soon(first)
            await anyio.wait_all_tasks_blocked()
            workers.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            handoff.put(7)  # wakes the first waiter...
            first_scope.cancel()  # ...which is cancelled before it has run
            handoff.put(8)
    assert sorted(taken) == [7, 8]


async def test_a_worker_cancelled_natively_after_its_wake_up_passes_it_on() -> None:
    """asyncio's own cancellation reaches a task even when its future is already resolved:
    the next waiting worker must get the item instead."""
    handoff: Handoff[int] = Handoff()
    first = asyncio.ensure_future(handoff.get())
    second = asyncio.ensure_future(handoff.get())
    await anyio.wait_all_tasks_blocked()
    handoff.put(7)  # wakes the first waiter...
    first.cancel()  # ...which is cancelled before it has run
    with anyio.fail_after(5):
        assert await second == 7
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_worker_cancelled_just_before_an_item_arrives_leaves_the_handoff_working() -> None:
    """Cancelling a waiting worker cancels its wake-up future at once; an item put before the
    worker runs again makes the hand-off discard that future, and the worker must not fail
    looking for it (it raised ValueError from deque.remove)."""
    handoff: Handoff[int] = Handoff()
    waiting = asyncio.ensure_future(handoff.get())
    await asyncio.sleep(0)  # now waiting on its future
    waiting.cancel()
    handoff.put(1)  # discards the cancelled future before the worker runs
    with pytest.raises(asyncio.CancelledError):
        await waiting
    with anyio.fail_after(1):
        assert await handoff.get() == 1
