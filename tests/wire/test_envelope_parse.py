"""Envelope.parse reads an envelope as the scripts write it in one typed step (msgspec), and
anything else through the general reading: for any JSON text, duplicate keys and other
types included, it must accept and refuse what the general reading does, with the same
result. That envelopes are left to reference counting (gc=False) is checked with the
worker's other per-event records, in tests/delivery/test_batch_instrumentation.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioqueue._wire.envelope import Envelope, EnvelopeError
from tests.support.properties import property_settings

# The keys a script writes, the long keys of older envelopes, and some it never reads.
KEYS = [
    "id", "type", "p", "payload", "v", "version", "context",
    "attempt", "due_at", "moved", "pushed", "error", "other",
]  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
# Values of the types the typed step reads, more often than arbitrary JSON would give them.
field_values = (
    json_values
    | st.integers(min_value=0, max_value=2**64 + 1)
    | st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3)
)


# An envelope as a script writes it, with ids, numbers and contexts of any size (beyond 64
# bits too), and with a few arbitrary pairs before or after it that may replace its fields.
written = st.fixed_dictionaries(
    {"p": st.text(max_size=8), "v": st.integers(min_value=0, max_value=2**66)},
    optional={
        "id": st.text(max_size=4),
        "type": st.text(max_size=4),
        "context": st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3)),
        "attempt": st.integers(min_value=-(2**65), max_value=2**65),
        "due_at": st.none() | st.integers(min_value=-(2**65), max_value=2**65),
        "moved": st.integers(min_value=0, max_value=2**40),
    },
)
arbitrary_pairs = st.lists(st.tuples(st.sampled_from(KEYS), field_values), max_size=8)
envelope_pairs = arbitrary_pairs | st.builds(
    lambda before, fields, after: [*before, *fields.items(), *after],
    st.lists(st.tuples(st.sampled_from(KEYS), field_values), max_size=2),
    written,
    st.lists(st.tuples(st.sampled_from(KEYS), field_values), max_size=2),
)


def object_text(pairs: list[tuple[str, Any]]) -> str:
    """A JSON object of `pairs` in order, a key given twice included."""
    return "{" + ",".join(f"{json.dumps(key)}:{json.dumps(value)}" for key, value in pairs) + "}"


def outcome(parse: Any, raw: str | bytes, event_id: str | None) -> Envelope | type[EnvelopeError]:
    try:
        envelope: Envelope = parse(raw, event_type="PaymentCheck", event_id=event_id)
    except EnvelopeError:
        return EnvelopeError
    return envelope


@property_settings(500)
@given(
    envelope_pairs,
    st.sampled_from([None, "p-1"]),
    st.booleans(),
)
def test_any_object_is_read_as_the_general_reading_reads_it(
    pairs: list[tuple[str, Any]], event_id: str | None, as_bytes: bool
) -> None:
    text = object_text(pairs)
    raw: str | bytes = text.encode() if as_bytes else text
    assert outcome(Envelope.parse, raw, event_id) == outcome(Envelope._parse_any, raw, event_id)


@property_settings(300)
@given(st.text(alphabet='{}[]":,0123456789.-eEpvidnul \\', max_size=30))
def test_any_text_is_read_as_the_general_reading_reads_it(text: str) -> None:
    assert outcome(Envelope.parse, text, "p-1") == outcome(Envelope._parse_any, text, "p-1")


@pytest.mark.parametrize(
    "raw",
    [
        '{"id":"p-1","p":"{\\"order_id\\":1}","v":7}',
        '{"p":"{}","v":7,"attempt":2,"due_at":1764370000000,"moved":5,"pushed":5,'
        '"context":{"trace":"abc"}}',
    ],
)
def test_an_envelope_as_the_scripts_write_it_takes_the_typed_step(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast reading must be the one used, or the equivalence above proves nothing."""

    def refuse(*args: object, **kwargs: object) -> Envelope:
        raise AssertionError("read by the general reading")

    monkeypatch.setattr(Envelope, "_parse_any", refuse)
    envelope = Envelope.parse(raw, event_type="PaymentCheck", event_id="p-1")
    assert (envelope.id, envelope.event_type, envelope.version) == ("p-1", "PaymentCheck", 7)
