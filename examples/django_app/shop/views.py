"""Placing an order: the order and its payment check commit together, or neither happens."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from aioqueue.django import enqueue_on_commit

from .events import PaymentCheck
from .models import Order
from .producer import producer

IN_STOCK = 10


class OutOfStockError(Exception):
    pass


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    sku = request.POST["sku"]
    quantity = int(request.POST.get("quantity", "1"))
    check_after = timedelta(seconds=float(request.POST.get("check_after", "3600")))
    try:
        with transaction.atomic():
            order = Order.objects.create(sku=sku, quantity=quantity)
            enqueue_on_commit(
                producer,
                PaymentCheck(id=f"check-{order.reference}", order_reference=str(order.reference)),
                check_after,
            )
            # Found out after the check was asked for: the rollback takes the order, and the
            # check with it, since it was to be written only on commit.
            if quantity > IN_STOCK:
                raise OutOfStockError(sku)
    except OutOfStockError:
        return JsonResponse({"error": f"only {IN_STOCK} {sku} in stock"}, status=409)
    return JsonResponse({"order": str(order.reference)}, status=201)
