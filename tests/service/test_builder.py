"""The builder validates every setting at build() and freezes the result."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
from datetime import timedelta

import pytest

from aioqueue import (
    ConfigurationError,
    Durability,
    EventService,
    ExponentialBackoff,
    FixedDelays,
    JsonSerializer,
    NoMetrics,
)
from aioqueue._model.config import ServiceConfig
from aioqueue._model.settings import settings_of
from aioqueue._service.builder import EventServiceBuilder
from aioqueue._sync.producer import SyncProducer
from aioqueue._transport.client import client_from_url


def test_defaults_are_documented_values() -> None:
    service = EventService.builder().url("redis://127.0.0.1:1").build()
    config = service.config
    assert config.prefix == "aioqueue"
    assert config.scheduling_interval == 0.5
    assert config.scheduling_batch_size == 100
    assert config.retry_attempts == 10
    assert config.handler_timeout == 30.0
    assert isinstance(config.retry_policy, ExponentialBackoff)
    assert isinstance(config.serializer, JsonSerializer)
    assert isinstance(config.metrics, NoMetrics)


def test_every_setting_is_declared_once_on_the_builder_and_is_a_config_field() -> None:
    declared = [setting.name for setting in settings_of(EventServiceBuilder)]
    fields = [field.name for field in dataclasses.fields(ServiceConfig)]
    assert len(set(declared)) == len(declared)
    # The config's fields are the declared settings, in order, then the four the builder
    # assembles from several calls (per type, or a pair of values).
    assert fields == [*declared, "enable_scheduling", "partitions", "rate_limits", "durability"]
    for setting in settings_of(EventServiceBuilder):
        assert getattr(EventServiceBuilder, setting.name) is setting
        # Every setting says what it does and its default where the builder declares it.
        assert "default" in _attribute_docstring(EventServiceBuilder, setting.name)


def test_sync_producer_takes_the_builders_defaults_and_checks() -> None:
    producer = SyncProducer("redis://127.0.0.1:1")
    service = EventService.builder().url("redis://127.0.0.1:1").build()
    for name in ("prefix", "max_payload_bytes"):
        assert getattr(producer._config, name) == getattr(service.config, name)
    for name in ("serializer", "metrics", "instrumentation"):
        assert type(getattr(producer._config, name)) is type(getattr(service.config, name))
    producer.close()
    with pytest.raises(ConfigurationError, match="max_payload_bytes must be an integer"):
        SyncProducer("redis://127.0.0.1:1", max_payload_bytes=0)
    with pytest.raises(ConfigurationError, match="max_payload_bytes must be an integer"):
        EventService.builder().url("redis://127.0.0.1:1").max_payload_bytes(0).build()


def _attribute_docstring(owner: type, name: str) -> str:
    """The string literal right below `name = ...` in the class body."""

    body = ast.parse(textwrap.dedent(inspect.getsource(owner))).body[0]
    assert isinstance(body, ast.ClassDef)
    statements = body.body
    for statement, following in itertools.pairwise(statements):
        if (
            isinstance(statement, ast.Assign)
            and [getattr(target, "id", None) for target in statement.targets] == [name]
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
        ):
            return str(following.value.value)
    raise AssertionError(f"{name} has no docstring on {owner.__name__}")


def test_durations_accept_timedelta_and_seconds() -> None:
    config = (
        EventService.builder()
        .url("redis://127.0.0.1:1")
        .scheduling_interval(timedelta(milliseconds=250))
        .polling_timeout(2)
        .handler_timeout(timedelta(minutes=1))
        .shutdown_grace(0.5)
        .build()
        .config
    )
    assert (config.scheduling_interval, config.polling_timeout) == (0.25, 2.0)
    assert (config.handler_timeout, config.shutdown_grace) == (60.0, 0.5)


def test_durability_is_off_unless_set_and_frozen_in_the_config_when_set() -> None:
    builder = EventService.builder().url("redis://127.0.0.1:1")
    assert builder.build().config.durability is None
    config = builder.durability().build().config
    assert config.durability == Durability(replicas=1, timeout=0.5)
    assert config.durability.timeout_ms == 500
    config = builder.durability(replicas=2, timeout=timedelta(seconds=2)).build().config
    assert config.durability == Durability(replicas=2, timeout=2.0)
    assert "Durability(replicas=2, timeout=2.0)" in repr(config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.durability.replicas = 3  # type: ignore[misc]


def test_config_is_frozen() -> None:
    config = EventService.builder().url("redis://127.0.0.1:1").build().config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.prefix = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("configure", "setting"),
    [
        (lambda b: b.scheduling_interval(0), "scheduling_interval"),
        (lambda b: b.scheduling_interval("1s"), "scheduling_interval"),
        (lambda b: b.scheduling_batch_size(0), "scheduling_batch_size"),
        (lambda b: b.scheduling_batch_size(1.5), "scheduling_batch_size"),
        (lambda b: b.retry_attempts(0), "retry_attempts"),
        (lambda b: b.handler_timeout(timedelta(seconds=-1)), "handler_timeout"),
        (lambda b: b.polling_timeout(float("nan")), "polling_timeout"),
        (lambda b: b.shutdown_grace(-1), "shutdown_grace"),
        (lambda b: b.prefix("a{b}"), "prefix"),
        (lambda b: b.prefix(""), "prefix"),
        (lambda b: b.durability(replicas=0), "durability replicas"),
        (lambda b: b.durability(replicas=True), "durability replicas"),
        (lambda b: b.durability(replicas=101), "durability replicas"),
        (lambda b: b.durability(timeout=0), "durability timeout"),
        (lambda b: b.durability(timeout=timedelta(minutes=2)), "durability timeout"),
        (lambda b: b.durability(timeout="500ms"), "durability timeout"),
    ],
)
def test_invalid_settings_fail_at_build_naming_the_setting(configure: object, setting: str) -> None:
    builder = EventService.builder().url("redis://127.0.0.1:1")
    configure(builder)  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match=setting):
        builder.build()


def test_a_connection_is_required() -> None:
    with pytest.raises(
        ConfigurationError, match=r"\.client\(\.\.\.\), \.url\(\.\.\.\) or \.sentinel"
    ):
        EventService.builder().build()


def test_retry_policies_validate_and_compute_delays() -> None:
    assert FixedDelays([1, timedelta(seconds=5)]).delay(1) == 1.0
    assert FixedDelays([1, timedelta(seconds=5)]).delay(7) == 5.0
    exact = ExponentialBackoff(base=timedelta(seconds=1), cap=10, jitter=False)
    assert [exact.delay(n) for n in (1, 2, 3, 4, 5, 1000)] == [1, 2, 4, 8, 10, 10]
    jittered = ExponentialBackoff(base=2, cap=100)
    assert all(4 <= jittered.delay(3) <= 8 for _ in range(100))
    with pytest.raises(ValueError, match="FixedDelays"):
        FixedDelays([])
    with pytest.raises(ValueError, match="base <= cap"):
        ExponentialBackoff(base=10, cap=1)


@pytest.mark.backends("standalone", "cluster")
async def test_service_closes_only_the_client_it_created(redis_url: str) -> None:
    caller_client = client_from_url(redis_url)
    async with EventService.builder().client(caller_client).build():
        pass
    assert await caller_client.ping() is True
    await caller_client.aclose()
