"""`aioqueue events list|show|run-now|cancel`, in a real process against a real server."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from aioqueue import EventServiceBuilder
from tests.support.common import PaymentCheck, Recorder, wait_until
from tests.support.ops import run_cli

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


async def test_list_pages_through_the_schedule(service_builder: Builder, redis_url: str) -> None:
    start = datetime.now(timezone.utc) + timedelta(hours=1)
    async with service_builder().enable_scheduling(False).build() as service:
        for n in range(7):
            await service.enqueue(PaymentCheck(id=f"p-{n}", order_id=n), at=start + timedelta(
                minutes=n))  # fmt: skip
    ids: list[str] = []
    cursor: list[str] = []
    while True:
        page = await run_cli("events", "list", "PaymentCheck", "--url", redis_url, "--limit",
                             "3", "--json", *cursor)  # fmt: skip
        assert page.returncode == 0, page.stderr
        body = page.json()
        ids += [event["id"] for event in body["events"]]
        assert all(event["state"] == "waiting" for event in body["events"])
        if body["next_cursor"] is None:
            break
        cursor = ["--cursor", body["next_cursor"]]
    assert ids == [f"p-{n}" for n in range(7)]

    window = await run_cli(
        "events", "list", "PaymentCheck", "--url", redis_url,
        "--due-after", (start + timedelta(minutes=2)).isoformat(),
        "--due-before", (start + timedelta(minutes=4)).isoformat(),
    )  # fmt: skip
    assert window.returncode == 0, window.stderr
    assert "p-2" in window.stdout
    assert "p-3" in window.stdout
    assert "p-4" not in window.stdout
    assert "STATE" in window.stdout

    bad = await run_cli("events", "list", "PaymentCheck", "--url", redis_url, "--cursor", "x")
    assert bad.returncode == 1
    assert "not a cursor" in bad.stderr


async def test_show_run_now_and_cancel(service_builder: Builder, redis_url: str) -> None:
    handled = Recorder()
    async with service_builder().build() as service:
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 3600, context={"k": "v"})
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 3600)

        shown = await run_cli("events", "show", "PaymentCheck", "p-1", "--url", redis_url,
                              "--json")  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        info = shown.json()
        assert (info["state"], info["attempt"], info["context"]) == ("waiting", 0, {"k": "v"})
        assert info["payload"] == '{"order_id":1}'
        text = await run_cli("events", "show", "PaymentCheck", "p-1", "--url", redis_url)
        assert "state:       waiting" in text.stdout

        service.add_handler(PaymentCheck, handled)
        ran = await run_cli("events", "run-now", "PaymentCheck", "p-1", "--url", redis_url)
        assert ran.returncode == 0, ran.stderr
        await handled.wait_for(1)
        assert handled.ids == ["p-1"]

        async def p1_gone() -> bool:
            return await service.inspect(PaymentCheck, "p-1") is None

        await wait_until(p1_gone)
        again = await run_cli("events", "run-now", "PaymentCheck", "p-1", "--url", redis_url)
        assert again.returncode == 1
        assert "no pending PaymentCheck 'p-1'" in again.stderr

        cancelled = await run_cli("events", "cancel", "PaymentCheck", "p-2", "--url", redis_url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert await service.inspect(PaymentCheck, "p-2") is None
        missing = await run_cli("events", "show", "PaymentCheck", "p-2", "--url", redis_url)
        assert missing.returncode == 1
        assert "is pending or dead" in missing.stderr


async def test_run_now_says_a_dead_event_is_requeued_instead(
    service_builder: Builder, redis_url: str
) -> None:
    async def reject(event: PaymentCheck) -> bool:
        return False

    async with service_builder().retry_attempts(1).build() as service:
        service.add_handler(PaymentCheck, reject)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)

        async def dead() -> bool:
            info = await service.inspect(PaymentCheck, "p-1")
            return info is not None and info.state == "dead"

        await wait_until(dead)
    ran = await run_cli("events", "run-now", "PaymentCheck", "p-1", "--url", redis_url, "--json")
    assert ran.returncode == 1
    assert ran.json()["result"] == "dead"
    shown = await run_cli("events", "show", "PaymentCheck", "p-1", "--url", redis_url, "--json")
    assert shown.json()["state"] == "dead"
    assert shown.json()["last_error"].endswith("reject returned False on attempt 1")
