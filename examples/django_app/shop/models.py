"""An order, identified outside the database by a random reference."""

from __future__ import annotations

import uuid

from django.db import models


class Order(models.Model):
    # A reference rather than the primary key names the order in events: SQLite hands a
    # rolled-back order's id to the next order, which would then match the wrong events.
    reference = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    sku = models.CharField(max_length=64)
    quantity = models.PositiveIntegerField()
    placed_at = models.DateTimeField(auto_now_add=True)
