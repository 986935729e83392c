"""Redis conversations written once, run on an asyncio client or a blocking one.

What aioqueue says to Redis to write an event (record its type, publish its schema, run the
enqueue script, fall back from FCALL to EVALSHA to EVAL) is the same whether the caller is an
EventService on an event loop or a Django view on a WSGI thread. So it is written once, as a
generator of steps that yields each command and receives its reply (the "sans-I/O" style of
h11 and hyper-h2), and two small drivers run such generators: `run_steps` on a
redis.asyncio client, `run_steps_sync` on a redis-py client. A command that Redis refuses
is thrown into the generator at the `yield` that sent it, so the conversation itself decides
what a refusal means (load the library, take the other script path, or fail).

A step is a command tuple (`("HGET", key, field)`; redis-py splits a two-word name such as
"FUNCTION LOAD"), or a `Pipeline` of commands sent in one round trip, whose replies come
back as a list with each refusal in its command's place. A Pipeline may end, on every
connection it uses, with commands that confirm what that connection wrote (`Confirm`:
WAIT, WAITAOF), since those confirm only the writes of their own connection.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeAlias, TypeVar

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import MaxConnectionsError, ResponseError

from aioqueue._transport.call_gate import gate_of, retrying_a_full_pool
from aioqueue._transport.client import (
    RedisClient,
    SyncRedisClient,
    ensure_slot_map,
    is_cluster,
    is_sync_cluster,
    within_reply_timeout,
)
from aioqueue._transport.held_connection import HeldConnection
from aioqueue._transport.node_pipelines import NodeCommands, run_on_nodes

__all__ = [
    "Command",
    "Confirm",
    "Confirmation",
    "ConfirmedReplies",
    "Pipeline",
    "Steps",
    "run_steps",
    "run_steps_sync",
]

R = TypeVar("R")

Command: TypeAlias = "tuple[str | int | bytes, ...]"
"""One Redis command: its name, then its arguments."""


@dataclass(frozen=True, slots=True)
class Confirm:
    """Commands sent after a pipeline's calls on each connection the pipeline uses, in the
    same round trip: WAIT and WAITAOF count the replicas (or disks) that have every write
    made on their own connection, so they must follow the calls on that very connection
    (redis-py's pooled commands would take any connection)."""

    commands: Sequence[Command]
    blocks_for: float
    """Seconds the commands may block on the server, added to the reply deadline."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What one connection of a pipeline confirmed: the positions of the calls it sent, and
    the replies to the Confirm's commands (errors in place)."""

    positions: Sequence[int]
    replies: list[Any]


@dataclass(frozen=True, slots=True)
class ConfirmedReplies:
    """The reply to a Pipeline with a Confirm: the calls' replies in order, and what each
    connection used confirmed."""

    replies: list[Any]
    confirmations: list[Confirmation]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Script calls (FCALL, EVALSHA, EVAL, each with at least one key) sent together: one
    round trip on a single server, one per node on a cluster (redis-py's cluster pipelines
    refuse scripts, so the calls of each node go out on one of its connections, every node's
    written before any reply is read: see node_pipelines.py). A call a node refuses (MOVED
    after a resharding included) comes back as its error, for the caller to send again on
    its own, through redis-py's usual routing.

    With `confirm`, each connection's calls are followed by its commands and the reply is a
    ConfirmedReplies; without, the reply is the list of the calls' replies."""

    commands: Sequence[Command]
    confirm: Confirm | None = None


Step: TypeAlias = "Command | Pipeline"
Steps: TypeAlias = "Generator[Step, Any, R]"
"""A conversation with Redis that returns R: it yields steps and receives their replies."""


async def run_steps(client: RedisClient, steps: Steps[R], held: HeldConnection | None = None) -> R:
    """Runs `steps` on an asyncio client; each reply has REPLY_TIMEOUT (see client.py). With
    `held` (a connection of this client's that the caller keeps), the steps go out on that
    connection; else, when the client has a service's gate (call_gate.py), on a slot of it
    for the whole conversation, waiting for one while every slot is taken."""
    if held is None:
        gate = gate_of(client)
        if gate is not None:
            slot = await gate.acquire()
            try:
                return await _drive(client, steps, slot)
            finally:
                gate.release(slot)
    return await _drive(client, steps, held)


async def _drive(client: RedisClient, steps: Steps[R], held: HeldConnection | None) -> R:
    with _Walk(steps) as walk:
        for step in walk:
            try:
                walk.reply = await _send_when_the_pool_has_room(client, step, held)
            except ResponseError as exc:
                walk.refuse(exc)
        return walk.result


async def _send_when_the_pool_has_room(
    client: RedisClient, step: Step, held: HeldConnection | None
) -> Any:
    try:
        return await _send(client, step, held)
    except MaxConnectionsError:
        # Refused before anything was sent: the pool (shared with the application) is full
        # for now; wait for a connection to come free.
        return await retrying_a_full_pool(partial(_send, client, step, held))


async def _send(client: RedisClient, step: Step, held: HeldConnection | None) -> Any:
    """One step's reply: on `held`'s connection where it holds one, else through the client."""
    if isinstance(step, Pipeline):
        if held is not None and held.holds_a_connection:
            confirm = step.confirm.commands if step.confirm else ()
            replies = await held.execute_pipeline(
                [*step.commands, *confirm], blocking=_blocking(step)
            )
            return _split(step, replies)
        return await _pipeline(client, step)
    if held is not None and held.holds_a_connection:
        return await held.execute(*step)
    await ensure_slot_map(client)  # the node is picked from the current map
    call = client.execute_command(*step, **_routing(client, step))
    return await within_reply_timeout(call)


def run_steps_sync(client: SyncRedisClient, steps: Steps[R]) -> R:
    """Runs `steps` on a blocking client (its socket timeout bounds each reply)."""
    with _Walk(steps) as walk:
        for step in walk:
            try:
                walk.reply = _send_sync(client, step)
            except ResponseError as exc:
                walk.refuse(exc)
        return walk.result


def _send_sync(client: SyncRedisClient, step: Step) -> Any:
    if isinstance(step, Pipeline):
        return _pipeline_sync(client, step)
    return client.execute_command(*step, **_routing(client, step))  # type: ignore[no-untyped-call]


class _Walk(Generic[R]):
    """One conversation walked step by step, the part both drivers share: iterating yields
    the steps; each step's `reply` (or its refusal, thrown in at the `yield` that sent it)
    goes back before the next one; `result` is what the conversation returned. Leaving the
    `with` closes the generator, so a driver that fails part way runs its `finally` blocks."""

    def __init__(self, steps: Steps[R]) -> None:
        self._steps = steps
        self.reply: Any = None
        self._refusal: ResponseError | None = None
        self.result: R

    def __enter__(self) -> _Walk[R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._steps.close()

    def __iter__(self) -> _Walk[R]:
        return self

    def __next__(self) -> Step:
        refusal, self._refusal = self._refusal, None
        try:
            return self._steps.send(self.reply) if refusal is None else self._steps.throw(refusal)
        except StopIteration as finished:
            self.result = finished.value
            raise

    def refuse(self, refusal: ResponseError) -> None:
        self._refusal = refusal


async def _pipeline(client: RedisClient, step: Pipeline) -> Any:
    if is_cluster(client):
        return await _cluster_pipeline(client, step)
    confirm = step.confirm.commands if step.confirm else ()
    async with client.pipeline(transaction=False) as pipe:
        for command in (*step.commands, *confirm):
            pipe.execute_command(*command)
        replies = await within_reply_timeout(
            pipe.execute(raise_on_error=False), blocking=_blocking(step)
        )
    return _split(step, replies)


async def _cluster_pipeline(client: RedisCluster, step: Pipeline) -> Any:
    await ensure_slot_map(client)  # the nodes are picked from the current map
    commands = step.commands
    confirm = step.confirm.commands if step.confirm else ()
    replies: list[Any] = [None] * len(commands)
    by_node: dict[ClusterNode, list[PipelineCommand]] = {}
    for position, command in enumerate(commands):
        node = client.get_node_from_key(_routing_key(command))
        if node is None:  # a slot no node serves (yet): the call is sent again on its own
            replies[position] = ResponseError(f"no node serves the keys of {command[:4]!r}")
            continue
        by_node.setdefault(node, []).append(PipelineCommand(position, *command))
    confirming = {node: [PipelineCommand(-1, *command) for command in confirm] for node in by_node}
    # The node's confirmation follows its calls on the same connection.
    await run_on_nodes(
        client,
        [NodeCommands(node, [*calls, *confirming[node]]) for node, calls in by_node.items()],
        blocking=_blocking(step),
    )
    confirmations: list[Confirmation] = []
    for node, calls in by_node.items():
        for call in calls:
            replies[call.position] = call.result
        if confirm:
            positions = [call.position for call in calls]
            confirmations.append(Confirmation(positions, [c.result for c in confirming[node]]))
    return ConfirmedReplies(replies, confirmations) if step.confirm else replies


def _blocking(step: Pipeline) -> float:
    """How long the pipeline's confirmation may block on the server, beyond the usual reply
    deadline."""
    return step.confirm.blocks_for if step.confirm else 0.0


def _split(step: Pipeline, replies: list[Any]) -> Any:
    """The reply to a pipeline sent on one connection: the calls' replies, followed by its
    confirmation's when it has one."""
    if step.confirm is None:
        return replies
    calls = len(step.commands)
    return ConfirmedReplies(replies[:calls], [Confirmation(range(calls), replies[calls:])])


_SCRIPT_CALLS = frozenset({"FCALL", "FCALL_RO", "EVALSHA", "EVAL"})


def _routing(client: object, command: Command) -> dict[str, Any]:
    """For a script call on a cluster, the node that serves its first key, as redis-py's
    `target_nodes`. Left to itself, redis-py finds where an FCALL goes by asking a node
    (COMMAND GETKEYS, with every argument of the call) before each one: a second round trip
    per call, which on a cluster doubled the cost of every claim and dispatch. A call that
    meets a moved slot is still redirected by redis-py; one whose slot no node serves yet,
    and anything that is not a script call, is routed by redis-py as usual.

    Take it right after `ensure_slot_map`, with nothing awaited before the call: a slot map
    refreshed in between (after another call's connection error) may have dropped the node,
    and a connection opened on a dropped node is one the client never closes."""
    if not (is_cluster(client) or is_sync_cluster(client)):
        return {}
    name = command[0]
    if not isinstance(name, str) or name.upper() not in _SCRIPT_CALLS or int(command[2]) < 1:
        return {}
    node = client.get_node_from_key(_routing_key(command))
    return {} if node is None else {"target_nodes": node}


def _routing_key(command: Command) -> str:
    """The first key of a script call (FCALL/EVALSHA/EVAL name, numkeys, key, ...)."""
    key = command[3]
    if int(command[2]) < 1 or isinstance(key, int):
        raise ValueError(f"a pipelined call must be a script call with keys: {command[:4]!r}")
    return key.decode() if isinstance(key, bytes) else key


def _pipeline_sync(client: SyncRedisClient, step: Pipeline) -> Any:
    if is_sync_cluster(client):
        return _cluster_pipeline_sync(client, step)
    confirm = step.confirm.commands if step.confirm else ()
    with client.pipeline(transaction=False) as pipe:
        for command in (*step.commands, *confirm):
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        replies = pipe.execute(raise_on_error=False)
    return _split(step, replies)


def _cluster_pipeline_sync(client: SyncRedisCluster, step: Pipeline) -> Any:
    commands = step.commands
    confirm = step.confirm.commands if step.confirm else ()
    replies: list[Any] = [None] * len(commands)
    by_node: dict[str, list[int]] = {}
    nodes = {}
    for position, command in enumerate(commands):
        node = client.get_node_from_key(_routing_key(command))  # type: ignore[no-untyped-call]
        if node is None:
            replies[position] = ResponseError(f"no node serves the keys of {command[:4]!r}")
            continue
        nodes[node.name] = node
        by_node.setdefault(node.name, []).append(position)
    confirmations: list[Confirmation] = []
    for name, positions in by_node.items():
        # The node's own client: its pipeline takes scripts, and errors stay per command.
        # Its confirmation follows its calls on the same connection.
        node_client = client.get_redis_connection(nodes[name])
        with node_client.pipeline(transaction=False) as pipe:
            for position in positions:
                pipe.execute_command(*commands[position])  # type: ignore[no-untyped-call]
            for command in confirm:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            node_replies = pipe.execute(raise_on_error=False)
        for position, reply in zip(positions, node_replies[: len(positions)], strict=True):
            replies[position] = reply
        if confirm:
            confirmations.append(Confirmation(positions, node_replies[len(positions) :]))
    return ConfirmedReplies(replies, confirmations) if step.confirm else replies
