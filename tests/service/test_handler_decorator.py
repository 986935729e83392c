"""@service.handler: the decorator form registers exactly as add_handler does, on a real
server, with the event class named or read from the first parameter's annotation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aioqueue import EventServiceBuilder, HandlerRegistrationError
from tests.support.common import OrderTimeout, PaymentCheck

pytestmark = pytest.mark.backends("standalone")

Builder = Callable[[], EventServiceBuilder]


async def test_the_three_forms_register_and_deliver(service_builder: Builder) -> None:
    seen: list[str] = []
    async with service_builder().build() as service:

        @service.handler(PaymentCheck, parallelism=4)
        async def named(event: PaymentCheck) -> bool:
            seen.append(f"named {event.id}")
            return True

        @service.handler
        async def inferred(event: OrderTimeout) -> bool:
            seen.append(f"inferred {event.id}")
            return True

        # The decorator hands the function back unchanged: it is still callable directly.
        assert await named(PaymentCheck(id="direct", order_id=0))
        assert await inferred(OrderTimeout(id="direct-o"))
        seen.clear()
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await service.enqueue(OrderTimeout(id="o-1"), 0)
        assert await service.run_due() == 0  # both due already: handled, nothing made early
    assert sorted(seen) == ["inferred o-1", "named p-1"]


async def test_the_parallelism_form_infers_the_class_and_refuses_a_duplicate(
    service_builder: Builder,
) -> None:
    async with service_builder().build() as service:

        @service.handler(parallelism=2)
        async def first(event: PaymentCheck) -> bool:
            return True

        with pytest.raises(HandlerRegistrationError, match="already registered"):

            @service.handler(PaymentCheck)
            async def second(event: PaymentCheck) -> bool:
                return True

        assert service.remove_handler(PaymentCheck)


async def test_an_unannotated_handler_without_a_class_is_refused(service_builder: Builder) -> None:
    async with service_builder().build() as service:
        with pytest.raises(HandlerRegistrationError, match="annotate its first parameter"):

            @service.handler(parallelism=2)
            async def anything(event):  # type: ignore[no-untyped-def]
                return True
