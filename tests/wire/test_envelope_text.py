"""Where the hot scripts read or write an envelope's text without decoding it, the text means
what decoding and encoding it would, checked by the server's own cjson for every case.

The helpers are the shared ones (aioqueue/_wire/lua/_prelude.lua, _serial_keys.lua and
_leases.lua), run on a real server with a few lines of Lua after them, as every script runs
them.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from aioqueue._transport.client import RedisClient
from aioqueue._wire.functions import prelude_source
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.store import QueueStore

PRELUDE = prelude_source()


async def run_lua(redis_client: RedisClient, body: str, *args: str) -> Any:
    """`body` run after the prelude, with `args` as ARGV."""
    return await redis_client.eval(PRELUDE + "\n" + body, 0, *args)


async def test_delivery_ids_are_quoted_as_cjson_quotes_them(redis_client: RedisClient) -> None:
    """delivery_of quotes most ids by hand: for an id with each byte, and for ids of several
    characters, the text is the one cjson.encode(id) gives, and JSON reads the id back."""
    mismatched = await run_lua(
        redis_client,
        """
        local mismatched = {}
        for byte = 0, 255 do
          local id = 'e-' .. string.char(byte) .. '-1'
          local expected = '{"id":' .. cjson.encode(id) .. ',"v":1}'
          if delivery_of(id, '{"v":1}') ~= expected then
            mismatched[#mismatched + 1] = byte
          end
        end
        return mismatched
        """,
    )
    assert mismatched == []
    for event_id in ["order-1", "a/b", 'say "hi"', "back\\slash", "tab\there", "żółw", ""]:
        delivery = await run_lua(
            redis_client, "return delivery_of(ARGV[1], ARGV[2])", event_id, '{"v":3}'
        )
        assert orjson.loads(delivery) == {"id": event_id, "v": 3}


async def test_a_delivery_is_recognised_as_comparing_the_text_would(
    redis_client: RedisClient,
) -> None:
    """is_delivery_of, which claims ask of every popped delivery, says what building the
    delivery and comparing it says: for the true delivery of each stored text and id, each
    copy of it with one byte changed, dropped or added, and the deliveries of other ids and
    other texts. Most of the cases take the way without the text built (the id in front)."""
    disagreements, compared_in_front = await run_lua(
        redis_client,
        """
        local stored_texts = {'{"v":1}', '{"p":"{\\"i\\":1}","v":7,"attempt":1,"due_at":5}',
                              '{', '', '[2]', 'x', '{"v":1}}'}
        local ids = {'e1', '', 'order-17', 'a/b', 'say "hi"'}
        local disagreements, compared_in_front = {}, 0
        local function check(raw, stored)
          local id, id_in_front = delivery_id(raw)
          if not id then
            return
          end
          if id_in_front then
            compared_in_front = compared_in_front + 1
          end
          if is_delivery_of(raw, id, stored, id_in_front) ~= (delivery_of(id, stored) == raw) then
            disagreements[#disagreements + 1] = raw .. ' against ' .. stored
          end
        end
        for _, stored in ipairs(stored_texts) do
          for _, id in ipairs(ids) do
            local true_copy = delivery_of(id, stored)
            for _, other in ipairs(stored_texts) do
              check(true_copy, other)
            end
            for at = 1, #true_copy do
              local before, after = string.sub(true_copy, 1, at - 1), string.sub(true_copy, at + 1)
              check(before .. after, stored)  -- one byte dropped
              check(before .. 'x' .. string.sub(true_copy, at), stored)  -- one added
              for _, byte in ipairs({'"', ',', '{', '}', 'e', '1', 'x'}) do
                check(before .. byte .. after, stored)  -- one changed
              end
            end
            check(true_copy .. '}', stored)
          end
        end
        return {disagreements, compared_in_front}
        """,
    )
    assert disagreements == []
    assert compared_in_front > 1000


FRESH = '{"p":"{\\"order_id\\":1}","v":7}'
DELIVERED = '{"p":"{\\"order_id\\":1}","v":7,"attempt":1}'
SETTLING_CASES = [
    # (stored envelope, version acknowledged, attempt acknowledged)
    (DELIVERED, "7", "1"),
    (DELIVERED, "8", "1"),
    # Taken again after the acknowledged attempt's lease lapsed: not that attempt.
    (DELIVERED, "7", "2"),
    ('{"p":"{}","v":7,"attempt":1,"due_at":1764345600123,"moved":3,"pushed":3}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":2,"due_at":1764345600123,"moved":3,"pushed":3}', "7", "1"),
    ('{"attempt":1,"v":7,"due_at":1764345600123,"p":"{}"}', "7", "1"),
    # A version past 10**14 is written with an exponent, and read by decoding.
    ('{"p":"{}","v":1e+15,"attempt":1,"due_at":5}', "1e+15", "1"),
    # Written before the one-letter keys.
    ('{"payload":"{}","version":7,"attempt":1,"due_at":5}', "7", "1"),
    ('{"payload":"{}","version":7,"attempt":1,"due_at":5}', "8", "1"),
    # The names inside a payload's text or a context are not the envelope's fields.
    ('{"p":"{\\"v\\":8,\\"attempt\\":2,\\"due_at\\":1}","v":7,"attempt":1}', "8", "2"),
    ('{"p":"{\\"v\\":8,\\"attempt\\":2,\\"due_at\\":1}","v":7,"attempt":1}', "7", "1"),
    ('{"context":{"v":"8","due_at":"soon","serial":"s"},"p":"{}","v":7,"attempt":1}', "8", "1"),
    ('{"context":{"v":"8","due_at":"soon","serial":"s"},"p":"{}","v":7,"attempt":1}', "7", "1"),
    ('{"context":{"due_at":"soon"},"p":"{}","v":7,"attempt":1,"due_at":12}', "7", "1"),
    ('{"context":{"attempt":"1"},"p":"{}","v":7,"attempt":2,"due_at":12}', "7", "1"),
    ('{"context":{"attempt":"2"},"p":"{}","v":7,"attempt":2,"due_at":12}', "7", "2"),
    # A serial key value, and a due_at written by hand as null (under way, as decoded).
    ('{"p":"{}","v":7,"attempt":1,"serial":"customer-9","due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":1,"due_at":null}', "7", "1"),
    # A context key named like a field, ahead of the envelope's own.
    ('{"context":{"v":"7"},"p":"{}","v":7,"attempt":1,"due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":1,"context":{"due_at":"5"},"due_at":5}', "7", "1"),
    # Written by hand, with spaces cjson never writes: a key after one is decoded.
    ('{"v":7, "attempt":1,"due_at":5}', "7", "1"),
    ('{ "v":7,"attempt":1,"due_at":5}', "7", "1"),
    ('{"v":7,"attempt": 1,"due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":1,"due_at":"soon"}', "7", "1"),
    # The version's and the attempt's text are found anywhere, but only whole, and only as
    # the envelope's own keys: not as the first digits of another number, not inside a
    # payload's or an error's text, not as a context's value.
    ('{"p":"{}","v":70,"attempt":1,"due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":12,"due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":21,"due_at":5}', "7", "1"),
    ('{"attempt":1,"due_at":5,"p":"{}","v":7}', "7", "1"),
    ('{"p":"{\\"v\\":7,\\"attempt\\":1,\\"due_at\\":1}","v":8,"attempt":2,"due_at":5}', "7", "1"),
    (
        '{"error":"\\"v\\":7,\\"attempt\\":1,\\"due_at\\":","p":"{}","v":8,"attempt":1,"due_at":5}',
        "7",
        "1",
    ),
    ('{"context":{"v":"7"},"p":"{}","v":8,"attempt":1,"due_at":5}', "7", "1"),
    ('{"p":"{}","v":7,"attempt":1,"due_at":5,"serial":"customer-9"}', "7", "1"),
    # No attempt: never delivered, so no acknowledgement is of it.
    ('{"p":"{}","v":7}', "7", "1"),
    # Not an envelope at all.
    ('["v",7]', "7", "1"),
    ("not json", "7", "1"),
]


@pytest.mark.parametrize(("stored", "version", "attempt"), SETTLING_CASES)
async def test_acknowledging_reads_an_envelope_as_decoding_it_would(
    redis_client: RedisClient, stored: str, version: str, attempt: str
) -> None:
    """settled_view (what acknowledge_deliveries needs of an envelope) answers as the
    decoded envelope does: whether it is the acknowledged version and attempt, whether an
    attempt is under way, its serial key."""
    fast, decoded = await run_lua(
        redis_client,
        """
        local function answer(delivered, under_way, serial_value)
          if not delivered then return {0} end
          return {1, under_way and 1 or 0, serial_value or false}
        end
        local envelope = decoded_object(ARGV[1])
        local expected = {0}
        if envelope and tostring(version_of(envelope)) == ARGV[2]
            and tostring(envelope.attempt) == ARGV[3] then
          expected = answer(true, envelope.due_at ~= nil, envelope.serial)
        end
        return {answer(settled_view(ARGV[1], ARGV[2], ARGV[3])), expected}
        """,
        stored,
        version,
        attempt,
    )
    assert fast == decoded
    assert await run_lua(redis_client, "return settled_view(false, '1', '1') and 1 or 0") == 0


@pytest.mark.parametrize(
    "stored",
    [
        *sorted({stored for stored, _, _ in SETTLING_CASES}),
        '{"context":{"due_at":"1"},"p":"{}","v":7,"attempt":1}',
        '{"due_at":-5,"v":7}',
    ],
)
async def test_an_attempt_under_way_is_read_as_decoding_it_would(
    redis_client: RedisClient, stored: str
) -> None:
    """under_way_in (whether an envelope carries `due_at`, which acknowledging and a claim
    sent again ask) answers as the decoded envelope does, a context's key of that name too."""
    fast, decoded = await run_lua(
        redis_client,
        """
        local envelope = decoded_object(ARGV[1])
        local expected = envelope ~= nil and envelope.due_at ~= nil
        return {under_way_in(ARGV[1]) and 1 or 0, expected and 1 or 0}
        """,
        stored,
    )
    assert fast == decoded


@pytest.mark.parametrize(
    "number",
    ["0", "-5", "1764345600123", "99999999999999", "-99999999999999", "1e14", "-1e14",
     "123456789012345678", "1764345600123.5", "0.1", "9007199254740993"],
)  # fmt: skip
async def test_numbers_are_written_as_cjson_writes_them(
    redis_client: RedisClient, number: str
) -> None:
    """number_json (a number in JSON written by hand) gives cjson's text, whether it takes
    the whole-number way or Lua's own formatting."""
    written, encoded = await run_lua(
        redis_client,
        "local n = tonumber(ARGV[1]) return {number_json(n), cjson.encode({n})}",
        number,
    )
    assert f"[{written.decode()}]" == encoded.decode()


async def test_a_score_formatted_once_is_the_score(redis_client: RedisClient) -> None:
    """score_argument (a lease end a hot script writes for a whole batch) gives text that
    reads back as the very number, a lease's half millisecond included."""
    mismatched = await run_lua(
        redis_client,
        """
        local mismatched = {}
        for _, score in ipairs({1764345600123, 1764345600122.5, 0.1, -2.5, 2^53 + 2, 1e300}) do
          local text = score_argument(score)
          -- Lua reads text with strtod, as ZADD does.
          if tonumber(text) ~= score or string.find(text, '[^%d.e+-]') then
            mismatched[#mismatched + 1] = text
          end
        end
        return mismatched
        """,
    )
    assert mismatched == []


FIRST_ATTEMPT_CASES = [
    FRESH,
    '{"p":"{}","v":7,"context":{"trace":"t-1"},"since":1764345600000}',
    '{"payload":"{\\"order_id\\":1}","version":7}',
    '{"p":"{}","v":7,"error":"an error some producer wrote"}',
]


@pytest.mark.parametrize("stored", FIRST_ATTEMPT_CASES)
@pytest.mark.parametrize(
    "score", ["1764345600123", "99999999999999", "123456789012345678", "0", "1764345600123.5", "-5"]
)
@pytest.mark.parametrize("move", ["", "41"])
async def test_a_first_attempt_is_written_as_encoding_it_would(
    redis_client: RedisClient, stored: str, score: str, move: str
) -> None:
    """first_attempt_text (dispatch's write of a first attempt) gives the envelope that
    cjson.encode of the updated envelope gives, numbers formatted alike, large ones too."""
    written_bytes, encoded_bytes = await run_lua(
        redis_client,
        """
        local envelope = cjson.decode(ARGV[1])
        local score, move = tonumber(ARGV[2]), tonumber(ARGV[3])
        local written = first_attempt_text(ARGV[1], envelope, nil, score, move)
        envelope.attempt, envelope.due_at = 1, score
        if move then
          envelope.moved, envelope.pushed = move, move
        end
        return {written, cjson.encode(envelope)}
        """,
        stored,
        score,
        move,
    )
    written, encoded = written_bytes.decode(), encoded_bytes.decode()
    assert orjson.loads(written) == orjson.loads(encoded)
    for field in ("due_at", "moved", "pushed"):
        # As text too: JSON readers parse the same digits (or exponent) either way.
        assert written.count(f'"{field}":') == encoded.count(f'"{field}":')
    due_text = encoded.split('"due_at":')[1].split(",")[0].rstrip("}")
    assert f'"due_at":{due_text}' in written


@pytest.mark.parametrize(
    "stored",
    [
        '{"p":"{}","v":7,"attempt":1}',
        '{"p":"{}","v":7,"due_at":5}',
        '{"p":"{}","v":7,"moved":2}',
        '{"p":"{}","v":7,"pushed":2}',
        '{"p":"{}","v":7,"parked":5}',
        '{"p":"{}","v":7,"attempt":null}',
        '{"p":"{}","v":7,"serial":"customer-9"}',
        '{"p":"{}","v":7} ',
        # An id in the stored text (dispatch has cleared the decoded one by then).
        '{"id":"e-1","p":"{}","v":7}',
    ],
)
async def test_every_other_attempt_is_encoded_whole(redis_client: RedisClient, stored: str) -> None:
    """A retry, a parked or lapsed attempt, a changed serial key value, an id in the stored
    text or text that does not end its object is left to cjson.encode."""
    written = await run_lua(
        redis_client,
        """
        local envelope = cjson.decode(ARGV[1])
        envelope.id = nil  -- as dispatch.lua clears it before asking
        return first_attempt_text(ARGV[1], envelope, nil, 5, 1) or 'whole'
        """,
        stored,
    )
    assert written == b"whole"


async def test_an_envelope_stored_with_its_id_is_dispatched_without_it(
    redis_client: RedisClient,
) -> None:
    """An envelope whose stored text carries its id (valid: it matches the field) is encoded
    whole on its first attempt, as before: the stored text loses the id, and the delivery
    carries it once, in front."""
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    await redis_client.hset(keys.events, "p-9", '{"id":"p-9","p":"{\\"order_id\\":9}","v":1}')
    await redis_client.zadd(keys.schedule, {"p-9": 0})
    store = QueueStore(redis_client, keys, "PaymentCheck")
    result = await store.dispatch(batch_size=10, lease_ms=5000, max_attempts=3, ready_capacity=10)
    assert result.dispatched == 1
    stored = await redis_client.hget(keys.events, "p-9")
    assert stored is not None
    assert b'"id":' not in stored
    assert orjson.loads(stored)["attempt"] == 1
    [delivery] = await redis_client.lrange(keys.ready, 0, -1)
    text = delivery.decode() if isinstance(delivery, bytes) else delivery
    assert text.count('"id":') == 1
    assert orjson.loads(delivery)["id"] == "p-9"
