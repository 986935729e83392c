"""Registration refuses handlers that could never work; errors leave `async with` as raised."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import redis.exceptions

from aioqueue import (
    EventService,
    EventServiceBuilder,
    HandlerRegistrationError,
    Outcome,
    ServiceFailedError,
)
from aioqueue.testing import free_port
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, wait_until
from tests.support.ops import ROOT

Builder = Callable[[], EventServiceBuilder]


async def check_order_timeout(event: OrderTimeout) -> bool:
    return True


async def check_payment(event: PaymentCheck) -> bool:
    return True


@pytest.mark.backends("standalone")
async def test_handlers_that_could_never_work_are_refused_at_registration(
    service_builder: Builder,
) -> None:
    service = service_builder().build()
    refused: list[tuple[Any, dict[str, Any], str]] = [
        (None, {}, "must be a function"),
        (42, {}, "must be a function"),
        (check_payment(PaymentCheck(id="p", order_id=1)), {}, "is a coroutine object"),
        (check_order_timeout, {}, "takes OrderTimeout events but is added for PaymentCheck"),
        (check_payment, {"parallelism": 0}, "parallelism must be an integer >= 1"),
        (lambda: True, {}, "takes no positional parameter"),
    ]
    for handler, options, reason in refused:
        with pytest.raises(HandlerRegistrationError, match=reason):
            service.add_handler(PaymentCheck, handler, **options)
    service.add_handler(PaymentCheck, check_payment)  # nothing half-registered before it
    with pytest.raises(HandlerRegistrationError, match="already registered"):
        service.add_handler(PaymentCheck, lambda event: True)


@pytest.mark.backends("standalone", "cluster")
async def test_a_handler_that_returns_none_fails_with_a_hint(service_builder: Builder) -> None:
    """Forgetting `return True` is the commonest handler bug: the error says what to do."""

    async def forgets_to_return(event: PaymentCheck) -> bool:
        return None  # type: ignore[return-value]

    def returns_text(event: OrderTimeout) -> bool:
        return "done"  # type: ignore[return-value]

    async with service_builder().retry_attempts(1).build() as service:
        service.add_handler(PaymentCheck, forgets_to_return)
        service.add_handler(OrderTimeout, returns_text)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await service.enqueue(OrderTimeout(id="o-1"), 0)

        async def both_dead() -> bool:
            return bool(
                await service.dead_letters(PaymentCheck)
                and await service.dead_letters(OrderTimeout)
            )

        await wait_until(both_dead)
        [payment] = await service.dead_letters(PaymentCheck)
        [timeout] = await service.dead_letters(OrderTimeout)
    assert payment.error.endswith(
        "forgets_to_return returned None on attempt 1; return True when the event is done "
        "(False or an exception to try again)"
    )
    assert "returns_text returned 'done' on attempt 1; return True" in timeout.error


@pytest.mark.backends("standalone")
async def test_an_error_in_the_block_leaves_as_raised(service_builder: Builder) -> None:
    service = service_builder().build()
    service.add_handler(PaymentCheck, Recorder())
    with pytest.raises(KeyError) as raised:
        async with service:
            raise KeyError("order-42")
    assert raised.type is KeyError  # itself, not an exception group holding it
    assert raised.value.args == ("order-42",)
    assert service.state.value == "closed"


async def test_an_enqueue_with_no_server_raises_a_connection_error() -> None:
    service = EventService.builder().url(f"redis://127.0.0.1:{free_port()}").build()
    with pytest.raises(redis.exceptions.ConnectionError):
        async with service:
            await service.enqueue(PaymentCheck(id="p-1", order_id=1), 60)


class BrokenMetrics:
    """A metrics plugin with a bug: the consumer that reports to it dies."""

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        pass

    def events_dispatched(self, event_type: str, count: int) -> None:
        pass

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        raise ZeroDivisionError("a bug in a metrics plugin")


DIED = r"consumer of PaymentCheck died: ZeroDivisionError\('a bug in a metrics plugin'\)"


@pytest.mark.backends("standalone")
async def test_a_background_task_that_dies_fails_the_next_operation_and_the_exit(
    service_builder: Builder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="aioqueue")
    with pytest.raises(ServiceFailedError) as on_exit:  # noqa: PT012 -- the whole block's exit
        async with service_builder().metrics(BrokenMetrics()).build() as service:
            service.add_handler(PaymentCheck, check_payment)
            await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)

            async def died() -> bool:
                return any("died" in record.getMessage() for record in caplog.records)

            await wait_until(died)
            with pytest.raises(ServiceFailedError, match=DIED) as next_operation:
                await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)
    for raised in (next_operation, on_exit):
        assert raised.match(DIED)
        assert raised.value.__cause__ is not None  # the task's error, with its traceback
    [record] = [r for r in caplog.records if "died" in r.getMessage()]
    assert record.exc_info is not None  # logged with its traceback when it happened


@pytest.mark.backends("standalone")
async def test_the_fastapi_lifespan_catches_an_unreachable_server_from_the_block() -> None:
    """examples/fastapi_app.py turns a ConnectionError raised inside `async with service:`
    into a clear start-up failure; uvicorn reports it and exits."""
    app = subprocess.run(  # noqa: ASYNC221 -- nothing else runs meanwhile
        [sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", "examples",
         "--port", str(free_port())],
        cwd=ROOT,
        env={**os.environ, "AIOQUEUE_URL": f"redis://127.0.0.1:{free_port()}"},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert app.returncode != 0
    assert "RuntimeError: cannot start: Redis at redis://127.0.0.1:" in app.stderr
    assert "ExceptionGroup" not in app.stderr
