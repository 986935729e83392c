"""Whether an embedded server process is up: it answers PING on its port, and it is the
process that was started there.

A few bytes of RESP need no client library. The reply to PING is -LOADING until the AOF is
replayed. Another server that holds the port answers PING too: one given that port while
this one was down (a restart on its old port), or by another process's free_port, which
cannot know what this process was given. So the pid in `INFO server` must be the started
process's. Without that check a start on a taken port passed for started while its own
process failed to bind, and its owner went on talking to a stranger.
"""

from __future__ import annotations

import socket
import ssl

__all__ = ["answers_as"]


def answers_as(
    pid: int,
    address: tuple[str, int],
    password: str | None,
    tls: ssl.SSLContext | None,
    timeout: float,
) -> bool:
    """Whether the server at `address` answers PING (not -LOADING) and is process `pid`;
    False on any connection error."""
    commands: list[tuple[str, ...]] = [("PING",), ("INFO", "server")]
    if password is not None:
        commands.insert(0, ("AUTH", password))
    host, _ = address
    try:
        conn = socket.create_connection(address, timeout=timeout)
        try:
            if tls is not None:
                # The TLS socket takes the connection over (and closes it).
                conn = tls.wrap_socket(conn, server_hostname=host)
            conn.sendall(b"".join(_resp(*command) for command in commands))
            replies = _read_replies(conn, len(commands))
        finally:
            conn.close()
    except OSError:  # ssl.SSLError included
        return False
    if replies is None:
        return False
    pong, info = replies[-2], replies[-1]
    return pong.startswith(b"+PONG") and f"process_id:{pid}\r\n".encode() in info


def _read_replies(conn: socket.socket, count: int) -> list[bytes] | None:
    """The next `count` replies on `conn`, or None if it closes first."""
    replies: list[bytes] = []
    unread = b""
    while len(replies) < count:
        split = _split_reply(unread)
        if split is None:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            unread += chunk
            continue
        reply, unread = split
        replies.append(reply)
    return replies


def _split_reply(data: bytes) -> tuple[bytes, bytes] | None:
    """The first whole RESP reply in `data` and what follows it, or None until it is all
    there: a line (+, -, :), or a bulk string's content ($; empty for a null one)."""
    line_end = data.find(b"\r\n")
    if line_end < 0:
        return None
    if not data.startswith(b"$"):
        return data[:line_end], data[line_end + 2 :]
    length = int(data[1:line_end])
    start = line_end + 2
    if length < 0:
        return b"", data[start:]
    if len(data) < start + length + 2:
        return None
    return data[start : start + length], data[start + length + 2 :]


def _resp(*parts: str) -> bytes:
    """One command in the Redis protocol."""
    encoded = [part.encode() for part in parts]
    return f"*{len(encoded)}\r\n".encode() + b"".join(
        b"$%d\r\n%s\r\n" % (len(part), part) for part in encoded
    )
