"""A Django shop whose orders schedule a payment check, only if the order commits.

    pip install 'aioqueue-redis[django]'
    cd examples/django_app
    python manage.py migrate
    AIOQUEUE_URL=redis://localhost:6379 python manage.py runserver
    curl -X POST localhost:8000/orders -d sku=book -d quantity=1     # 201: check scheduled
    curl -X POST localhost:8000/orders -d sku=book -d quantity=99    # 409: rolled back, none

shop/views.py places the order and calls `aioqueue.django.enqueue_on_commit` inside one
`transaction.atomic()` block; shop/producer.py holds the process's one SyncProducer. The
checks are delivered by shop/worker.py (`aioqueue worker shop.worker:create_service --app-dir
examples/django_app`), or by any EventService that handles `PaymentCheck` (shop/events.py).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
