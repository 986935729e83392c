"""The shop's worker: handles the payment checks the web processes schedule.

    aioqueue worker shop.worker:create_service --app-dir examples/django_app \
        --url redis://localhost:6379

Async and free of Django: it needs only the event class. A handler that reads the database
through Django's ORM would be a plain `def` (aioqueue runs those in worker threads) in a
process that called `django.setup()` first.
"""

from __future__ import annotations

from aioqueue import EventService

from .events import PaymentCheck

checked: list[str] = []


async def check_payment(event: PaymentCheck) -> bool:
    checked.append(event.order_reference)  # a real shop would cancel an unpaid order here
    print(f"payment check of order {event.order_reference}", flush=True)
    return True


def create_service(url: str, prefix: str) -> EventService:
    service = EventService.builder().url(url).prefix(prefix).build()
    service.add_handler(PaymentCheck, check_payment, parallelism=8)
    return service
