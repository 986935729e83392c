"""aioqueue.django and the Django example (examples/django_app) with a real SQLite database,
real transactions and a real server: an event is written when its transaction commits, and
never when it rolls back.

Django is set up once for this module with the example's settings (a process can hold one
Django configuration); its database is a file of the test's own.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import django
import pytest
import redis
from django.core.management import call_command
from django.db import connections, transaction
from django.test import Client
from redis.exceptions import ConnectionError as RedisConnectionError

from aioqueue import InvalidEventError, SyncProducer
from aioqueue._transport.client import RedisClient
from aioqueue.django import enqueue_on_commit
from aioqueue.testing import EmbeddedServer, free_port
from tests.support.common import PaymentCheck, all_keys, queue_key, wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_app"


@pytest.fixture(scope="module")
def shop(redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The example shop, set up on a fresh database; yields its `shop.producer` module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLE))
        patch.setenv("DJANGO_SETTINGS_MODULE", "shop.settings")
        patch.setenv("SHOP_DATABASE", str(tmp_path_factory.mktemp("shop") / "db.sqlite3"))
        patch.setenv("AIOQUEUE_URL", redis_server.url)
        django.setup()
        call_command("migrate", verbosity=0)
        connections.close_all()
        import shop.producer

        yield shop.producer
        shop.producer.producer.close()


@pytest.fixture
def sync_redis(redis_server: EmbeddedServer) -> Iterator[redis.Redis]:
    """A blocking client of the session server, emptied first, for the tests that run
    Django on their own thread (no event loop: Django refuses database calls beside one)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()
    connections.close_all()  # this thread's database connection


@pytest.fixture
def producer(shop: Any, sync_redis: redis.Redis) -> SyncProducer:
    """The shop's producer, on the emptied session server."""
    made: SyncProducer = shop.producer
    return made


async def run_in_django_thread(call: Callable[[], Any]) -> Any:
    """Runs Django code on a thread without an event loop (Django refuses database access
    from one that runs a loop), closing that thread's database connection afterwards."""

    def run() -> Any:
        try:
            return call()
        finally:
            connections.close_all()

    return await anyio.to_thread.run_sync(run)


def order_count() -> int:
    from shop.models import Order

    count: int = Order.objects.count()
    return count


async def test_the_shop_schedules_a_check_for_a_committed_order_and_none_for_a_rolled_back_one(
    shop: Any, redis_client: RedisClient, redis_server: EmbeddedServer
) -> None:
    from shop import worker
    from shop.events import PaymentCheck as ShopPaymentCheck

    client = Client()
    before = await run_in_django_thread(order_count)
    refused = await run_in_django_thread(
        lambda: client.post("/orders", {"sku": "book", "quantity": 99, "check_after": 0})
    )
    assert refused.status_code == 409
    # The on-commit functions run inside the request, so the rollback's outcome is final
    # once the response is back: no order, and nothing in Redis (not even the type's record).
    assert await run_in_django_thread(order_count) == before
    assert await all_keys(redis_client) == []

    placed = await run_in_django_thread(
        lambda: client.post("/orders", {"sku": "book", "quantity": 2, "check_after": 0})
    )
    assert placed.status_code == 201
    reference = placed.json()["order"]
    assert await run_in_django_thread(order_count) == before + 1

    worker.checked.clear()
    async with worker.create_service(redis_server.url, "aioqueue"):

        async def checked() -> bool:
            return bool(worker.checked)

        await wait_until(checked)
        events = queue_key(ShopPaymentCheck.__name__, "events")

        async def settled() -> bool:
            return await redis_client.hlen(events) == 0

        await wait_until(settled)
    assert worker.checked == [reference]


SCHEDULE = queue_key("PaymentCheck", "schedule")


def test_an_event_is_written_when_the_transaction_commits(
    producer: SyncProducer, sync_redis: redis.Redis
) -> None:
    with transaction.atomic():
        enqueue_on_commit(producer, PaymentCheck(id="p-1", order_id=1), 3600)
        assert sync_redis.zscore(SCHEDULE, "p-1") is None
    assert sync_redis.zscore(SCHEDULE, "p-1") is not None


class ViewFailedError(Exception):
    pass


def test_a_rollback_drops_the_event(producer: SyncProducer, sync_redis: redis.Redis) -> None:
    def failing_view() -> None:
        with transaction.atomic():
            enqueue_on_commit(producer, PaymentCheck(id="p-1", order_id=1), 3600)
            raise ViewFailedError

    def failing_step() -> None:
        with transaction.atomic():
            enqueue_on_commit(producer, PaymentCheck(id="p-3", order_id=3), 3600)
            raise ViewFailedError

    with pytest.raises(ViewFailedError):
        failing_view()
    # A savepoint rolled back inside a committing transaction drops its events too.
    with transaction.atomic():
        enqueue_on_commit(producer, PaymentCheck(id="p-2", order_id=2), 3600)
        with pytest.raises(ViewFailedError):
            failing_step()
    assert sync_redis.zrange(SCHEDULE, 0, -1) == [b"p-2"]


def test_bad_input_raises_at_the_call_inside_the_transaction(
    producer: SyncProducer, sync_redis: redis.Redis
) -> None:
    from shop.models import Order

    def place_order_with_a_bad_event() -> None:
        with transaction.atomic():
            Order.objects.create(sku="pen", quantity=1)
            wrong = PaymentCheck(id="p-1", order_id="one")  # type: ignore[arg-type]
            enqueue_on_commit(producer, wrong, 3600)

    before = order_count()
    with pytest.raises(InvalidEventError, match=r"\$\.order_id"):
        place_order_with_a_bad_event()
    assert order_count() == before  # the transaction rolled back with the error
    assert sync_redis.keys() == []
    # A misspelt keyword is refused the same way, naming this function.
    misspelt: dict[str, Any] = {"replaced": True}
    refused = pytest.raises(TypeError, match=r"^enqueue_on_commit\(\) got an unexpected keyword")
    with refused, transaction.atomic():
        enqueue_on_commit(producer, PaymentCheck(id="p-1", order_id=1), 3600, **misspelt)
    assert sync_redis.keys() == []


def test_outside_a_transaction_it_is_written_at_once(
    producer: SyncProducer, sync_redis: redis.Redis
) -> None:
    enqueue_on_commit(producer, PaymentCheck(id="p-1", order_id=1), 3600)
    assert sync_redis.zscore(SCHEDULE, "p-1") is not None


def test_a_redis_error_at_commit_is_raised_after_the_commit_unless_robust(
    shop: Any, sync_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    from shop.models import Order

    unreachable = SyncProducer(f"redis://127.0.0.1:{free_port()}")

    def place_order(robust: bool) -> None:
        with transaction.atomic():
            Order.objects.create(sku="lost-check", quantity=1)
            enqueue_on_commit(unreachable, PaymentCheck(id="p-1", order_id=1), 3600, robust=robust)

    with pytest.raises(RedisConnectionError):
        place_order(robust=False)
    # The order committed; its event is lost: what an outbox would be for.
    assert Order.objects.filter(sku="lost-check").count() == 1

    with caplog.at_level(logging.ERROR, logger="django.db.backends.base"):
        place_order(robust=True)
    assert Order.objects.filter(sku="lost-check").count() == 2
    assert "Error calling enqueue of PaymentCheck 'p-1' in on_commit()" in caplog.text
    unreachable.close()


def test_without_django_the_import_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['django'] = None  # as if it were not installed\n"
        "try:\n"
        "    import aioqueue.django\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, '|', error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == (
        "ModuleNotFoundError | aioqueue.django needs Django: pip install 'aioqueue-redis[django]'"
    )
