"""A schedule name is unique per prefix, on one server and on Redis Cluster: declaring it
under another event type moves it, removing it removes whatever holds it, and a move that
died half-way is finished by the old type's keeper (aioqueue/_recurring/names.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import orjson
import pytest

from aioqueue import Event, EventService, EventServiceBuilder
from aioqueue._recurring.names import claim_name, read_entry
from aioqueue._recurring.records import read_record
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys
from tests.support.common import Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


@dataclass
class ReportA(Event):
    id: str


@dataclass
class ReportB(Event):
    id: str


@dataclass
class Clock(Event):
    """Ticks of a schedule that only marks time: the test awaits them instead of sleeping."""

    id: str


def report_a(tick: datetime) -> ReportA:
    return ReportA(id=f"a-{tick.timestamp()}")


def report_b(tick: datetime) -> ReportB:
    return ReportB(id=f"b-{tick.timestamp()}")


def clock(tick: datetime) -> Clock:
    return Clock(id=f"clock-{tick.timestamp()}")


def consumer(builder: Builder, a: Recorder, b: Recorder, ticks: Recorder) -> EventService:
    service = builder().build()
    service.add_handler(ReportA, a)
    service.add_handler(ReportB, b)
    service.add_handler(Clock, ticks)
    return service


async def test_declaring_a_name_under_another_type_moves_it_and_remove_removes_it(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """The issue's case: service A declares "rep" with events of ReportA, service B then
    declares "rep" with ReportB. Before, both fired, schedules() showed only ReportB, and
    after remove_schedule("rep") ReportA kept firing, out of reach of every tool."""
    a, b, ticks = Recorder(), Recorder(), Recorder()
    async with consumer(service_builder, a, b, ticks) as handlers:
        handlers.add_schedule("clock", every=0.5, event=clock)
        service_a = service_builder().enable_scheduling(False).build()
        service_a.add_schedule("rep", every=0.5, event=report_a)
        async with service_a:
            await a.wait_for(1)
            service_b = service_builder().enable_scheduling(False).build()
            service_b.add_schedule("rep", every=0.5, event=report_b)
            async with service_b:
                await b.wait_for(1)
                a_when_b_began = len(a.deliveries)
                await b.wait_for(3)
                assert len(a.deliveries) == a_when_b_began  # ReportA stopped at the move
                listed = await handlers.schedules()
                assert [(s.name, s.event_type) for s in listed] == [
                    ("clock", "Clock"), ("rep", "ReportB"),
                ]  # fmt: skip
                assert await handlers.remove_schedule("rep")
                b_when_removed = len(b.deliveries)
                await ticks.wait_for(len(ticks.deliveries) + 3)
                assert (len(a.deliveries), len(b.deliveries)) == (a_when_b_began, b_when_removed)
                assert [s.name for s in await handlers.schedules()] == ["clock"]
                assert not await handlers.remove_schedule("rep")
    for event_type in ("ReportA", "ReportB"):
        keys = QueueKeys.for_type("aioqueue", event_type)
        assert await redis_client.zcard(keys.schedule) == 0  # no tick of either is pending


async def test_a_move_that_died_half_way_is_finished_by_the_old_types_keeper(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """On a cluster the directory and the two records are three slots, so a move is several
    script calls. A mover that died after claiming the name for ReportB, before fencing
    ReportA's record: the directory says ReportB, ReportA's record is still live, and
    schedules() shows it (it still fires). The ReportA keeper checks the directory before
    its next tick, fences its own record and stops: nothing fires unseen."""
    a, b, ticks = Recorder(), Recorder(), Recorder()
    async with consumer(service_builder, a, b, ticks) as handlers:
        handlers.add_schedule("clock", every=0.5, event=clock)
        service_a = service_builder().enable_scheduling(False).build()
        service_a.add_schedule("rep", every=2, event=report_a)
        async with service_a:
            await a.wait_for(1)
            keys_a = QueueKeys.for_type("aioqueue", "ReportA")

            async def keeper_asleep_for_a_second() -> bool:
                """The keeper looks at the directory only when the tick it produced last is
                due; a handled tick does not say it already looked for that tick (its wake-up
                and the delivery race), a produced next tick a second away does."""
                record = await read_record(redis_client, keys_a, "rep")
                assert record is not None
                return record.tick is not None and record.tick - record.now >= 1000

            await wait_until(keeper_asleep_for_a_second)
            token, stale = await claim_name(redis_client, "aioqueue", "rep", "ReportB")
            assert stale == ["ReportA"]  # ...and then the mover died
            half_way = await handlers.schedules()
            assert [(s.name, s.event_type) for s in half_way] == [
                ("clock", "Clock"), ("rep", "ReportA"),
            ]  # fmt: skip

            async def fenced() -> bool:
                return [s.name for s in await handlers.schedules()] == ["clock"]

            await wait_until(fenced)
            a_when_fenced = len(a.deliveries)
            await ticks.wait_for(len(ticks.deliveries) + 3)
            assert len(a.deliveries) <= a_when_fenced + 1  # at most the tick due at the fence
            entry = await read_entry(redis_client, "aioqueue", "rep")
            assert entry is not None
            assert (entry.event_type, entry.token) == ("ReportB", token)
            # ReportB's first declaration finishes the move; the ReportA record cannot return.
            service_b = service_builder().enable_scheduling(False).build()
            service_b.add_schedule("rep", every=0.5, event=report_b)
            async with service_b:
                await b.wait_for(1)
                assert [(s.name, s.event_type) for s in await handlers.schedules()] == [
                    ("clock", "Clock"), ("rep", "ReportB"),
                ]  # fmt: skip


async def test_a_record_left_pending_is_declared_again_by_its_keeper(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """A declaration that died between writing its record pending and making it live
    (names.py, step 4) leaves a record that produces nothing and that schedules() does not
    list: the type's keeper takes it for no record, declares the schedule again, and its
    ticks go on from the live record."""
    a, b, ticks = Recorder(), Recorder(), Recorder()
    async with consumer(service_builder, a, b, ticks) as service:
        service.add_schedule("clock", every=0.2, event=clock)
        await ticks.wait_for(1)
        keys = QueueKeys.for_type("aioqueue", "Clock")
        record = await read_record(redis_client, keys, "clock")
        assert record is not None
        token, stale = await claim_name(redis_client, "aioqueue", "clock", "Clock")
        assert (token, stale) == (record.token, [])  # its own claim again: nothing to fence
        pending = orjson.dumps({"spec": record.spec, "token": token, "pending": 1})
        await redis_client.hset(keys.schedules, "clock", pending)  # ...and then it died
        assert await read_record(redis_client, keys, "clock") is None
        assert await service.schedules() == []

        async def live_again() -> bool:
            return await read_record(redis_client, keys, "clock") is not None

        await wait_until(live_again)
        seen = len(ticks.deliveries)
        await ticks.wait_for(seen + 2)
        assert [s.name for s in await service.schedules()] == ["clock"]
