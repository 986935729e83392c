"""Event types over HTTP: `GET /types` and `GET /types/{type}` (partitions, pause, published
schema), `POST /types/{type}/pause` and `/resume`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._admin.named_types import require_declared, resolve_declared
from aioqueue._wire.pausing import is_paused, pause, resume
from aioqueue._wire.registry import read_registry
from aioqueue._wire.schemas import PublishedSchema, read_schema, read_schemas, schema_fields

from ._routing import Connected, Wrap

__all__ = ["type_routes"]


def type_routes(state: Connected, api: Wrap) -> list[Route]:
    """`GET /types` (every type: partitions, paused, published schema, fields), `GET
    /types/{type}`, `POST /types/{type}/pause` and `/resume`, each wrapped by `api`."""

    async def listing(request: Request) -> Response:
        registry = await read_registry(state.client, state.prefix)
        schemas, problems = await read_schemas(state.client, state.prefix)
        partitions = {layout.event_type: layout.partitions for layout in registry.layouts}
        paused = {
            layout.event_type
            for layout in registry.layouts
            if await is_paused(state.client, layout)
        }
        names = sorted(set(partitions) | set(schemas))
        types = [
            {**_described(name, partitions.get(name), schemas.get(name)), "paused": name in paused}
            for name in names
        ]
        return JSONResponse({"types": types, "problems": registry.problems + problems})

    async def pausing(request: Request) -> Response:
        event_type = request.path_params["type"]
        # Recorded: a pause of a type the registry lacked would hold it with nobody seeing it.
        layout = await resolve_declared(
            state.client,
            state.prefix,
            event_type,
            allow_undeclared=state.allow_undeclared_types,
            record=True,
        )
        returned = await pause(state.client, layout)
        return JSONResponse({"type": event_type, "paused": True, "returned_to_schedule": returned})

    async def resuming(request: Request) -> Response:
        event_type = request.path_params["type"]
        layout = await resolve_declared(
            state.client, state.prefix, event_type, allow_undeclared=state.allow_undeclared_types
        )
        was_paused = await resume(state.client, layout)
        return JSONResponse({"type": event_type, "paused": False, "was_paused": was_paused})

    async def one(request: Request) -> Response:
        event_type = request.path_params["type"]
        published = await read_schema(state.client, state.prefix, event_type)
        if published is None:
            if not state.allow_undeclared_types:
                # A misspelt name is told apart from a type whose services publish no schema.
                await require_declared(state.client, state.prefix, [event_type])
            return JSONResponse(
                {"error": f"no schema is published for {event_type}"}, status_code=404
            )
        return JSONResponse(_described(event_type, None, published))

    return [
        Route("/types", api(listing), methods=["GET"]),
        Route("/types/{type}", api(one), methods=["GET"]),
        Route("/types/{type}/pause", api(pausing), methods=["POST"]),
        Route("/types/{type}/resume", api(resuming), methods=["POST"]),
    ]


def _described(
    event_type: str, partitions: int | None, published: PublishedSchema | None
) -> dict[str, Any]:
    described: dict[str, Any] = {"type": event_type}
    if partitions is not None:
        described["partitions"] = partitions
    if published is None:
        return {**described, "schema": None, "fields": []}
    fields = [
        {"name": f.name, "type": f.type, "required": f.required, "default": f.default}
        for f in schema_fields(published.schema)
    ]
    return {**described, **published.to_json(), "fields": fields}
