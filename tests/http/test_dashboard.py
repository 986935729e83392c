"""The dashboard's overview in a real headless Chromium against a real `aioqueue serve`
process (the browser and server fixtures are in tests/support/browser.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import orjson
import pytest
import redis.asyncio as redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from aioqueue import Event, EventServiceBuilder
from aioqueue._admin.stats import read_stats
from tests.support.browser import bury, click, wait_for
from tests.support.common import queue_key, wait_until
from tests.support.ops import ServedApp, stored_envelope
from tests.support.workers.schedule_worker import beat

Builder = Callable[[], EventServiceBuilder]
QUEUE_FIELDS = ("pending", "due_now", "ready", "in_flight", "dead")


@dataclass
class Export(Event):
    id: str


@dataclass
class Reminder(Event):
    id: str


@dataclass
class Invoice(Event):
    id: str
    amount: int


# The page redraws its tables on every refresh, so each read happens in one script call: an
# element found in one WebDriver call may be gone by the next.
READ_QUEUES = """
return Array.from(document.querySelectorAll('#queues tbody tr[data-type]')).map((row) => [
  row.dataset.type,
  Object.fromEntries(arguments[0].map((field) =>
    [field, row.querySelector(`td[data-field="${field}"]`).textContent])),
  row.querySelector('td[data-field="oldest_overdue"]').dataset.seconds,
]);
"""
READ_DEAD_LETTERS = """
return Array.from(document.querySelectorAll('#dead-letters tbody tr[data-id]')).map((row) =>
  [row.dataset.id, row.querySelector('td[data-field="error"]').textContent]);
"""


def shown_queues(driver: WebDriver) -> dict[str, dict[str, int]]:
    rows = driver.execute_script(READ_QUEUES, list(QUEUE_FIELDS))
    return {name: {field: int(value) for field, value in cells.items()} for name, cells, _ in rows}


def shown_overdue(driver: WebDriver, event_type: str) -> float:
    rows = driver.execute_script(READ_QUEUES, list(QUEUE_FIELDS))
    return next(float(seconds) for name, _, seconds in rows if name == event_type)


def shown_dead_letters(driver: WebDriver) -> dict[str, str]:
    return dict(driver.execute_script(READ_DEAD_LETTERS))


def click_requeue(driver: WebDriver, event_id: str) -> None:
    click(driver, f'#dead-letters tr[data-id="{event_id}"] .requeue')


async def redis_queues(client: redis.Redis) -> dict[str, dict[str, int]]:
    snapshot = await read_stats(client, "aioqueue")
    return {q.event_type: {f: getattr(q, f) for f in QUEUE_FIELDS} for q in snapshot.queues}


@pytest.mark.timeout(900)  # room for installing Chromium on a fresh machine; ~5 s otherwise
async def test_numbers_match_redis_and_requeue_button_requeues(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    async def reject(event: Invoice) -> bool:
        raise ValueError(f"card declined for order {event.amount}")

    dying = service_builder().retry_attempts(1).build()
    async with dying:
        dying.add_handler(Invoice, reject)
        await dying.enqueue_many([Invoice(id=f"i-{n}", amount=n) for n in range(2)], 0)

        async def buried() -> bool:
            return await redis_client.hlen(queue_key("Invoice", "dead_letters")) == 2

        await wait_until(buried)

    release = anyio.Event()

    async def export(event: Export) -> bool:
        await release.wait()
        return True

    service = service_builder().handler_timeout(60).build()
    async with service:
        service.add_handler(Export, export, parallelism=1)
        await service.enqueue_many([Export(id="e-1"), Export(id="e-2")], 0)
        await service.enqueue_many([Reminder(id=f"r-{n}") for n in range(3)], timedelta(hours=1))

        async def one_running() -> bool:
            return (await redis_queues(redis_client))["Export"]["in_flight"] == 1

        await wait_until(one_running)
        expected = await redis_queues(redis_client)
        assert expected["Export"] == dict(pending=2, due_now=0, ready=1, in_flight=1, dead=0)

        await anyio.to_thread.run_sync(browser.get, f"{dashboard.base_url}/?interval=0.3")
        await wait_for(lambda: set(shown_queues(browser)) == {"Export", "Invoice", "Reminder"})
        assert shown_queues(browser) == expected

        [export_stats] = (await read_stats(redis_client, "aioqueue", ["Export"])).queues
        assert abs(shown_overdue(browser, "Export") - export_stats.oldest_overdue) < 3

        assert shown_dead_letters(browser) == {
            "i-0": "attempt 1 raised ValueError: card declined for order 0",
            "i-1": "attempt 1 raised ValueError: card declined for order 1",
        }
        # The charts have drawn the history so far.
        assert browser.find_elements(By.CSS_SELECTOR, "#depth-chart polyline")

        if screenshot := os.environ.get("AIOQUEUE_DASHBOARD_SCREENSHOT"):
            await anyio.to_thread.run_sync(browser.save_screenshot, str(Path(screenshot)))

        await anyio.to_thread.run_sync(click_requeue, browser, "i-0")
        message = browser.find_element(By.ID, "message")
        await wait_for(lambda: message.text == "Invoice i-0: requeued")

        assert await redis_client.hexists(queue_key("Invoice", "dead_letters"), "i-0") == 0
        envelope = await stored_envelope(redis_client, "Invoice", "i-0")
        assert (envelope.get("attempt", 0), orjson.loads(envelope["p"])) == (0, {"amount": 0})
        after = await redis_queues(redis_client)
        assert after["Invoice"] == dict(pending=1, due_now=1, ready=0, in_flight=0, dead=1)
        await wait_for(lambda: shown_queues(browser) == after)
        assert list(shown_dead_letters(browser)) == ["i-1"]
        release.set()


async def test_a_dead_letter_whose_id_has_slashes_is_shown_and_requeued(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    odd_id = "orders/2026/7"
    await bury(service_builder(), redis_client, Invoice(id=odd_id, amount=7), "card declined")

    await anyio.to_thread.run_sync(browser.get, f"{dashboard.base_url}/?interval=0.3")
    await wait_for(
        lambda: (
            shown_dead_letters(browser) == {odd_id: "attempt 1 raised ValueError: card declined"}
        )
    )
    await anyio.to_thread.run_sync(click_requeue, browser, odd_id)
    message = browser.find_element(By.ID, "message")
    await wait_for(lambda: message.text == f"Invoice {odd_id}: requeued")
    envelope = await stored_envelope(redis_client, "Invoice", odd_id)
    assert (envelope.get("attempt", 0), orjson.loads(envelope["p"])) == (0, {"amount": 7})
    await wait_for(lambda: shown_dead_letters(browser) == {})


READ_SCHEDULES = """
return Array.from(document.querySelectorAll('#schedules tbody tr[data-name]')).map((row) =>
  Object.fromEntries(['name', 'type', 'spec', 'tz', 'next_tick'].map((field) =>
    [field, row.querySelector(`td[data-field="${field}"]`).textContent])));
"""


async def test_schedules_table_shows_what_redis_holds_as_text(
    service_builder: Builder, dashboard: ServedApp, browser: WebDriver
) -> None:
    """A schedule whose name is markup is shown as that text, and nothing in it runs."""
    hostile = "<img src=x onerror=\"document.title='pwned'\">"
    service = service_builder().build()
    service.add_schedule(hostile, cron="0 3 * * *", tz="Europe/Paris", event=beat)
    async with service:

        async def declared() -> bool:
            return len(await service.schedules()) == 1

        await wait_until(declared)
        [info] = await service.schedules()
    await anyio.to_thread.run_sync(browser.get, f"{dashboard.base_url}/?interval=0.3")

    def shown() -> bool:
        return bool(browser.execute_script(READ_SCHEDULES))

    await wait_for(shown)
    [row] = browser.execute_script(READ_SCHEDULES)
    assert row["name"] == hostile
    assert (row["type"], row["spec"], row["tz"]) == ("Beat", "0 3 * * *", "Europe/Paris")
    assert info.next_tick is not None
    assert row["next_tick"] == info.next_tick.isoformat().replace("T", " ")[:19]
    assert browser.title != "pwned"
    assert not browser.find_elements(By.CSS_SELECTOR, "#schedules img")


READ_TYPES = """
return Array.from(document.querySelectorAll('#types tbody tr[data-type]')).map((row) =>
  [row.dataset.type, row.querySelector('td[data-field="fields"]').textContent]);
"""
READ_DELIVERY = """
const row = document.querySelector(`#queues tbody tr[data-type="${arguments[0]}"]`);
return row ? row.querySelector('td[data-field="paused"] button').textContent : null;
"""


def click_pause_toggle(driver: WebDriver, event_type: str) -> None:
    click(driver, f'#queues tr[data-type="{event_type}"] .pause-toggle')


async def test_types_show_published_fields_as_text_and_pause_buttons_pause(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    """A type's fields come from its published schema, shown as text even when a hostile
    writer put markup in them; the Pause and Resume buttons pause and resume for real."""
    async with service_builder().build() as service:
        await service.enqueue(Invoice(id="i-1", amount=1), timedelta(hours=1))
    hostile = "<img src=x onerror=\"document.title='pwned'\">"
    forged = {"type": "object", "properties": {hostile: {"type": "string"}}, "required": []}
    await redis_client.hset(
        "aioqueue:schemas",
        "Forged",
        orjson.dumps({"schema": forged, "digest": "f" * 16, "published_at": 0}),
    )
    await anyio.to_thread.run_sync(browser.get, f"{dashboard.base_url}/?interval=0.3")

    def shown_types() -> dict[str, str]:
        return dict(browser.execute_script(READ_TYPES))

    await wait_for(lambda: set(shown_types()) == {"Forged", "Invoice"})
    assert shown_types()["Invoice"] == "id: string, amount: integer"
    assert shown_types()["Forged"] == f"{hostile}: string (optional)"
    assert browser.title != "pwned"
    assert not browser.find_elements(By.CSS_SELECTOR, "#types img")

    assert browser.execute_script(READ_DELIVERY, "Invoice") == "Pause"
    await anyio.to_thread.run_sync(click_pause_toggle, browser, "Invoice")
    await wait_for(lambda: browser.execute_script(READ_DELIVERY, "Invoice") == "Resume")
    assert await redis_client.hexists(queue_key("Invoice", "paused"), "paused")
    await anyio.to_thread.run_sync(click_pause_toggle, browser, "Invoice")
    await wait_for(lambda: browser.execute_script(READ_DELIVERY, "Invoice") == "Pause")
    assert not await redis_client.hexists(queue_key("Invoice", "paused"), "paused")
