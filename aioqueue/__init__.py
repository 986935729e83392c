"""aioqueue: delayed events for asyncio on Redis.

service = EventService.builder().url("redis://localhost:6379").build()
async with service:
    service.add_handler(PaymentCheck, check_payment, parallelism=4)
    await service.enqueue(PaymentCheck(id="p-1", order_id=42), timedelta(hours=3))

From blocking code (Django, Flask, scripts): SyncProducer(url).enqueue(event, delay).
"""

from ._model.batches import BatchOutcome
from ._model.config import Durability, ProducerConfig, ServiceConfig
from ._model.delivery import Delivery, current_deliveries, current_delivery
from ._model.errors import (
    AioqueueError,
    ConfigurationError,
    DurabilityError,
    EventDefinitionError,
    HandlerRegistrationError,
    InvalidCursorError,
    InvalidEnqueueError,
    InvalidEventError,
    OutsideHandlerError,
    PartitionCountMismatchError,
    PayloadDecodeError,
    PayloadTooLargeError,
    RedisUnavailableError,
    SerializationError,
    ServiceFailedError,
    ServiceStateError,
)
from ._model.event import Event, event_context, event_type_name
from ._model.health import HealthReport
from ._model.instrumentation import HandlingScope, Instrumentation, NoInstrumentation
from ._model.metrics import Metrics, NoMetrics, Outcome
from ._model.retry import ExponentialBackoff, FixedDelays, RetryPolicy
from ._model.serializer import JsonSerializer, Serializer
from ._model.workers import Worker, WorkerHandler, WorkerState
from ._producing.enqueue_options import EnqueueOptions
from ._recurring.records import ScheduleInfo
from ._service.builder import EventServiceBuilder
from ._service.service import EventService, ServiceState
from ._sync.producer import SyncProducer
from ._version import __version__ as __version__
from ._wire.browse import EventInfo, PendingEvent, PendingPage
from ._wire.envelope import DeadLetter

__all__ = [
    "AioqueueError",
    "BatchOutcome",
    "ConfigurationError",
    "DeadLetter",
    "Delivery",
    "Durability",
    "DurabilityError",
    "EnqueueOptions",
    "Event",
    "EventDefinitionError",
    "EventInfo",
    "EventService",
    "EventServiceBuilder",
    "ExponentialBackoff",
    "FixedDelays",
    "HandlerRegistrationError",
    "HandlingScope",
    "HealthReport",
    "Instrumentation",
    "InvalidCursorError",
    "InvalidEnqueueError",
    "InvalidEventError",
    "JsonSerializer",
    "Metrics",
    "NoInstrumentation",
    "NoMetrics",
    "Outcome",
    "OutsideHandlerError",
    "PartitionCountMismatchError",
    "PayloadDecodeError",
    "PayloadTooLargeError",
    "PendingEvent",
    "PendingPage",
    "ProducerConfig",
    "RedisUnavailableError",
    "RetryPolicy",
    "ScheduleInfo",
    "SerializationError",
    "Serializer",
    "ServiceConfig",
    "ServiceFailedError",
    "ServiceState",
    "ServiceStateError",
    "SyncProducer",
    "Worker",
    "WorkerHandler",
    "WorkerState",
    "current_deliveries",
    "current_delivery",
    "event_context",
    "event_type_name",
]
