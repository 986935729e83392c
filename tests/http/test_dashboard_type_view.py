"""The dashboard's page of one type (`/#/types/<type>`) in a real headless Chromium against a
real `aioqueue serve` process: what it shows matches Redis, each button does what it says,
and text that came from Redis is never markup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import anyio
import orjson
import redis.asyncio as redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from aioqueue import Event, EventServiceBuilder, FixedDelays
from tests.support.browser import bury, click, wait_for
from tests.support.common import queue_key, wait_until
from tests.support.ops import ServedApp, stored_envelope

Builder = Callable[[], EventServiceBuilder]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


@dataclass
class Reminder(Event):
    id: str
    note: str = ""


@dataclass
class Invoice(Event):
    id: str
    amount: int


READ_PAGE = """
const rows = Array.from(document.querySelectorAll('#pending tbody tr[data-id]'));
return {
  rows: rows.map((row) => [row.dataset.id,
                           row.querySelector('td[data-field="state"]').textContent]),
  bars: Array.from(document.querySelectorAll('#histogram .bar')).map((bar) =>
    Number(bar.dataset.count)),
  pending: (document.querySelector('#type-stats td[data-field="pending"]') || {}).textContent,
  message: document.getElementById('type-message').textContent,
};
"""
READ_DETAIL = """
const section = document.getElementById('event-detail');
if (section.hidden) return null;
const fields = {};
for (const row of document.querySelectorAll('#detail tr[data-field]')) {
  fields[row.dataset.field] = row.cells[1].textContent;
}
return fields;
"""


def page(driver: WebDriver) -> dict[str, Any]:
    shown: dict[str, Any] = driver.execute_script(READ_PAGE)
    return shown


def detail(driver: WebDriver) -> dict[str, str] | None:
    shown: dict[str, str] | None = driver.execute_script(READ_DETAIL)
    return shown


async def open_type(driver: WebDriver, app: ServedApp, event_type: str, event_id: str = "") -> None:
    fragment = f"#/types/{quote(event_type, safe='')}"
    if event_id:
        fragment += f"/{quote(event_id, safe='')}"
    await anyio.to_thread.run_sync(driver.get, f"{app.base_url}/?interval=0.3{fragment}")


async def test_a_type_page_shows_its_schedule_and_its_buttons_act(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    # Due 0.5, 1.5 (twice) and 3.5 hours ahead, and one beyond the histogram's 24 hours;
    # plus 20 more far ahead, so that the table (20 rows a page) has a second page.
    due_in = {"r-0": 0.5, "r-1": 1.5, "r-2": 1.5, "r-3": 3.5, "r-4": 30}
    async with service_builder().build() as service:
        for event_id, hours in due_in.items():
            await service.enqueue(Reminder(id=event_id, note=f"note {event_id}"), hours * 3600)
        await service.enqueue_many(
            [Reminder(id=f"z-{n:02d}") for n in range(20)], timedelta(days=3)
        )
    await open_type(browser, dashboard, "Reminder")

    await wait_for(lambda: len(page(browser)["rows"]) == 20)
    shown = page(browser)
    assert [row[0] for row in shown["rows"]] == [*due_in, *(f"z-{n:02d}" for n in range(15))]
    assert {state for _, state in shown["rows"]} == {"waiting"}
    assert shown["pending"] == "25"
    assert shown["bars"] == [1, 2, 0, 1] + [0] * 20
    assert browser.find_elements(By.CSS_SELECTOR, "#type-lateness-chart polyline")
    assert browser.find_elements(By.CSS_SELECTOR, "#type-throughput-chart polyline")

    # Pause and Resume, from the type's own page, for every service.
    def delivery() -> str:
        # One script call: the row is redrawn on every refresh.
        shown = browser.execute_script(
            "const td = document.querySelector('#type-stats td[data-field=\"paused\"]');"
            "return td ? td.textContent : '';"
        )
        return str(shown)

    await anyio.to_thread.run_sync(click, browser, "#type-stats .pause-toggle")
    await wait_for(lambda: delivery() == "paused Resume")
    assert await redis_client.hexists(queue_key("Reminder", "paused"), "paused")
    await anyio.to_thread.run_sync(click, browser, "#type-stats .pause-toggle")
    await wait_for(lambda: delivery() == "Pause")
    assert not await redis_client.hexists(queue_key("Reminder", "paused"), "paused")

    # Paging: the second page holds the last five, the first page comes back.
    await anyio.to_thread.run_sync(click, browser, "#next-page")
    await wait_for(lambda: [row[0] for row in page(browser)["rows"]][:1] == ["z-15"])
    assert [row[0] for row in page(browser)["rows"]] == [f"z-{n:02d}" for n in range(15, 20)]
    await anyio.to_thread.run_sync(click, browser, "#first-page")
    await wait_for(lambda: [row[0] for row in page(browser)["rows"]][:1] == ["r-0"])

    # Run now: due at once, its attempt count kept.
    await anyio.to_thread.run_sync(click, browser, '#pending tr[data-id="r-3"] .run-now')
    await wait_for(lambda: page(browser)["message"] == "Reminder r-3: due now")
    now_s, now_us = await redis_client.time()
    score = await redis_client.zscore(queue_key("Reminder", "schedule"), "r-3")
    assert score is not None
    assert score <= now_s * 1000 + now_us // 1000
    await wait_for(lambda: dict(page(browser)["rows"]).get("r-3") == "due")
    assert page(browser)["bars"][:4] == [1, 2, 0, 0]

    # Cancel: gone from Redis and from the page.
    await anyio.to_thread.run_sync(click, browser, '#pending tr[data-id="r-1"] .cancel')
    await wait_for(lambda: page(browser)["message"] == "Reminder r-1: cancelled")
    assert not await redis_client.hexists(queue_key("Reminder", "events"), "r-1")
    await wait_for(lambda: "r-1" not in dict(page(browser)["rows"]))

    # The detail view, opened by the id's link, shows the event as Redis holds it.
    await anyio.to_thread.run_sync(click, browser, '#pending tr[data-id="r-2"] a')
    await wait_for(lambda: "state" in (detail(browser) or {}))
    shown_detail = detail(browser)
    assert shown_detail is not None
    envelope = await stored_envelope(redis_client, "Reminder", "r-2")
    assert shown_detail["state"] == "waiting"
    assert shown_detail["attempt"] == str(envelope.get("attempt", 0)) == "0"
    assert orjson.loads(shown_detail["payload"]) == orjson.loads(envelope["p"])
    assert orjson.loads(shown_detail["payload"]) == {"note": "note r-2"}
    await anyio.to_thread.run_sync(click, browser, "#detail-actions .cancel")
    await wait_for(lambda: page(browser)["message"] == "Reminder r-2: cancelled")
    assert not await redis_client.hexists(queue_key("Reminder", "events"), "r-2")


async def test_a_dead_event_is_requeued_from_its_detail_view(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    odd_id = "orders/2026/8"
    await bury(service_builder(), redis_client, Invoice(id=odd_id, amount=8), "card declined")
    await open_type(browser, dashboard, "Invoice", odd_id)
    await wait_for(lambda: (detail(browser) or {}).get("state") == "dead")
    assert (detail(browser) or {})["last"] == "attempt 1 raised ValueError: card declined"
    await anyio.to_thread.run_sync(click, browser, "#detail-actions .requeue")
    await wait_for(lambda: page(browser)["message"] == f"Invoice {odd_id}: requeued")
    envelope = await stored_envelope(redis_client, "Invoice", odd_id)
    assert (envelope.get("attempt", 0), orjson.loads(envelope["p"])) == (0, {"amount": 8})
    await wait_for(lambda: (detail(browser) or {}).get("state") == "due")


async def test_markup_from_redis_is_shown_as_text_and_never_runs(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    """An id, a payload, a context value and an error that are all markup."""

    async def reject(event: Reminder) -> bool:
        raise ValueError(HOSTILE)

    service = service_builder().retry_policy(FixedDelays([3600])).build()
    async with service:
        service.add_handler(Reminder, reject)
        await service.enqueue(Reminder(id=HOSTILE, note=HOSTILE), 0, context={"who": HOSTILE})

        async def failed_once() -> bool:
            raw = await redis_client.hget(queue_key("Reminder", "events"), HOSTILE)
            return raw is not None and "error" in orjson.loads(raw)

        await wait_until(failed_once)
    await open_type(browser, dashboard, "Reminder", HOSTILE)
    await wait_for(lambda: (detail(browser) or {}).get("state") == "retry_wait")
    shown = detail(browser)
    assert shown is not None
    assert shown["last"] == f"attempt 1 raised ValueError: {HOSTILE}"
    assert shown["context"] == f"who = {HOSTILE}"
    assert orjson.loads(shown["payload"]) == {"note": HOSTILE}
    assert dict(page(browser)["rows"]) == {HOSTILE: "retry_wait"}
    assert browser.find_element(By.ID, "detail-id").text == HOSTILE
    assert browser.title != "pwned"
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
