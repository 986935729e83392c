"""The HTTP routes of recurring schedules: list them, remove one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._recurring.records import list_schedules, remove_by_name

from ._routing import Connected, Wrap

__all__ = ["schedule_routes"]


def schedule_routes(state: Connected, api: Wrap) -> list[Route]:
    """`GET /schedules` and `DELETE /schedules/{name}`, each wrapped by `api`."""

    async def listing(request: Request) -> Response:
        infos = await list_schedules(state.client, state.prefix)
        return JSONResponse({"schedules": [info.to_json() for info in infos]})

    async def removal(request: Request) -> Response:
        name = request.path_params["name"]
        removed = await remove_by_name(state.client, state.prefix, name)
        return JSONResponse({"name": name, "removed": removed}, status_code=200 if removed else 404)

    return [
        Route("/schedules", api(listing), methods=["GET"]),
        Route("/schedules/{name:path}", api(removal), methods=["DELETE"]),
    ]
