"""The first example of the docs, end to end through the public API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from aioqueue import EventServiceBuilder
from tests.support.common import PaymentCheck, Recorder

pytestmark = pytest.mark.backends("standalone", "cluster")


async def test_event_reaches_its_handler_with_payload_and_context(
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=4)
        scheduled = await service.enqueue(
            PaymentCheck(id="p-1", order_id=42),
            timedelta(milliseconds=100),
            context={"trace_id": "abc"},
        )
        [delivery] = await handler.wait_for(1)
    assert scheduled is True
    assert delivery.event == PaymentCheck(id="p-1", order_id=42)
    assert delivery.context == {"trace_id": "abc"}
