"""aioqueue's HTTP API and dashboard (`pip install 'aioqueue-redis[http]'`; `aioqueue serve`).

    app = create_app(url="redis://localhost:6379", prefix="aioqueue", token="secret")

Run it with uvicorn, or mount it in your own Starlette or FastAPI app and enter its lifespan
from yours (Starlette runs only the outermost app's lifespan; see the HTTP guide).
"""

try:
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "aioqueue.http needs Starlette and uvicorn: pip install 'aioqueue-redis[http]'"
    ) from exc

from ._app import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]
