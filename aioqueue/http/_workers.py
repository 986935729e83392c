"""The HTTP route of the worker registry: who works on the prefix."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioqueue._admin.workers import read_workers_view

from ._routing import Connected, Wrap

__all__ = ["worker_routes"]


def worker_routes(state: Connected, api: Wrap) -> list[Route]:
    """`GET /workers`: the live workers, their handlers, and the types with events due that
    no running worker handles (see `aioqueue workers`), wrapped by `api`."""

    async def listing(request: Request) -> Response:
        view = await read_workers_view(state.client, state.prefix)
        return JSONResponse({"prefix": state.prefix, **view.to_json()})

    return [Route("/workers", api(listing), methods=["GET"])]
