"""Calls from many threads share a call while one is under way; each thread gets its own
result or the error of its own call, an interrupted thread passes its turn on, and a forked
child is never held by a call of its parent's. Through the SyncProducer on a real server:
tests/producing/test_sync_producer_safety.py."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioqueue._transport.thread_coalescer import ThreadCoalescer
from tests.support.common import wait_until_sync
from tests.support.properties import property_settings

KEY = "queue"
WITHIN = 10.0


class HeldSender:
    """A send function whose calls wait, while `held`, until the test releases them."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.held = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_call: int | None = None

    def __call__(self, key: str, items: list[int]) -> list[int]:
        self.calls.append(list(items))
        if self.held.is_set():
            self.entered.set()
            assert self.release.wait(WITHIN), "the test never released the call"
        if self.fail_call == len(self.calls):
            raise ConnectionError(f"call {len(self.calls)} failed")
        return [item * 10 for item in items]


def start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


class Submitter:
    """Submits one item from a thread of its own and keeps what it got."""

    def __init__(self, coalescer: ThreadCoalescer[str, int, int], item: int) -> None:
        self.result: int | None = None
        self.error: BaseException | None = None
        self.thread = start(lambda: self._run(coalescer, item))

    def _run(self, coalescer: ThreadCoalescer[str, int, int], item: int) -> None:
        try:
            self.result = coalescer.submit(KEY, item)
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.thread.join(WITHIN)
        assert not self.thread.is_alive()


def hold_first_call(
    sender: HeldSender, coalescer: ThreadCoalescer[str, int, int], waiting: list[int]
) -> tuple[Submitter, list[Submitter]]:
    """A call under way for item 0, and `waiting` submitted while it is, in that order."""
    sender.held.set()
    first = Submitter(coalescer, 0)
    assert sender.entered.wait(WITHIN)
    sender.held.clear()
    followers = []
    for item in waiting:
        followers.append(Submitter(coalescer, item))
        wait_until_sync(lambda: coalescer.waiting(KEY) == len(followers))
    return first, followers


def test_a_lone_request_is_sent_at_once_in_a_call_of_its_own() -> None:
    sender = HeldSender()
    coalescer = ThreadCoalescer(sender, limit=10)
    assert [coalescer.submit(KEY, item) for item in (1, 2, 3)] == [10, 20, 30]
    assert sender.calls == [[1], [2], [3]]
    assert coalescer.waiting(KEY) == 0


def test_requests_arriving_during_a_call_share_the_next_ones_in_order() -> None:
    sender = HeldSender()
    coalescer = ThreadCoalescer(sender, limit=3)
    first, followers = hold_first_call(sender, coalescer, list(range(1, 8)))
    sender.release.set()
    for submitter in (first, *followers):
        submitter.join()
    # Seven waited: in calls of at most three, oldest first.
    assert sender.calls == [[0], [1, 2, 3], [4, 5, 6], [7]]
    assert [submitter.result for submitter in (first, *followers)] == [n * 10 for n in range(8)]
    assert coalescer.waiting(KEY) == 0


def test_other_keys_are_not_held_by_a_call_under_way() -> None:
    sender = HeldSender()
    coalescer = ThreadCoalescer(sender, limit=10)
    first, _ = hold_first_call(sender, coalescer, [])
    assert coalescer.submit("other", 5) == 50  # not behind the held call
    sender.release.set()
    first.join()
    assert first.result == 0


def test_a_failed_call_fails_its_own_requests_only() -> None:
    sender = HeldSender()
    sender.fail_call = 2
    coalescer = ThreadCoalescer(sender, limit=2)
    first, followers = hold_first_call(sender, coalescer, [1, 2, 3])
    sender.release.set()
    for submitter in (first, *followers):
        submitter.join()
    assert sender.calls == [[0], [1, 2], [3]]
    assert first.result == 0
    assert [type(submitter.error) for submitter in followers[:2]] == [ConnectionError] * 2
    assert (followers[2].result, followers[2].error) == (30, None)
    assert coalescer.submit(KEY, 4) == 40


class Interrupted(BaseException):
    """What the test's signal handler raises, as SIGINT raises KeyboardInterrupt."""


def test_an_interrupted_waiter_is_withdrawn_and_passes_its_turn_on() -> None:
    """A signal's exception reaches the main thread while it waits, first in line: its item
    is never sent, and the thread behind it sends its own."""
    assert threading.current_thread() is threading.main_thread()
    sender = HeldSender()
    coalescer = ThreadCoalescer(sender, limit=10)
    first, _ = hold_first_call(sender, coalescer, [])
    main = threading.get_ident()

    def interrupt() -> None:
        wait_until_sync(lambda: coalescer.waiting(KEY) == 1)  # the main thread waits
        signal.pthread_kill(main, signal.SIGUSR1)

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    try:
        interrupter = start(interrupt)
        with pytest.raises(Interrupted):
            coalescer.submit(KEY, 1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    interrupter.join(WITHIN)
    assert coalescer.waiting(KEY) == 0
    follower = Submitter(coalescer, 2)
    wait_until_sync(lambda: coalescer.waiting(KEY) == 1)
    sender.release.set()
    first.join()
    follower.join()
    assert sender.calls == [[0], [2]]
    assert follower.result == 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_is_not_held_by_its_parents_call() -> None:
    sender = HeldSender()
    coalescer = ThreadCoalescer(sender, limit=10)
    first, followers = hold_first_call(sender, coalescer, [1])
    pid = os.fork()
    if pid == 0:  # the child: the call under way and the waiting thread stayed behind
        signal.alarm(5)  # a child held by the parent's call would hang: end it instead
        ok = coalescer.waiting(KEY) == 0 and coalescer.submit(KEY, 7) == 70
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    sender.release.set()
    for submitter in (first, *followers):
        submitter.join()
    assert os.waitstatus_to_exitcode(status) == 0
    assert (first.result, followers[0].result) == (0, 10)


@property_settings(30)
@given(
    limit=st.integers(1, 5),
    waiting=st.integers(0, 12),
    fail_call=st.none() | st.integers(2, 6),
)
def test_every_request_is_sent_once_and_answered_by_its_own_call(
    limit: int, waiting: int, fail_call: int | None
) -> None:
    """The model: after the held call, the waiting requests go in arrival order, `limit` a
    call; each thread gets its own item's result, or the error of the call that held it."""
    sender = HeldSender()
    sender.fail_call = fail_call
    coalescer = ThreadCoalescer(sender, limit=limit)
    first, followers = hold_first_call(sender, coalescer, list(range(1, waiting + 1)))
    sender.release.set()
    for submitter in (first, *followers):
        submitter.join()
    items = list(range(1, waiting + 1))
    expected_calls = [[0]] + [items[start : start + limit] for start in range(0, waiting, limit)]
    assert sender.calls == expected_calls
    for submitter, item in zip((first, *followers), range(waiting + 1), strict=True):
        call = next(n for n, sent in enumerate(expected_calls, 1) if item in sent)
        if call == fail_call:
            assert (submitter.result, type(submitter.error)) == (None, ConnectionError)
        else:
            assert (submitter.result, submitter.error) == (item * 10, None)
    assert coalescer.waiting(KEY) == 0
