"""What a handler's signature says about the events it takes.

Registration reads it twice: to refuse a handler whose first parameter is annotated with
another event class than the one it is added for, and to let the decorator form
(`handler_decorator`) infer the event class from that annotation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from aioqueue._model.errors import HandlerRegistrationError
from aioqueue._model.event import Event

__all__ = ["annotated_event_class", "handled_event_class", "handler_decorator"]


class _AddHandler(Protocol):
    def __call__(
        self, event_class: type[Event], handler: Callable[..., Any], *, parallelism: int
    ) -> None: ...


def annotated_event_class(handler: object) -> type[Event] | None:
    """The Event subclass the handler's first parameter is annotated with.

    None when the first parameter has no annotation, or one that is not an Event subclass
    (`Any`, `object`, a union), or when the annotations cannot be evaluated at run time (a
    name imported only under TYPE_CHECKING): those are taken on trust, as the type checker
    already checks them. Raises HandlerRegistrationError when the handler takes no positional
    parameter.
    """
    try:
        signature = inspect.signature(handler, eval_str=True)  # type: ignore[arg-type]
    except (NameError, AttributeError, SyntaxError):
        # Only the type checker can resolve them; the parameter count still can be checked.
        signature = inspect.signature(handler)  # type: ignore[arg-type]
        _positional_parameters(handler, signature)
        return None
    except (TypeError, ValueError):
        return None  # a builtin or other callable without a signature: nothing to check
    annotation = _positional_parameters(handler, signature)[0].annotation
    if isinstance(annotation, type) and issubclass(annotation, Event):
        return annotation
    return None


def handled_event_class(handler: object) -> type[Event]:
    """The event class a handler decorated without one takes, from its annotation; raises
    HandlerRegistrationError when the annotation does not say."""
    event_class = annotated_event_class(handler)
    if event_class is None:
        raise HandlerRegistrationError(
            f"cannot tell which events {_name_of(handler)!r} takes: annotate its first "
            "parameter with the event class, or name the class (@service.handler(PaymentCheck))"
        )
    return event_class


def handler_decorator(
    add_handler: _AddHandler, target: type[Event] | Callable[..., Any] | None, parallelism: int
) -> Any:
    """What `@service.handler(...)` stands for: a decorator that registers the function it
    decorates through `add_handler` and returns it unchanged, or, for a bare
    `@service.handler` (`target` is the function), the function registered at once."""
    if target is not None and not isinstance(target, type):
        add_handler(handled_event_class(target), target, parallelism=parallelism)
        return target
    event_class = target

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        add_handler(event_class or handled_event_class(function), function, parallelism=parallelism)
        return function

    return register


def _positional_parameters(
    handler: object, signature: inspect.Signature
) -> list[inspect.Parameter]:
    parameters = [
        parameter
        for parameter in signature.parameters.values()
        if parameter.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        )
    ]
    if not parameters:
        raise HandlerRegistrationError(
            f"handler {_name_of(handler)} takes no positional parameter; it is called with the "
            "event as its only argument"
        )
    return parameters


def _name_of(handler: object) -> str:
    return str(getattr(handler, "__qualname__", type(handler).__qualname__))
