"""`aioqueue serve`: the HTTP API and dashboard, on uvicorn."""

from __future__ import annotations

import argparse
import os

from aioqueue._cli._common import CommandError, Commands, add_connection_options
from aioqueue._model.config import Durability
from aioqueue._model.errors import ConfigurationError

__all__ = ["add_serve_command"]


def add_serve_command(commands: Commands) -> None:
    parser = commands.add_parser(
        "serve",
        help="HTTP API (POST /events, GET /stats, dead letters) and a dashboard at /",
        description="Serves the JSON API and the dashboard (needs `pip install "
        "'aioqueue-redis[http]'`). With a token, API calls need `Authorization: Bearer <token>`.",
    )
    add_connection_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument(
        "--token",
        default=os.environ.get("AIOQUEUE_TOKEN"),
        help="bearer token the API requires (env AIOQUEUE_TOKEN; default: none). An empty "
        "token is refused rather than taken as no token",
    )
    parser.add_argument(
        "--max-body", type=int, default=1024 * 1024, help="largest request body, bytes (1 MiB)"
    )
    parser.add_argument("--log-level", default="info", help="uvicorn's log level (default info)")
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name requests may use (the machine's DNS name, a proxy's); "
        "repeatable. Others are refused, against DNS rebinding",
    )
    parser.add_argument(
        "--durability-replicas",
        type=int,
        metavar="N",
        help="POST /events answers only once N replicas have the event (WAIT, and WAITAOF "
        "where the primary has AOF), else 503: the event may exist, posting it again is safe "
        "(default: off, answered once the primary has it)",
    )
    parser.add_argument(
        "--durability-timeout",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how long POST /events waits for that confirmation (default 0.5)",
    )
    parser.add_argument(
        "--allow-undeclared-types",
        action="store_true",
        help="take event types no service has declared yet (for producers deployed before "
        "their consumers); without it they are refused with 422, naming the known types",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without a token (anyone who reaches it may write)",
    )
    parser.set_defaults(run=run_serve)


async def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from aioqueue.http import create_app
        from aioqueue.http._app import validate_token
        from aioqueue.http._guard import hosts_for_bind, is_loopback
    except ImportError as exc:
        raise CommandError(f"{exc}; serve needs: pip install 'aioqueue-redis[http]'") from exc
    if args.token is not None:
        try:
            validate_token(args.token)
        except ValueError as exc:
            # Refused at start: an empty AIOQUEUE_TOKEN is easy to set by accident, and
            # serving without authentication is not what whoever set it wanted.
            raise CommandError(f"--token or AIOQUEUE_TOKEN: {exc}") from exc
    if args.token is None and not is_loopback(args.host) and not args.insecure:
        raise CommandError(
            f"refusing to serve {args.host} without a token: anyone who reaches it could "
            "schedule, cancel and requeue events; give --token (or AIOQUEUE_TOKEN), bind "
            "127.0.0.1, or say --insecure"
        )
    durability = None
    if args.durability_replicas is not None:
        try:
            durability = Durability.of(args.durability_replicas, args.durability_timeout)
        except ConfigurationError as exc:
            raise CommandError(f"--durability-replicas/--durability-timeout: {exc}") from exc
    app = create_app(
        url=args.url,
        prefix=args.prefix,
        token=args.token,
        max_body_bytes=args.max_body,
        allowed_hosts=hosts_for_bind(args.host, args.port, args.allow_host),
        durability=durability,
        allow_undeclared_types=args.allow_undeclared_types,
    )
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level.lower(), lifespan="on"
    )
    await uvicorn.Server(config).serve()
    return 0
