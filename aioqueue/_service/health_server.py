"""The health port: `GET /livez` and `GET /readyz` (200 or 503, with a JSON reason), and
`GET /metrics` (this process's Prometheus metrics, with the `prometheus` extra), for
Kubernetes' probes and scrapers.

It answers from a thread of its own, not from the event loop: a probe must get its 503 when
the loop is blocked (a handler that computes, or sleeps, on it), and a server on the loop
would then not answer at all. Each probe asks the loop for the service's answer and waits
LOOP_BOUND for it: a loop that does not answer within that is reported as the failure. The
standard library's threading HTTP server is enough for two probes a few seconds apart, and
adds no dependency to a worker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import anyio

from aioqueue._model.health import HealthReport

__all__ = ["LOOP_BOUND", "HealthServer", "Probed"]

logger = logging.getLogger("aioqueue.health")

LOOP_BOUND = 1.0
"""How long a probe waits for the event loop to answer before reporting it blocked (s)."""


class Probed(Protocol):
    """What the health port asks: an EventService."""

    def liveness(self) -> HealthReport: ...

    def readiness(self) -> Awaitable[HealthReport]: ...


class HealthServer:
    """Serves a service's probes on `host`:`port` (port 0: any free one, see `address`)
    while the `async with` block runs."""

    def __init__(self, probed: Probed, host: str, port: int, *, ping_bound: float) -> None:
        """`ping_bound`: how long readiness may wait for Redis, on top of LOOP_BOUND."""
        self._probed = probed
        self._ping_bound = ping_bound
        self._host = host
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on."""
        assert self._server is not None, "the health server is not running"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    async def __aenter__(self) -> HealthServer:
        loop = asyncio.get_running_loop()
        handler = _handler_class(_Answers(self._probed, loop, self._ping_bound))
        self._server = ThreadingHTTPServer((self._host, self._port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="aioqueue health port", daemon=True
        )
        self._thread.start()
        logger.info("health port listening on %s:%d", *self.address)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.shutdown)
            server.server_close()


class _Answers:
    """The probes' answers, computed on the loop and awaited from the server's threads."""

    def __init__(self, probed: Probed, loop: asyncio.AbstractEventLoop, ping_bound: float) -> None:
        self._probed = probed
        self._loop = loop
        self._ping_bound = ping_bound

    def liveness(self) -> HealthReport:
        async def on_loop() -> HealthReport:
            return self._probed.liveness()

        return self._on_loop(on_loop(), LOOP_BOUND)

    def readiness(self) -> HealthReport:
        async def on_loop() -> HealthReport:
            return await self._probed.readiness()

        return self._on_loop(on_loop(), LOOP_BOUND + self._ping_bound)

    def _on_loop(self, answer: Coroutine[Any, Any, HealthReport], bound: float) -> HealthReport:
        try:
            future = asyncio.run_coroutine_threadsafe(answer, self._loop)
        except RuntimeError:  # the loop has closed
            answer.close()
            return HealthReport(False, "the event loop has stopped")
        try:
            return future.result(timeout=bound)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return HealthReport(
                False, f"the event loop did not answer within {bound:g} s: something blocks it"
            )
        except concurrent.futures.CancelledError:
            return HealthReport(False, "the event loop is stopping")


def _handler_class(answers: _Answers) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[], HealthReport]] = {
        "/livez": answers.liveness,
        "/readyz": answers.readiness,
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "aioqueue-health"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(*_metrics())
                return
            probe = routes.get(path)
            if probe is None:
                body = {"error": f"no {path}: the health port serves /livez, /readyz, /metrics"}
                self._send(404, json.dumps(body).encode(), "application/json")
                return
            report = probe()
            status = 200 if report.ok else 503
            self._send(status, json.dumps(report.as_json()).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # A probe every few seconds is not news; the base class would print each.
            logger.debug(format, *args)

    return Handler


def _metrics() -> tuple[int, bytes, str]:
    """This process's metrics from prometheus_client's default registry, where
    `PrometheusMetrics()` registers unless given another; 501 without the extra."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        body = {"error": "metrics need prometheus_client: pip install 'aioqueue-redis[prometheus]'"}
        return 501, json.dumps(body).encode(), "application/json"
    return 200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST
