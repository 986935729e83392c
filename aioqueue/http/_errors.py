"""How the HTTP API answers a failure: always in JSON (`{"error": ...}`), with the status
that says what the client can do: 4xx for its request, 409 for a registry conflict, 422 for
a type nobody declared, 503 with `Retry-After` while Redis (or its replicas' confirmation)
is not there, 500 for the rest, whose traceback stays in the server's log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from redis.exceptions import ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aioqueue._admin.named_types import UndeclaredTypeError
from aioqueue._model.errors import DurabilityError, PartitionCountMismatchError

__all__ = ["ERROR_HANDLERS", "UNDECLARED_OPT_IN", "error_response"]


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The body of every error the API answers: `{"error": message}`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    # Unknown routes (404) and wrong methods (405) answer in JSON like every other error.
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, exc.detail, exc.headers)


async def _redis_unavailable(request: Request, exc: Exception) -> Response:
    # The message is redis-py's ("Error 111 connecting to host:port. Connection refused."):
    # it names the server but, unlike the URL, never its password.
    return error_response(503, f"Redis is unavailable: {exc}", {"Retry-After": "1"})


async def _not_confirmed(request: Request, exc: Exception) -> Response:
    # The message says the event may exist and that posting it again is safe.
    return error_response(503, f"not confirmed by the replicas: {exc}", {"Retry-After": "1"})


async def _internal_error(request: Request, exc: Exception) -> Response:
    # Starlette still logs the traceback; the client gets JSON rather than plain text.
    return error_response(
        500, f"internal error ({type(exc).__name__}); the server log has the details"
    )


async def _registry_conflict(request: Request, exc: Exception) -> Response:
    return error_response(409, str(exc))


UNDECLARED_OPT_IN = (
    "to take types before their consumers declare them, serve with --allow-undeclared-types "
    '(create_app(allow_undeclared_types=True)), or post the event with "allow_undeclared": true'
)


async def _undeclared_type(request: Request, exc: Exception) -> Response:
    # 422, not 404: the route exists and the request is well formed, but it names a type the
    # prefix does not know. A 404 already means "no such event" on DELETE /events/{type}/{id}
    # and the other routes of one event, which a client may take as done: a misspelt type
    # must not pass for that. For POST /events it is a body field that cannot be processed.
    assert isinstance(exc, UndeclaredTypeError)
    return JSONResponse(
        {
            "error": f"{exc}; {UNDECLARED_OPT_IN}",
            "unknown_types": exc.undeclared,
            "known_types": exc.named_known(),
            "known_types_total": len(exc.known),
        },
        status_code=422,
    )


ERROR_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: _http_error,
    # The type's registry entry is unusable: the message says which and how to fix it.
    PartitionCountMismatchError: _registry_conflict,
    UndeclaredTypeError: _undeclared_type,
    DurabilityError: _not_confirmed,
    RedisConnectionError: _redis_unavailable,
    RedisTimeoutError: _redis_unavailable,
    ClusterError: _redis_unavailable,
    TryAgainError: _redis_unavailable,  # a slot in migration: its queues pause meanwhile
    # RedisCluster raises the base class when none of its startup nodes answers.
    RedisClusterException: _redis_unavailable,
    ConnectionError: _redis_unavailable,  # a socket error redis-py did not wrap
    TimeoutError: _redis_unavailable,
    Exception: _internal_error,
}
