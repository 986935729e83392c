"""The health of a running service, as Kubernetes-style probes ask it: is it alive (the
process should be restarted when not), and is it ready (it should be counted on when it
is). `health_server.py` serves the answers on a port."""

from __future__ import annotations

import anyio

from aioqueue._model.health import HealthReport
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.recovery import REDIS_ERRORS

from .delivery import Delivery
from .health_server import HealthServer
from .runtime import Runtime, ServiceState

__all__ = ["PING_BOUND", "Health"]

PING_BOUND = 1.0
"""Redis must answer a PING within this for the service to be ready: the default timeout of
a Kubernetes probe is 1 s, and a server slower than that is as good as gone to the queue."""


class Health:
    """Answers a service's liveness and readiness probes, and serves them on the health
    port while the service runs, if it has one."""

    def __init__(self, runtime: Runtime, delivery: Delivery) -> None:
        self._runtime = runtime
        self._delivery = delivery
        self._server: HealthServer | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """Where the health port listens while the service runs; None without one."""
        return None if self._server is None else self._server.address

    async def start(self) -> None:
        config = self._runtime.config
        if config.health_port is not None:
            server = HealthServer(
                self, config.health_host, config.health_port, ping_bound=PING_BOUND
            )
            await server.__aenter__()
            self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.__aexit__(None, None, None)

    def liveness(self) -> HealthReport:
        """Alive: running (or stopping in order) with every background task working. Whether
        the event loop answers is the caller's to see: this runs on the loop."""
        runtime = self._runtime
        if runtime.failure is not None:
            return HealthReport(False, runtime.failure)
        if runtime.state is ServiceState.IDLE:
            return HealthReport(False, "the service has not started")
        if runtime.state is ServiceState.CLOSED:
            return HealthReport(False, "the service has stopped")
        return HealthReport(True, f"the service is {runtime.state.value}")

    async def readiness(self) -> HealthReport:
        """Ready: alive and running (not stopping), Redis answering a PING within
        PING_BOUND, and, with handlers, a heartbeat in the registry fresh enough that the
        worker is listed."""
        alive = self.liveness()
        if not alive.ok:
            return alive
        if self._runtime.state is not ServiceState.RUNNING:
            return HealthReport(False, f"the service is {self._runtime.state.value}")
        client = self._runtime.client
        try:
            with anyio.fail_after(PING_BOUND):
                await gated_call(client, client.ping)
        except TimeoutError:
            return HealthReport(False, f"Redis did not answer a PING within {PING_BOUND:g} s")
        except REDIS_ERRORS as exc:
            return HealthReport(False, f"Redis did not answer: {type(exc).__name__}: {exc}")
        heartbeat = self._delivery.heartbeat
        if heartbeat is not None and not heartbeat.fresh:
            if heartbeat.written_at is None:  # the first beat follows the start by a moment
                return HealthReport(
                    False, "no heartbeat written yet: the worker registry lists it after the first"
                )
            return HealthReport(
                False, "no heartbeat written lately: the worker registry may not list it"
            )
        return HealthReport(True, "running; Redis answers")
