"""The HTTP routes that look into a type's schedule: list, show, run now, cancel."""

from __future__ import annotations

from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._admin.actions import cancel_event
from aioqueue._admin.named_types import resolve_layouts
from aioqueue._model.errors import InvalidCursorError
from aioqueue._producing.writes import run_now
from aioqueue._wire.browse import MAX_PAGE, inspect_event, pending_page
from aioqueue._wire.due_histogram import MAX_BUCKETS, due_histogram
from aioqueue._wire.keys import QueueLayout

from ._errors import error_response
from ._routing import Connected, Wrap

__all__ = ["browse_routes"]


def browse_routes(state: Connected, api: Wrap) -> list[Route]:
    """`GET /events/{type}`, `GET|DELETE /events/{type}/{id}`, `POST .../run-now` and
    `GET /types/{type}/histogram`; each wrapped by `api` (the token check). Ids may contain
    '/' (the run-now route comes first)."""
    routes = _BrowseRoutes(state)
    return [
        Route("/types/{type}/histogram", api(routes.histogram), methods=["GET"]),
        Route("/events/{type}", api(routes.list_pending), methods=["GET"]),
        Route("/events/{type}/{id:path}/run-now", api(routes.run_now), methods=["POST"]),
        Route("/events/{type}/{id:path}", api(routes.show), methods=["GET"]),
        Route("/events/{type}/{id:path}", api(routes.cancel), methods=["DELETE"]),
    ]


class _ParameterError(ValueError):
    pass


class _BrowseRoutes:
    def __init__(self, state: Connected) -> None:
        self._state = state

    async def _layout(self, request: Request) -> QueueLayout:
        state = self._state
        [layout] = await resolve_layouts(
            state.client,
            state.prefix,
            [request.path_params["type"]],
            allow_undeclared=state.allow_undeclared_types,
        )
        return layout

    async def list_pending(self, request: Request) -> Response:
        query = request.query_params
        try:
            limit = _integer(query.get("limit", "50"), "limit", 1, MAX_PAGE)
            due_before = _moment(query.get("due_before"), "due_before")
            due_after = _moment(query.get("due_after"), "due_after")
            layout = await self._layout(request)
            page = await pending_page(
                self._state.client,
                layout,
                limit=limit,
                cursor=query.get("cursor"),
                due_before=due_before,
                due_after=due_after,
            )
        except (_ParameterError, InvalidCursorError) as exc:
            return error_response(422, str(exc))
        return JSONResponse({"type": layout.event_type, **page.to_json()})

    async def histogram(self, request: Request) -> Response:
        """Events due per bucket ahead: `?bucket=3600&buckets=24` (seconds, the default)."""
        query = request.query_params
        try:
            bucket = _integer(query.get("bucket", "3600"), "bucket", 1, 7 * 24 * 3600)
            buckets = _integer(query.get("buckets", "24"), "buckets", 1, MAX_BUCKETS)
        except _ParameterError as exc:
            return error_response(422, str(exc))
        layout = await self._layout(request)
        counted = await due_histogram(
            self._state.client, layout, bucket_ms=bucket * 1000, buckets=buckets
        )
        return JSONResponse({"type": layout.event_type, **counted.to_json()})

    async def show(self, request: Request) -> Response:
        layout = await self._layout(request)
        event_id = request.path_params["id"]
        info = await inspect_event(self._state.client, layout, event_id)
        if info is None:
            return error_response(404, f"no {layout.event_type} {event_id!r} is pending or dead")
        return JSONResponse(info.to_json())

    async def run_now(self, request: Request) -> Response:
        layout = await self._layout(request)
        event_id = request.path_params["id"]
        result = await run_now(self._state.client, layout, event_id)
        if result == "missing" and await inspect_event(self._state.client, layout, event_id):
            return JSONResponse(
                {"type": layout.event_type, "id": event_id, "result": "dead",
                 "error": "the event is dead: POST /dead-letters/{type}/{id}/requeue puts it back"},
                status_code=409,
            )  # fmt: skip
        status = {"due": 200, "missing": 404, "in_flight": 409}[result]
        return JSONResponse(
            {"type": layout.event_type, "id": event_id, "result": result}, status_code=status
        )

    async def cancel(self, request: Request) -> Response:
        layout = await self._layout(request)
        event_id = request.path_params["id"]
        cancelled = await cancel_event(self._state.client, layout, event_id)
        return JSONResponse(
            {"type": layout.event_type, "id": event_id, "cancelled": cancelled},
            status_code=200 if cancelled else 404,
        )


def _integer(value: str, name: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise _ParameterError(f"{name} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise _ParameterError(f"{name} must be from {low} to {high}, got {number}")
    return number


def _moment(value: str | None, name: str) -> datetime | None:
    """An ISO 8601 time (UTC when it has no offset) or epoch seconds."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise _ParameterError(
                f"{name} must be an ISO 8601 time or epoch seconds, got {value!r}"
            ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
