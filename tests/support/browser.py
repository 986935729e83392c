"""A real headless Chromium and a real `aioqueue serve` process for the dashboard tests.

Chromium and ChromeDriver come from Debian (`chromium`, `chromium-driver`); the fixture
installs them with apt-get when they are missing and the tests run as root, as CI does, one
test process at a time (tests/support/apt_turns.py).
Registered as a plugin in conftest.py, so every dashboard test module shares one browser.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import anyio
import pytest
import redis.asyncio as redis
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from aioqueue import Event, EventServiceBuilder, event_type_name
from aioqueue.testing import EmbeddedServer
from tests.support.apt_turns import apt_get, apt_turn
from tests.support.common import queue_key, wait_until
from tests.support.ops import ServedApp, serve

# The flags this machine needs: without the background-networking ones Chromium keeps trying
# to reach Google's hosts, which a closed network refuses.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def _browser_binaries() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.fail("the dashboard test needs Debian's chromium and chromium-driver packages")
    with apt_turn():
        # Another test process may have installed them while this one waited for its turn.
        chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
        if chromium and driver:
            return chromium, driver
        apt_get(["update", "-qq"], timeout=600)
        apt_get(["install", "-y", "-qq", "chromium", "chromium-driver"], timeout=900)
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium, "apt-get installed chromium but it is not on PATH"
    assert driver, "apt-get installed chromium-driver but chromedriver is not on PATH"
    return chromium, driver


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    chromium, driver_path = _browser_binaries()
    options = webdriver.ChromeOptions()
    # Both paths given, so Selenium Manager never tries to download a browser or driver.
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def dashboard(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as app:
        yield app


async def wait_for(condition: Callable[[], bool], within: float = 10.0) -> None:
    async def check() -> bool:
        return await anyio.to_thread.run_sync(condition)

    await wait_until(check, within)


def click(driver: WebDriver, selector: str) -> None:
    """A real click on a table's button, found again if a redraw replaced it meanwhile."""
    for _ in range(20):
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the button {selector} kept being redrawn")


async def bury(builder: EventServiceBuilder, client: redis.Redis, event: Event, error: str) -> None:
    """Makes `event` a dead letter: its only attempt raises ValueError(error)."""

    async def reject(received: Event) -> bool:
        raise ValueError(error)

    service = builder.retry_attempts(1).build()
    async with service:
        service.add_handler(type(event), reject)
        await service.enqueue(event, 0)
        dead_letters = queue_key(event_type_name(type(event)), "dead_letters")

        async def buried() -> bool:
            return bool(await client.hexists(dead_letters, event.id))

        await wait_until(buried)
