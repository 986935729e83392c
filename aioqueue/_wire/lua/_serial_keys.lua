-- Shared helpers, after _prelude.lua: serial keys (see PRELUDE_PARTS in functions.py).
--
-- Serial keys: a type whose class sets __serial_key__ records the payload field in its
-- `serial_field` key; events with the same value of that field run one at a time, in due
-- order. `serial_holders` maps a value to the id of the event that holds it (dispatched, in
-- flight, or waiting for its retry: a retry keeps its place); events that come due while
-- their value is held are parked in `serial_waiting`, out of the schedule, so the events of
-- other values go on (no head-of-line blocking). That zset has every score 0 and orders
-- its members by text: length:value:due:id, due padded to 15 digits, so one value's parked
-- events form one range, earliest first, found in O(log N).

-- The serial key value of an envelope: its payload's `field`, as text; nil when the payload
-- has no such string or number (the event then runs without a key).
local function serial_value(envelope, field)
  local payload = decoded_object(payload_of(envelope))
  if not payload then
    return nil
  end
  local value = payload[field]
  if type(value) == 'string' then
    return value
  elseif type(value) == 'number' then
    return cjson.encode(value)
  end
  return nil
end

local function serial_range_start(value)
  return #value .. ':' .. value .. ':'
end

-- The parked time of a due score: whole, non-negative milliseconds, so it pads to 15 digits.
local function parked_time(score)
  return math.max(0, math.floor(score))
end

local function serial_member(value, parked, id)
  return serial_range_start(value) .. string.format('%015d', parked) .. ':' .. id
end

-- Moves the earliest event parked on `value` back into the schedule at its due time;
-- returns 1 when one moved. A member whose event was cancelled, replaced or moved since it
-- was parked (those scripts leave the member behind) is dropped on the way.
local function unpark_next(waiting, schedule, events, value)
  local start = serial_range_start(value)
  for _ = 1, 32 do
    local first = redis.call('ZRANGEBYLEX', waiting, '[' .. start, '[' .. start .. '\255',
                             'LIMIT', 0, 1)
    local member = first[1]
    if not member then
      return 0
    end
    redis.call('ZREM', waiting, member)
    local due_text, id = string.match(string.sub(member, #start + 1), '^(%d+):(.*)$')
    local due = tonumber(due_text)
    local stored = id and redis.call('HGET', events, id)
    if stored and not redis.call('ZSCORE', schedule, id) then
      local envelope = decoded_object(stored)
      if envelope and envelope.parked == due and envelope.serial == value then
        redis.call('ZADD', schedule, due, id)
        return 1
      end
    end
  end
  return 0
end

-- After the event `id`, whose envelope says (field `serial`) it ran under serial key
-- `value`, settled (succeeded, died or was cancelled): frees the value if the event held it
-- and lets the next parked event of the value go. Returns 1 when an event went back to the
-- schedule. `serial` is nil for a caller without the serial keys, `value` nil for an event
-- without a key: nothing to do then.
local function settle_serial(serial, schedule, events, value, id)
  if not serial or type(value) ~= 'string' then
    return 0
  end
  local holder = redis.call('HGET', serial.holders, value)
  if holder == id then
    redis.call('HDEL', serial.holders, value)
  elseif holder then
    return 0  -- another event holds it: the parked ones wait for that one
  end
  return unpark_next(serial.waiting, schedule, events, value)
end

-- The serial keys of a script whose `keys` (its KEYS, passed because in the function
-- library KEYS is each function's own) hold holders, waiting and wake from `first` on, or
-- nil when they are not passed.
local function serial_keys(keys, first)
  if not keys[first + 2] then
    return nil
  end
  return {holders = keys[first], waiting = keys[first + 1], wake = keys[first + 2]}
end
