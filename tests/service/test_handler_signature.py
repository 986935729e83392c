"""annotated_event_class: the event class a handler's first parameter names."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

from aioqueue import HandlerRegistrationError
from aioqueue._service.handler_signature import annotated_event_class
from tests.support.common import OrderTimeout, PaymentCheck

if TYPE_CHECKING:
    from tests.support.common import Recorder


async def takes_payment_check(event: PaymentCheck) -> bool:
    return True


async def takes_anything(event: Any) -> bool:
    return True


async def unannotated(event):  # type: ignore[no-untyped-def]
    return True


class CallableHandler:
    async def __call__(self, event: OrderTimeout) -> bool:
        return True


def test_the_first_parameter_names_the_class() -> None:
    assert annotated_event_class(takes_payment_check) is PaymentCheck
    assert annotated_event_class(CallableHandler()) is OrderTimeout
    assert annotated_event_class(CallableHandler().__call__) is OrderTimeout


def test_partials_keep_the_annotation_of_what_they_wrap() -> None:
    async def with_extra(event: PaymentCheck, retries: int) -> bool:
        return True

    assert annotated_event_class(functools.partial(with_extra, retries=3)) is PaymentCheck


def test_no_annotation_or_a_non_event_annotation_is_taken_on_trust() -> None:
    assert annotated_event_class(takes_anything) is None
    assert annotated_event_class(unannotated) is None
    assert annotated_event_class(lambda event: True) is None


def test_a_handler_without_a_parameter_is_refused() -> None:
    async def no_parameter() -> bool:
        return True

    with pytest.raises(HandlerRegistrationError, match="takes no positional parameter"):
        annotated_event_class(no_parameter)


def test_an_annotation_only_the_type_checker_can_resolve_is_taken_on_trust() -> None:
    async def only_for_the_type_checker(event: Recorder) -> bool:
        return True

    async def no_parameter_either() -> Recorder:
        raise AssertionError

    assert annotated_event_class(only_for_the_type_checker) is None
    with pytest.raises(HandlerRegistrationError, match="takes no positional parameter"):
        annotated_event_class(no_parameter_either)
