"""Scheduling an event only if the Django transaction that decided it commits.

    from aioqueue.django import enqueue_on_commit

    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue_on_commit(producer, PaymentCheck(id=f"check-{order.pk}", order_id=order.pk),
                          timedelta(hours=3))

Needs the `django` extra (`pip install 'aioqueue-redis[django]'`).

What it promises: an event is written after its transaction commits, and never when the
transaction rolls back. What it does not: the write happens after the commit, so a process
that dies (or a Redis that cannot be reached) between the commit and the write loses the
event while the rows stay. An event that must never be lost belongs in an outbox: a table the
application owns, written in the same transaction and copied to aioqueue by a job of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    from django.db import transaction
except ImportError as exc:
    raise ModuleNotFoundError(
        "aioqueue.django needs Django: pip install 'aioqueue-redis[django]'", name="django"
    ) from exc

from aioqueue._model.checks import refuse_unknown_keywords
from aioqueue._model.durations import Duration
from aioqueue._model.event import Event
from aioqueue._producing.enqueue_options import EnqueueOptions
from aioqueue._sync.producer import SyncProducer

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11 (3.10 is supported)

__all__ = ["enqueue_on_commit"]


def enqueue_on_commit(
    producer: SyncProducer,
    event: Event,
    delay: Duration | None = None,
    *,
    using: str | None = None,
    robust: bool = False,
    **options: Unpack[EnqueueOptions],
) -> None:
    """Schedules `event` (as `producer.enqueue` would) once the current transaction of the
    database `using` commits; never if it rolls back. Outside a transaction (autocommit) it
    is written at once, as Django's `transaction.on_commit` does.

    The event is checked now: bad input raises InvalidEnqueueError here, inside the
    transaction, where it can still roll back. A `delay` counts from the commit.

    The write runs during the commit's exit: a Redis error then is raised from the
    `atomic()` block (or the request) after the data committed, unless `robust=True`, with
    which Django logs it and runs the remaining on-commit functions.
    """
    refuse_unknown_keywords("enqueue_on_commit", options, EnqueueOptions.__optional_keys__)
    write = producer.prepare(event, delay, **options)
    transaction.on_commit(write, using=using, robust=robust)
