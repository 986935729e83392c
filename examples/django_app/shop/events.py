"""The shop's events. No Django here: the workers that handle them import this module too."""

from __future__ import annotations

from dataclasses import dataclass

from aioqueue import Event


@dataclass
class PaymentCheck(Event):
    """Cancel the order if it is still unpaid by then."""

    id: str
    order_reference: str
