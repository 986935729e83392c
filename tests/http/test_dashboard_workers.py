"""The dashboard's Workers panel in a real headless Chromium against a real `aioqueue serve`
process: the live workers with their handlers, a type with due events and no running worker
flagged, and what a worker record holds shown as text."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import orjson
import redis.asyncio as redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from aioqueue import Event, EventServiceBuilder
from tests.support.browser import wait_for
from tests.support.common import Recorder, wait_until
from tests.support.ops import ServedApp

Builder = Callable[[], EventServiceBuilder]

READ_WORKERS = """
return Array.from(document.querySelectorAll('#workers tbody tr[data-id]')).map((row) =>
  Object.fromEntries(['host', 'pid', 'state', 'handlers'].map((field) =>
    [field, row.querySelector(`td[data-field="${field}"]`).textContent])));
"""
READ_UNATTENDED = """
return Array.from(document.querySelectorAll('#unattended li')).map((item) =>
  [item.dataset.type, item.textContent]);
"""
MARKUP = "<img src=x onerror=\"document.title='pwned'\">"


@dataclass
class Export(Event):
    id: str


@dataclass
class Reminder(Event):
    id: str


def shown_workers(driver: WebDriver) -> list[dict[str, str]]:
    return list(driver.execute_script(READ_WORKERS))


async def test_the_workers_panel_lists_live_workers_and_flags_unattended_types(
    service_builder: Builder,
    redis_client: redis.Redis,
    dashboard: ServedApp,
    browser: WebDriver,
) -> None:
    # A record with markup where its host goes: shown as text, never as markup.
    record = {
        "host": MARKUP,
        "pid": 1,
        "version": "0",
        "heartbeat": 60,
        "state": "stopping",
        "handlers": [{"type": MARKUP, "parallelism": 1, "in_hand": 0}],
    }
    await redis_client.hset(
        "aioqueue:{workers}:forged",
        mapping={"record": orjson.dumps(record), "started_at": 0, "beat_at": 0},
    )
    await redis_client.zadd("aioqueue:{workers}:index", {"forged": 2**50})

    service = service_builder().heartbeat(0.1).build()
    service.add_handler(Export, Recorder(), parallelism=2)
    async with service:
        await service.enqueue_many([Reminder(id=f"r-{n}") for n in range(3)], 0)

        async def listed() -> bool:
            return len(await service.workers()) == 2

        await wait_until(listed)
        await anyio.to_thread.run_sync(browser.get, f"{dashboard.base_url}/?interval=0.3")
        await wait_for(lambda: len(shown_workers(browser)) == 2)
        by_pid = {row["pid"]: row for row in shown_workers(browser)}
        assert by_pid[str(os.getpid())]["handlers"] == "Export 0/2"
        assert by_pid[str(os.getpid())]["state"] == "running"
        assert by_pid["1"]["host"] == MARKUP
        assert by_pid["1"]["handlers"] == f"{MARKUP} 0/1"
        assert not browser.find_elements(By.CSS_SELECTOR, "#workers img")
        assert browser.title != "pwned"
        # Reminder has due events and no running worker with a handler for it.
        await wait_for(
            lambda: (
                browser.execute_script(READ_UNATTENDED)
                == [["Reminder", "Reminder: 3 events due and no running worker handles it"]]
            )
        )
    # The service left the registry as it stopped; the forged record is still listed.
    await wait_for(lambda: [row["pid"] for row in shown_workers(browser)] == ["1"])
