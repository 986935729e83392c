"""What the route modules share: the shape of an endpoint, and what they need of the app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response

from aioqueue._transport.client import RedisClient

__all__ = ["Connected", "Endpoint", "Wrap"]

Endpoint = Callable[[Request], Awaitable[Response]]
Wrap = Callable[[Endpoint], Endpoint]
"""How the app wraps each API endpoint (the token and wire-name checks)."""


class Connected(Protocol):
    """What the routes need of the app's state."""

    client: RedisClient
    prefix: str
    allow_undeclared_types: bool
    """Whether a type no service declared is taken (else the app answers 422)."""
