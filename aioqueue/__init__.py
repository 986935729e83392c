"""aioqueue: delayed events for asyncio on Redis.

service = EventService.builder().url("redis://localhost:6379").build()
async with service:
    service.add_handler(PaymentCheck, check_payment, parallelism=4)
    await service.enqueue(PaymentCheck(id="p-1", order_id=42), timedelta(hours=3))
"""

from ._builder import EventServiceBuilder
from ._config import ServiceConfig
from ._envelope import DeadLetter
from ._errors import (
    AioqueueError,
    ConfigurationError,
    EventDefinitionError,
    HandlerRegistrationError,
    InvalidEnqueueError,
    PayloadDecodeError,
    PayloadTooLargeError,
    SerializationError,
    ServiceStateError,
)
from ._event import Event, event_context, event_type_name
from ._instrumentation import HandlingScope, Instrumentation, NoInstrumentation
from ._metrics import Metrics, NoMetrics, Outcome
from ._retry import ExponentialBackoff, FixedDelays, RetryPolicy
from ._serializer import JsonSerializer, Serializer
from ._service import EventService, ServiceState

__all__ = [
    "AioqueueError",
    "ConfigurationError",
    "DeadLetter",
    "Event",
    "EventDefinitionError",
    "EventService",
    "EventServiceBuilder",
    "ExponentialBackoff",
    "FixedDelays",
    "HandlerRegistrationError",
    "HandlingScope",
    "Instrumentation",
    "InvalidEnqueueError",
    "JsonSerializer",
    "Metrics",
    "NoInstrumentation",
    "NoMetrics",
    "Outcome",
    "PayloadDecodeError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "SerializationError",
    "Serializer",
    "ServiceConfig",
    "ServiceState",
    "ServiceStateError",
    "event_context",
    "event_type_name",
]

__version__ = "0.1.0"
