"""Reporting handlers that block the event loop instead of awaiting."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import CodeType, FrameType

import anyio

from aioqueue._transport.recovery import logger

__all__ = ["LoopWatchdog", "handler_code"]


def handler_code(handler: object) -> CodeType | None:
    """The code object a handler runs: a function's own, or a callable object's __call__."""
    code = getattr(handler, "__code__", None)
    if code is None and callable(handler):
        code = getattr(type(handler).__call__, "__code__", None)
    return code if isinstance(code, CodeType) else None


class LoopWatchdog:
    """Warns, naming the handler, when the event loop stops turning for `threshold` seconds.

    A blocked loop cannot report on itself, so the check runs in a daemon thread: the loop
    beats a heartbeat, and when the heartbeat goes stale the thread reads the loop thread's
    current stack and looks for a registered handler's code on it. One warning per stall.
    """

    def __init__(self, threshold: float, handlers: Callable[[], Mapping[CodeType, str]]) -> None:
        self._threshold = threshold
        self._tick = min(0.05, threshold / 4)
        self._handlers = handlers
        self._heartbeat = time.monotonic()
        self._stopped = threading.Event()

    async def run(self) -> None:
        """Beats the heartbeat until cancelled, with the watching thread alongside."""
        thread = threading.Thread(
            target=self._watch, args=(threading.get_ident(),), name="aioqueue-watchdog", daemon=True
        )
        thread.start()
        try:
            while True:
                self._heartbeat = time.monotonic()
                await anyio.sleep(self._tick)
        finally:
            self._stopped.set()

    def _watch(self, loop_thread: int) -> None:
        reported_beat = -1.0
        while not self._stopped.wait(self._tick):
            beat = self._heartbeat
            stalled = time.monotonic() - beat
            if stalled < self._threshold or beat == reported_beat:
                continue
            reported_beat = beat
            culprit = self._handler_on_stack(sys._current_frames().get(loop_thread))
            logger.warning(
                "the event loop has been blocked for %.2f s%s; an async handler must await, "
                "not block: write a handler that blocks (a database driver, requests, smtplib) "
                "as a plain `def` function, and aioqueue runs it in a worker thread",
                stalled,
                f" by handler {culprit}" if culprit else "",
            )

    def _handler_on_stack(self, frame: FrameType | None) -> str | None:
        handlers = self._handlers()
        while frame is not None:
            name = handlers.get(frame.f_code)
            if name is not None:
                return name
            frame = frame.f_back
        return None
