"""What the peers with blocking APIs or pool processes share (Celery, Dramatiq).

`ThreadedProducer` drives a blocking enqueue call the way blocking code makes it: the
scenario's IN_FLIGHT lanes each hand a batch of EVENTS_PER_HOP events to a thread of their own
(IN_FLIGHT threads, as aioqueue's `SyncProducer (32 threads)` row), where every event is one
blocking call; the hop from the event loop to the thread is paid once per batch.

`DeliveryChannel` carries deliveries from handlers that do not run on the scenario's event
loop (worker threads, or a prefork pool's processes) to its recorder: a handler sends one
datagram, `index lateness`, to a Unix socket in the abstract namespace, which the loop reads.
A Unix datagram socket loses nothing: a full receive queue blocks the sender instead.

Runs in the peers' virtualenv; standard library only, besides common.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from common import IN_FLIGHT, Recorder

# Events a lane hands to its thread at a time, as in aioqueue's SyncProducer rows.
EVENTS_PER_HOP = 100
DATAGRAM_BYTES = 64


class ThreadedProducer:
    """Calls `send(index, delay)` once per event from IN_FLIGHT threads. Close it with close()."""

    batch_size = EVENTS_PER_HOP

    def __init__(self, send: Callable[[int, float], object]) -> None:
        self._send = send
        self._threads = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="enqueue")

    async def enqueue(self, indices: range, delay: float) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._threads, self._send_all, indices, delay)

    def _send_all(self, indices: range, delay: float) -> None:
        for index in indices:
            self._send(index, delay)

    def close(self) -> None:
        self._threads.shutdown(wait=True)


class DeliveryChannel:
    """Receives `report()`s on the running event loop and passes them to `recorder`.

    Use it as a context manager inside the loop; `address` is what handlers report to.
    """

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.address = f"\0aioqueue-bench-{os.getpid()}-{uuid.uuid4().hex}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(self.address)
        self._socket.setblocking(False)

    async def __aenter__(self) -> DeliveryChannel:
        asyncio.get_running_loop().add_reader(self._socket.fileno(), self._receive)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        asyncio.get_running_loop().remove_reader(self._socket.fileno())
        self._receive()
        self._socket.close()

    def _receive(self) -> None:
        while True:
            try:
                datagram = self._socket.recv(DATAGRAM_BYTES)
            except BlockingIOError:
                return
            index, lateness = datagram.split()
            self._recorder.saw(int(index))
            self._recorder.record(float(lateness))


# One sending socket per process, made on first use: a forked pool process makes its own.
_sender: tuple[int, socket.socket] | None = None


def report(address: str, index: int, lateness: float) -> None:
    """Tells the DeliveryChannel at `address` that event `index` was handled `lateness` s late.

    Callable from any thread or process (a datagram is sent whole or not at all).
    """
    global _sender
    if _sender is None or _sender[0] != os.getpid():
        _sender = (os.getpid(), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
    _sender[1].sendto(f"{index} {lateness!r}".encode(), address)
