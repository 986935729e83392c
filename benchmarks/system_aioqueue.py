"""aioqueue in the benchmark scenarios, through its public API only (see common.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from common import CONCURRENCY, Producer, Recorder, main, redis_py_version

import aioqueue
from aioqueue import Event, EventService, Outcome, event_context

ENQUEUE_MANY = "enqueue_many"
# Events per enqueue_many call in the enqueue_many variant.
MANY_BATCH = 100
DUE_KEY = "bench_due"


@dataclass
class BenchEvent(Event):
    id: str
    index: int


class AioqueueProducer:
    def __init__(self, service: EventService, *, many: bool, tag_due_times: bool) -> None:
        self._service = service
        self._many = many
        self._tag_due_times = tag_due_times
        self.batch_size = MANY_BATCH if many else 1

    async def enqueue(self, indices: range, delay: float) -> None:
        context = {DUE_KEY: repr(time.time() + delay)} if self._tag_due_times else None
        events = [BenchEvent(id=f"e-{index}", index=index) for index in indices]
        if self._many:
            # Looked up at run time: enqueue_many is newer than this harness may be.
            enqueue_many = getattr(self._service, ENQUEUE_MANY)
            await enqueue_many(events, delay, context=context)
        else:
            for event in events:
                await self._service.enqueue(event, delay, context=context)


class RecorderMetrics:
    """The Metrics protocol, passing each successful delivery's lateness to the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        pass

    def events_dispatched(self, event_type: str, count: int) -> None:
        pass

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        if outcome == "ok":
            self._recorder.record(lateness)


class AioqueueSystem:
    name = "aioqueue"

    def versions(self) -> dict[str, str]:
        return {"aioqueue": aioqueue.__version__, "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return [ENQUEUE_MANY] if hasattr(EventService, ENQUEUE_MANY) else []

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, variant, tag_due_times)

    @asynccontextmanager
    async def _producer(
        self, url: str, variant: str, tag_due_times: bool
    ) -> AsyncIterator[Producer]:
        # Dispatching is the worker's job: a producer-only service, as in a real deployment.
        service = EventService.builder().url(url).enable_scheduling(False).build()
        async with service:
            yield AioqueueProducer(
                service, many=variant == ENQUEUE_MANY, tag_due_times=tag_due_times
            )

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        async def handle(event: BenchEvent) -> bool:
            due = event_context.get().get(DUE_KEY)
            if due is not None:
                recorder.cross_check_lateness.append(time.time() - float(due))
            return True

        # Defaults everywhere but parallelism, which matches the peers' default concurrency.
        service = EventService.builder().url(url).metrics(RecorderMetrics(recorder)).build()
        async with service:
            service.add_handler(BenchEvent, handle, parallelism=CONCURRENCY)
            on_ready()
            await recorder.done.wait()


if __name__ == "__main__":
    main(AioqueueSystem(), sys.argv[0])
