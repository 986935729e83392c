"""The ASGI app behind `aioqueue serve`: a JSON API and a dashboard page at `/`."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from importlib import resources

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._admin.actions import (
    DeadLetterRecord,
    get_dead_letter,
    list_dead_letters,
    requeue_dead_letters,
)
from aioqueue._admin.named_types import require_declared, resolve_layouts
from aioqueue._admin.stats import read_stats
from aioqueue._model.config import Durability
from aioqueue._model.event import _WIRE_NAME
from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue._transport.recovery import REDIS_ERRORS
from aioqueue._wire.keys import QueueLayout, validate_prefix

from ._browse import browse_routes
from ._errors import ERROR_HANDLERS, error_response
from ._events import EnqueueRequest, RequestError, enqueue
from ._guard import RequestGuard
from ._schedules import schedule_routes
from ._schema_checks import PayloadMismatch, SchemaChecks
from ._types import type_routes
from ._workers import worker_routes

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app", "validate_token"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest request body `create_app` accepts unless told otherwise (1 MiB): 413 beyond."""
METRICS_NEED_PROMETHEUS = (
    "metrics need prometheus_client: pip install 'aioqueue-redis[prometheus]' "
    "where `aioqueue serve` runs, and restart it"
)
# Dead letters one listing returns at most, whatever `limit` asks for.
MAX_LISTING = 1000

Endpoint = Callable[[Request], Awaitable[Response]]


def create_app(
    *,
    url: str | None = None,
    client: RedisClient | None = None,
    prefix: str = "aioqueue",
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_hosts: Iterable[str] | None = None,
    durability: Durability | None = None,
    allow_undeclared_types: bool = False,
) -> Starlette:
    """The app for one prefix on one server: give `url` (the app connects and closes the
    client) or `client` (yours, never closed). With `token`, every API call needs
    `Authorization: Bearer <token>`; the dashboard page asks for it. Writes need JSON, a
    foreign `Origin` is refused, and with `allowed_hosts` so is any other `Host` header;
    `aioqueue serve` passes the names it was started for. Request bodies beyond
    `max_body_bytes` are refused with 413. With `durability` (`Durability.of(replicas,
    timeout)`), `POST /events` answers only once that many replicas have the event, and 503
    when they did not confirm it in time (the event may exist; posting it again is safe).

    An event type no service has declared (no recorded queue, no published schema: most
    often a misspelt name) is refused with 422 naming the known types, in the path, the
    query or the body of `POST /events`. `allow_undeclared_types=True` takes any type, for
    producers deployed before their consumers; one `POST /events` says so with
    `"allow_undeclared": true`.

    The Redis client is opened in the app's lifespan: mounted in another app, enter
    `app.router.lifespan_context(app)` from that app's lifespan.
    """
    if (url is None) == (client is None):
        raise ValueError("give exactly one of url and client")
    validate_prefix(prefix)
    guard = RequestGuard(
        None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
    )
    state = _State(prefix, None if token is None else validate_token(token), max_body_bytes, guard)
    state.durability = durability
    state.allow_undeclared_types = allow_undeclared_types

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.client = client if client is not None else client_from_url(url or "")
        try:
            yield
        finally:
            if client is None:
                await state.client.aclose()

    api = state.api
    routes = [
        *(
            Route(path, state.guarded(dashboard_file(name, media_type)))
            for path, (name, media_type) in DASHBOARD_FILES.items()
        ),
        Route("/healthz", state.healthz),
        Route("/stats", api(state.stats)),
        Route("/events", api(state.post_event), methods=["POST"]),
        Route("/dead-letters", api(state.dead_letters)),
        # `path`: an id may contain '/' (sent as %2F, which the server decodes before
        # routing). A GET of an id ending in "/requeue" still reaches the first route, and
        # a POST only the second.
        Route("/dead-letters/{type}/{id:path}", api(state.dead_letter)),
        Route("/dead-letters/{type}/{id:path}/requeue", api(state.requeue), methods=["POST"]),
        *browse_routes(state, api),
        *schedule_routes(state, api),
        *worker_routes(state, api),
        *type_routes(state, api),
    ]
    routes.append(Route("/metrics", api(_metrics_endpoint(state))))
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=ERROR_HANDLERS)


def validate_token(token: str) -> str:
    """The bearer token, refused when it could not protect anything: an empty token would
    turn authentication off without anyone noticing, and one with spaces or characters
    outside printable ASCII cannot travel unchanged in an Authorization header."""
    if not token:
        raise ValueError(
            "the token is empty: give a real token, or none at all to serve without one"
        )
    if not all("!" <= char <= "~" for char in token):
        raise ValueError("the token must be printable ASCII without spaces")
    return token


# The dashboard's files, by the only paths that serve them: no name from a request ever
# reaches the file system.
DASHBOARD_FILES = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard_type.js": ("dashboard_type.js", "text/javascript; charset=utf-8"),
    "/dashboard_workers.js": ("dashboard_workers.js", "text/javascript; charset=utf-8"),
}


def dashboard_file(name: str, media_type: str) -> Endpoint:
    """The endpoint that serves one of the dashboard's files."""

    async def serve(request: Request) -> Response:
        text = (resources.files("aioqueue.http") / name).read_text()
        # Not cached: after an upgrade the page and its scripts must come from one version.
        return Response(text, media_type=media_type, headers={"Cache-Control": "no-store"})

    return serve


def _metrics_endpoint(state: _State) -> Endpoint:
    """`GET /metrics`: the queue gauges in Prometheus' format, read from Redis on every
    scrape. Without prometheus_client (the `prometheus` extra) it answers 501 with the
    install command: a scraper's log then says what to do, where a bare 404 would read as
    a wrong path."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        from aioqueue.prometheus import PrometheusMetrics
    except ImportError:

        async def missing(request: Request) -> Response:
            return error_response(501, METRICS_NEED_PROMETHEUS)

        return missing
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    async def scrape(request: Request) -> Response:
        # Redis down is a reading, not a failed scrape: `aioqueue_redis_up 0` is what an
        # alert can see (the other gauges keep their last values).
        with contextlib.suppress(*REDIS_ERRORS):
            await metrics.refresh_queue_depths(state.client, state.prefix)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return scrape


class _State:
    def __init__(
        self, prefix: str, token: str | None, max_body_bytes: int, guard: RequestGuard
    ) -> None:
        self.prefix = prefix
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.guard = guard
        self.schema_checks = SchemaChecks()
        self.client: RedisClient
        self.durability: Durability | None = None
        self.allow_undeclared_types = False

    def api(self, endpoint: Endpoint) -> Endpoint:
        """Wraps an API endpoint: checks the bearer token when one is configured, and that
        every event type named in the path or the query is a wire name (a name with braces
        would read another type's keys)."""

        async def checked(request: Request) -> Response:
            refusal = self.guard.refusal(request)
            if refusal is not None:
                return error_response(*refusal)
            if self.token is not None and not self._authorized(request):
                return error_response(
                    401,
                    "missing or wrong bearer token: send Authorization: Bearer <token>",
                    {"WWW-Authenticate": 'Bearer realm="aioqueue"'},
                )
            named = [*request.query_params.getlist("type"), request.path_params.get("type", "")]
            for event_type in filter(None, named):
                if not _WIRE_NAME.fullmatch(event_type):
                    return error_response(
                        422,
                        f"type {event_type!r} is not an event type's wire name: "
                        "1-128 letters, digits, '_', '.' or '-'",
                    )
            return await endpoint(request)

        return checked

    def guarded(self, endpoint: Endpoint) -> Endpoint:
        """The request guard alone, for the dashboard page (which asks for the token)."""

        async def checked(request: Request) -> Response:
            refusal = self.guard.refusal(request)
            return error_response(*refusal) if refusal is not None else await endpoint(request)

        return checked

    def _authorized(self, request: Request) -> bool:
        assert self.token is not None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    async def healthz(self, request: Request) -> Response:
        await self.client.ping()
        return JSONResponse({"ok": True})

    async def stats(self, request: Request) -> Response:
        snapshot = await read_stats(
            self.client,
            self.prefix,
            request.query_params.getlist("type"),
            allow_undeclared=self.allow_undeclared_types,
        )
        return JSONResponse({"prefix": self.prefix, **snapshot.to_json()})

    async def post_event(self, request: Request) -> Response:
        body = await self._read_body(request)
        if isinstance(body, Response):
            return body
        try:
            parsed = EnqueueRequest.parse(orjson.loads(body))
        except orjson.JSONDecodeError as exc:
            return error_response(400, f"the body is not valid JSON: {exc}")
        except RequestError as exc:
            return error_response(422, str(exc))
        if not (self.allow_undeclared_types or parsed.allow_undeclared):
            await require_declared(self.client, self.prefix, [parsed.event_type])
        try:
            # A type no service published a schema for is written unchecked ("schema": null).
            digest = await self.schema_checks.check(
                self.client, self.prefix, parsed.event_type, parsed.item.id, parsed.payload
            )
        except PayloadMismatch as exc:
            return JSONResponse({"error": str(exc), "errors": exc.errors}, status_code=422)
        scheduled = await enqueue(self.client, self.prefix, parsed, self.durability)
        result = {
            "type": parsed.event_type,
            "id": parsed.item.id,
            "scheduled": scheduled,
            "schema": digest,
        }
        return JSONResponse(result, status_code=201 if scheduled else 200)

    async def _read_body(self, request: Request) -> bytes | Response:
        """The body, or a 413 as soon as it is known to be over the limit."""
        too_large = error_response(413, f"the body is larger than {self.max_body_bytes} bytes")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                return too_large
            chunks.append(chunk)
        return b"".join(chunks)

    async def _layouts(self, event_types: list[str]) -> list[QueueLayout]:
        """The layouts of the named types (every recorded one when none is named); a type
        no service declared raises UndeclaredTypeError (answered 422) unless allowed."""
        return await resolve_layouts(
            self.client, self.prefix, event_types, allow_undeclared=self.allow_undeclared_types
        )

    async def dead_letters(self, request: Request) -> Response:
        try:
            limit = min(MAX_LISTING, max(1, int(request.query_params.get("limit", "100"))))
        except ValueError:
            return error_response(422, "limit must be an integer")
        types = request.query_params.getlist("type")
        records: list[DeadLetterRecord] = []
        for layout in await self._layouts(types):
            records += await list_dead_letters(self.client, layout, limit)
        records.sort(key=lambda record: record.died_at, reverse=True)
        return JSONResponse({"dead_letters": [record.to_json() for record in records[:limit]]})

    async def dead_letter(self, request: Request) -> Response:
        event_type, event_id = request.path_params["type"], request.path_params["id"]
        [layout] = await self._layouts([event_type])
        record = await get_dead_letter(self.client, layout, event_id)
        if record is None:
            return error_response(404, f"no dead letter {event_type} {event_id!r}")
        return JSONResponse(record.to_json())

    async def requeue(self, request: Request) -> Response:
        event_type, event_id = request.path_params["type"], request.path_params["id"]
        [layout] = await self._layouts([event_type])
        outcome = (await requeue_dead_letters(self.client, layout, [event_id]))[event_id]
        status = {"requeued": 200, "missing": 404}.get(outcome, 409)
        return JSONResponse(
            {"type": event_type, "id": event_id, "result": outcome}, status_code=status
        )
