"""The errors aioqueue raises.

    AioqueueError
    ├── ConfigurationError         a builder setting is missing or out of range
    │   └── PartitionCountMismatchError  a type's partition count differs from the registry's
    ├── EventDefinitionError       an event class cannot be used as an event
    ├── InvalidEnqueueError        enqueue arguments rejected (id, delay, at, context)
    │   ├── InvalidEventError      an event's values do not fit its class (str in an int
    │   │                          field, NaN): its handler could never decode it
    │   └── PayloadTooLargeError   the payload and context exceed max_payload_bytes
    ├── SerializationError         an event could not be encoded into a payload
    ├── PayloadDecodeError         a stored payload could not be decoded into its class
    ├── InvalidCursorError         a page cursor that no page of pending events handed out
    ├── DurabilityError            an enqueue was not confirmed by the replicas (or the
    │                              primary's AOF) in time: the events may exist or not
    ├── HandlerRegistrationError   a handler cannot be added (duplicate, bad parallelism)
    ├── RedisUnavailableError      a service or producer could not reach Redis at start
    ├── OutsideHandlerError        current_delivery() called where no handler runs
    └── ServiceStateError          the call does not fit the service's state (e.g. closed)
        └── ServiceFailedError     a background task of the service died (a bug): it no
                                   longer works; the task's error is the __cause__

The value errors also derive from ValueError and the definition error from TypeError, so
code that catches the builtin categories keeps working; RedisUnavailableError derives from
redis-py's ConnectionError, which is what a call raised there before.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = [
    "AioqueueError",
    "ConfigurationError",
    "DurabilityError",
    "EventDefinitionError",
    "HandlerRegistrationError",
    "InvalidCursorError",
    "InvalidEnqueueError",
    "InvalidEventError",
    "OutsideHandlerError",
    "PartitionCountMismatchError",
    "PayloadDecodeError",
    "PayloadTooLargeError",
    "RedisUnavailableError",
    "SerializationError",
    "ServiceFailedError",
    "ServiceStateError",
]


class AioqueueError(Exception):
    """Root of every error raised by aioqueue."""


class ConfigurationError(AioqueueError, ValueError):
    """A builder setting is missing or out of its allowed range."""


class PartitionCountMismatchError(ConfigurationError):
    """A type's partition count differs from the one the prefix's registry records (or the
    registry's entry is unusable): writing or reading other keys would lose events."""


class EventDefinitionError(AioqueueError, TypeError):
    """An event class cannot be used: not an Event, no `id` field, or a bad wire name."""


class InvalidEnqueueError(AioqueueError, ValueError):
    """The arguments of an enqueue were rejected before anything was written."""


class InvalidCursorError(AioqueueError, ValueError):
    """A cursor passed to `pending()` (or the CLI and HTTP listings) that no page handed out."""


class InvalidEventError(InvalidEnqueueError):
    """An event whose values do not fit its class (a str in an int field, a float that is
    NaN or infinite): written, it could never be decoded for its handler, so it is refused
    before anything is written. The message names the field path."""


class PayloadTooLargeError(InvalidEnqueueError):
    """An event's payload and context are larger than the service's max_payload_bytes."""


class SerializationError(AioqueueError, ValueError):
    """An event could not be encoded into a JSON payload."""


class PayloadDecodeError(AioqueueError, ValueError):
    """A stored payload could not be decoded into its event class.

    Consumers never raise this to the caller: the event goes to the dead-letter set with
    this error's message.
    """


class DurabilityError(AioqueueError):
    """An enqueue under `durability(...)` was written to the primary but not confirmed in
    time: fewer replicas than asked acknowledged it (`WAIT`), or the primary did not write it
    to its AOF (`WAITAOF`), or the server refused the confirmation itself.

    The events may exist: they are on the primary and are delivered as usual unless the
    primary dies before a replica has them, and then they are gone. Enqueue is idempotent
    per event id, so the safe reaction is to enqueue the same events again until the call
    returns; an event already stored then comes back as False (not scheduled again), and its
    confirmation covers the stored version. `replicas` is how many were asked for,
    `confirmed` how many the least confirmed connection got (None when the server refused
    the confirmation itself).
    """

    def __init__(self, message: str, *, replicas: int, confirmed: int | None) -> None:
        super().__init__(message)
        self.replicas = replicas
        self.confirmed = confirmed

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword arguments are not in `args`: without this, unpickling (a Spark task's error
        # on its way to the driver) would fail instead of raising this error.
        return (_durability_error, (str(self), self.replicas, self.confirmed))


def _durability_error(message: str, replicas: int, confirmed: int | None) -> DurabilityError:
    return DurabilityError(message, replicas=replicas, confirmed=confirmed)


class HandlerRegistrationError(AioqueueError, ValueError):
    """A handler cannot be added: not a function, one that cannot take the event class, one
    already registered for the type, or an invalid parallelism."""


class RedisUnavailableError(AioqueueError, RedisConnectionError):
    """Redis could not be reached when a service started (`async with service:`) or on a
    SyncProducer's first call of an event class: the server is down, the address is wrong,
    or it refused the credentials. The message names the server (its URL with passwords
    masked, or a client's host and port) and the cause; the cause's traceback is logged at
    DEBUG. A service that did not start is closed: build another to try again.

    Only the start is checked: a running service rides out later outages on its own, and its
    calls then raise redis-py's errors. Derives from `redis.exceptions.ConnectionError`, so
    code that catches that keeps working."""


class OutsideHandlerError(AioqueueError, RuntimeError):
    """`current_delivery()` was called outside a handler: no delivery is under way there."""


class ServiceStateError(AioqueueError, RuntimeError):
    """The service is in the wrong state for this call, for example already closed."""


class ServiceFailedError(ServiceStateError):
    """A background task of the service (dispatcher, consumer, watchdog) died of an
    unexpected error: a bug, since they outlast Redis outages on their own. Raised by the
    service's next operation and on leaving `async with service:`, with the task's error as
    `__cause__`; the crash was also logged with its traceback when it happened."""
