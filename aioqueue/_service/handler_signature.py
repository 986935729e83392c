"""What a handler's signature says about the events it takes.

Registration reads it twice: to refuse a handler whose first parameter is annotated with
another event class than the one it is added for, and to let the decorator form infer the
event class from that annotation.
"""

from __future__ import annotations

import inspect

from aioqueue._model.errors import HandlerRegistrationError
from aioqueue._model.event import Event

__all__ = ["annotated_event_class"]


def annotated_event_class(handler: object) -> type[Event] | None:
    """The Event subclass the handler's first parameter is annotated with.

    None when the first parameter has no annotation, or one that is not an Event subclass
    (`Any`, `object`, a union): those are taken on trust. Raises HandlerRegistrationError when
    the handler takes no positional parameter, or when its annotation cannot be evaluated
    (a name imported only under TYPE_CHECKING, say), since the handler could then not be
    checked at all.
    """
    try:
        signature = inspect.signature(handler, eval_str=True)  # type: ignore[arg-type]
    except (NameError, AttributeError, SyntaxError) as exc:
        raise HandlerRegistrationError(
            f"cannot read the annotations of handler {_name_of(handler)}: {exc}"
        ) from exc
    except (TypeError, ValueError):
        return None  # a builtin or other callable without a signature: nothing to check
    parameters = [
        parameter
        for parameter in signature.parameters.values()
        if parameter.kind
        in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if not parameters:
        raise HandlerRegistrationError(
            f"handler {_name_of(handler)} takes no positional parameter; it is called with the "
            "event as its only argument"
        )
    annotation = parameters[0].annotation
    if isinstance(annotation, type) and issubclass(annotation, Event):
        return annotation
    return None


def _name_of(handler: object) -> str:
    return str(getattr(handler, "__qualname__", type(handler).__qualname__))
