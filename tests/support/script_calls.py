"""The `script_calls` fixture: every Lua script call a test's services make, in order, with
the pipeline each went out in. Tests that count or read the calls (the dispatcher's passes,
acknowledgements riding claims, batched enqueues) use it; registered by tests/conftest.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioqueue._producing import durability, enqueue_calls
from aioqueue._producing.durability import DurableCalls
from aioqueue._transport.steps import Steps
from aioqueue._wire.scripts import LuaScript
from aioqueue._wire.scripts import ScriptCall as WireCall

__all__ = ["ScriptCall", "script_calls"]


@dataclass(frozen=True)
class ScriptCall:
    script: str
    keys: list[str]
    args: list[str | int | bytes]
    at: float = field(default_factory=time.monotonic, compare=False)
    """When (monotonic) the call was built, which is when it was about to be sent."""
    pipeline: int = field(default=0, compare=False)
    """Which pipeline the call went out in: the calls one pipelined call sent share it (a
    dispatcher's pass over several queues, for example); a call sent on its own has one of
    its own."""


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> list[ScriptCall]:
    """Every Lua script call the test's services make, in order (pipelined ones included:
    every call is built by LuaScript.steps, pipelined_steps or pipelined_outcomes, or by
    durable_pipelined_steps; a refused pipelined call that runs again on its own is recorded
    twice)."""
    calls: list[ScriptCall] = []
    pipelines = itertools.count(1)
    original_steps = LuaScript.steps
    original_pipelined = LuaScript.pipelined_steps
    original_outcomes = LuaScript.pipelined_outcomes
    original_durable = durability.durable_pipelined_steps
    Pipelined = Sequence[WireCall]

    def note(script: LuaScript, pipelined: Pipelined) -> None:
        pipeline = next(pipelines)
        calls.extend(
            ScriptCall(script.name, list(keys), list(args), pipeline=pipeline)
            for keys, args in pipelined
        )

    def recording_steps(
        script: LuaScript, client: object, keys: Sequence[str], args: Sequence[str | int | bytes]
    ) -> Steps[Any]:
        calls.append(ScriptCall(script.name, list(keys), list(args), pipeline=next(pipelines)))
        return original_steps(script, client, keys, args)

    def recording_pipelined(
        script: LuaScript, client: object, pipelined: Pipelined
    ) -> Steps[list[Any]]:
        note(script, pipelined)
        return original_pipelined(script, client, pipelined)

    def recording_outcomes(
        script: LuaScript, client: object, pipelined: Pipelined
    ) -> Steps[list[Any]]:
        note(script, pipelined)
        return original_outcomes(script, client, pipelined)

    def recording_durable(
        script: LuaScript, client: object, pipelined: Pipelined, durable: DurableCalls
    ) -> Steps[list[Any]]:
        note(script, pipelined)
        steps: Steps[list[Any]] = original_durable(script, client, pipelined, durable)
        return steps

    monkeypatch.setattr(LuaScript, "steps", recording_steps)
    monkeypatch.setattr(LuaScript, "pipelined_steps", recording_pipelined)
    monkeypatch.setattr(LuaScript, "pipelined_outcomes", recording_outcomes)
    monkeypatch.setattr(enqueue_calls, "durable_pipelined_steps", recording_durable)
    return calls
