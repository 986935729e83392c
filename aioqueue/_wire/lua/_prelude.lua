-- Shared helpers, the queue's basics. Every script runs after this file, _serial_keys.lua and
-- _leases.lua, in that order (PRELUDE_PARTS in aioqueue/_wire/functions.py), so each script
-- is still one self-contained EVAL that touches only the keys passed in KEYS.

-- Milliseconds on the Redis server's clock: every due time lives on this one clock, so
-- workers with skewed clocks still agree on what is due.
local function server_time_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- `raw` (an envelope, a delivery) decoded, or nil when it is not a JSON object: anything in
-- Redis may have been written by hand, and no script may fail on it.
local function decoded_object(raw)
  local ok, value = pcall(cjson.decode, raw)
  if ok and type(value) == 'table' then
    return value
  end
  return nil
end

-- Writes a new version of an event's envelope and schedules it at `due` (ms): how every event
-- enters a queue (enqueue.lua, schedule_tick.lua). `context` is a JSON object of strings.
-- `serial` is the serial key value a replaced version held or was parked on (see the serial
-- keys section below), nil for a new event.
-- The stored text of an envelope (see write_event).
local function envelope_text(payload, context, version, since, serial)
  -- The type is left out: the key's hash tag says it, and every byte counts in a backlog.
  -- `attempt` is left out while 0, as everything that reads it knows, and the two fields
  -- every envelope carries have one-letter keys (see payload_of). Valkey keeps a hash field
  -- and a short value in one allocation: for an id of up to 9 characters and a payload such
  -- as {"index":1234567} that is 64 bytes now, 96 with both long keys and an attempt of 0.
  local envelope = {
    p = payload,
    v = version,
    -- A debounced event (enqueue with max_wait) remembers when its series began: later
    -- replacements never push it past since + max_wait. Absent otherwise.
    since = since,
    -- Passed on, so that whatever settles this version (or dispatches it under another
    -- value) frees what the replaced one held.
    serial = serial,
  }
  -- An empty context is left out: most events have none, and a backlog pays per byte. Told
  -- by its text first: decoding costs more than the comparison on every event.
  if context ~= '{}' then
    local decoded = cjson.decode(context)
    if next(decoded) ~= nil then
      envelope.context = decoded
    end
  end
  return cjson.encode(envelope)
end

local function write_event(schedule, events, sequence, id, payload, context, due, since, serial)
  local version = redis.call('INCR', sequence)
  redis.call('HSET', events, id, envelope_text(payload, context, version, since, serial))
  redis.call('ZADD', schedule, due, id)
end

-- An envelope's payload (JSON text) and version. They are written as `p` and `v`: they are
-- in every stored event, and at ten million pending events each byte of an envelope is ten
-- megabytes of Redis memory. Envelopes written before, with `payload` and `version`, still
-- read: every script reads these two fields through here.
local function payload_of(envelope)
  if envelope.p == nil then return envelope.payload end
  return envelope.p
end

local function version_of(envelope)
  if envelope.v == nil then return envelope.version end
  return envelope.v
end

-- Wake-ups. A script that makes work for waiting services publishes on a channel named after
-- the queue key that holds the work, and the services subscribe, one connection each however
-- many queues they wait on (aioqueue/_transport/subscriber.py): `wake` when the earliest due
-- time came forward (dispatchers look again), `ready` when deliveries arrive in an empty
-- ready list (its consumers claim). With pcall: a message is a hint (services also sweep the
-- queues now and then), and a user the server refuses the channel must not lose the write.
local function signal(channel)
  redis.pcall('PUBLISH', channel, '')
end

local function wake_dispatchers(wake)
  signal(wake)
end

-- Cancels a schedule's produced tick that is still to come (its event pending, due after
-- `now`, no attempt started), so that a changed or removed schedule fires no more ticks.
local function cancel_pending_tick(schedule, events, id, now)
  if type(id) ~= 'string' then
    return
  end
  local score = tonumber(redis.call('ZSCORE', schedule, id))
  local stored = redis.call('HGET', events, id)
  if not score or not stored or score <= now then
    return
  end
  local envelope = decoded_object(stored)
  if envelope and envelope.due_at == nil then
    redis.call('HDEL', events, id)
    redis.call('ZREM', schedule, id)
  end
end

-- Whether a schedule score can be a due time: finite (a score of -inf or inf can be written
-- by hand; neither is a moment, and cjson cannot encode either).
local function is_time(score)
  return score ~= nil and score == score and score > -math.huge and score < math.huge
end

-- The characters cjson escapes in a string, as a pattern class's contents (checked byte by
-- byte in tests/wire/test_envelope_text.py): an id without any of them is the same text
-- quoted by hand as cjson.encode makes it. delivery_of writes such ids and delivery_id
-- reads them by this one rule.
local JSON_ESCAPED = '%c"\\/'
local NEEDS_ESCAPING = '[' .. JSON_ESCAPED .. ']'
local PLAIN_ID_IN_FRONT = '^{"id":"([^' .. JSON_ESCAPED .. ']*)",'

-- What a consumer receives: the stored envelope with the event id put in front. The stored
-- envelope leaves the id out (it is the hash field already: bytes per pending event are what
-- a large backlog costs), and claim.lua rebuilds this exact text to recognise a current copy.
local function delivery_of(id, stored)
  -- Quoted by hand unless JSON escapes a character of it: cjson.encode(id) costs a
  -- multiple of that on every hot script's path.
  if not string.find(id, NEEDS_ESCAPING) then
    return '{"id":"' .. id .. '",' .. string.sub(stored, 2)
  end
  return '{"id":' .. cjson.encode(id) .. ',' .. string.sub(stored, 2)
end

-- The id of a delivery, or nil if `raw` is not a JSON object with a string id, and whether
-- `raw` begins with that id quoted by hand as delivery_of writes it. Deliveries start with
-- the id, and an id that JSON leaves unescaped is read from there without decoding the whole
-- envelope; claim.lua compares the delivery with the stored envelope afterwards, so a
-- misread id could only make a delivery look stale.
local function delivery_id(raw)
  local id = string.match(raw, PLAIN_ID_IN_FRONT)
  if id then
    return id, true
  end
  local envelope = decoded_object(raw)
  if envelope and type(envelope.id) == 'string' then
    return envelope.id, false
  end
  return nil, false
end

-- Whether delivery `raw` is delivery_of(id, stored), told without building that text when
-- `id_in_front` (from delivery_id): `raw` then begins with the id as delivery_of quotes it,
-- so the two are equal exactly when they are as long and the rest of `raw` is the stored
-- text after its first byte. A length and one plain search cost 0.36 to 0.40 microseconds
-- for every delivery a claim pops, the text built and compared 0.53 to 0.65
-- (benchmarks/script_text.py). Any other delivery is compared with the text built.
local function is_delivery_of(raw, id, stored, id_in_front)
  if id_in_front and #stored > 0 then
    local rest_at = #id + 10  -- after '{"id":"', the id and '",'
    return #raw == #id + 8 + #stored
      and string.find(raw, string.sub(stored, 2), rest_at, true) == rest_at
  end
  return delivery_of(id, stored) == raw
end

-- Moves one event out of the queue into the dead-letter set, keeping its envelope and
-- the reason. Nothing leaves a queue silently: every removal other than success or
-- cancel goes through here. Dead letters carry their id, so each one reads on its own.
local function bury(schedule, events, dead_letters, dead_letter_times, id, envelope, err, now)
  envelope.id = id
  envelope.error = err
  envelope.died_at = now
  redis.call('ZREM', schedule, id)
  redis.call('HDEL', events, id)
  redis.call('HSET', dead_letters, id, cjson.encode(envelope))
  redis.call('ZADD', dead_letter_times, now, id)
end

-- The refusal of a write to a Spark task's run record by `attempt` (a task attempt id), or
-- nil: once a later attempt has taken the record over (take_over_run.lua raised its `fence`),
-- an earlier one may neither write events under it nor take it back.
local function abandoned_attempt(record, attempt)
  local fence = tonumber(redis.call('HGET', record, 'fence') or '0')
  if attempt < fence then
    return redis.error_reply('ABANDONED attempt ' .. attempt .. ' of this Spark task: attempt '
      .. fence .. ' has taken its run record over')
  end
  return nil
end

-- The type's `counts` hash holds what `aioqueue stats` reads in O(1) instead of walking the
-- envelopes: `under_way`, the envelopes carrying `due_at` (attempts under way), kept by every
-- script that gives an envelope `due_at` or takes it away, and `finished`, the successes so
-- far (the dashboard's throughput). `counts` is nil for a caller that was not given it (a
-- producer in another language): then nothing is counted, which only a replace of an event
-- under way would have changed.
local function count_under_way(counts, delta)
  if counts and delta ~= 0 then
    redis.call('HINCRBY', counts, 'under_way', delta)
  end
end

-- The move clock: `counts` field `moves` numbers the moves scripts make to pending events,
-- so that a walk through pending() tells what moved since it began (see page.lua). A script
-- that moves an event's schedule score (dispatch, fail, extend_lease, reschedule, pause)
-- writes the number it took into the envelope as `moved`; dispatch also as `pushed`, the
-- number of the delivery it pushes to the ready list, whose order claim.lua keeps (claims
-- move events too, and are dated by that order instead of by a write on the hot path).
-- Returns the first of `n` new numbers, or nil for a caller without `counts`.
local function take_moves(counts, n)
  if not counts or n < 1 then
    return nil
  end
  return redis.call('HINCRBY', counts, 'moves', n) - n + 1
end

-- A score as redis.call's argument: the text Redis itself would make of the number (%.17g,
-- exact for every double). Redis 7.0 formats each number argument of a call on its own, a
-- third of a microsecond apiece, so a score a hot script writes for every member of a batch
-- (a lease's end) is formatted once, here.
local function score_argument(score)
  return string.format('%.17g', score)
end

-- The text cjson writes for number `n` (%.14g), for a script that writes JSON by hand: a whole
-- number under 10^14 (every due time in milliseconds until the year 5138, every count) reads
-- alike in %d, which costs half as much to format, on every dispatched event.
local function number_json(n)
  if n % 1 == 0 and n > -1e14 and n < 1e14 then
    return string.format('%d', n)
  end
  return tostring(n)
end

-- The hot scripts batch their commands (one HMGET, HSET, ZADD... for a whole batch): each
-- redis.call costs the script far more than the command itself. Lua unpacks only so many
-- values at once (about 8000), so long argument lists go in chunks. Even, to keep pairs whole.
-- They fill those lists by index or by a count of their own rather than by `t[#t + 1]`: in
-- Lua 5.1 the length of a table is a binary search, paid on every append, and a batch's
-- dispatch, claim and acknowledgement made about two dozen appends an event
-- (docs/benchmarks.md, "Batch handlers").
local UNPACK_CHUNK = 4000

-- redis.call(command, key, [option,] values...) in chunks; returns the sum of integer replies.
local function call_chunked(command, key, values, option)
  local total = 0
  for i = 1, #values, UNPACK_CHUNK do
    local last = math.min(i + UNPACK_CHUNK - 1, #values)
    local reply
    if option then
      reply = redis.call(command, key, option, unpack(values, i, last))
    else
      reply = redis.call(command, key, unpack(values, i, last))
    end
    if type(reply) == 'number' then
      total = total + reply
    end
  end
  return total
end

-- HMGET of any number of fields: the values in order, false where a field is missing.
-- Up to one chunk of fields, as nearly every call reads, that is the reply itself, not a copy.
local function hmget_all(key, fields)
  if #fields == 0 then
    return {}  -- HMGET needs a field
  elseif #fields <= UNPACK_CHUNK then
    return redis.call('HMGET', key, unpack(fields))
  end
  local values, count = {}, 0
  for i = 1, #fields, UNPACK_CHUNK do
    local last = math.min(i + UNPACK_CHUNK - 1, #fields)
    for _, value in ipairs(redis.call('HMGET', key, unpack(fields, i, last))) do
      count = count + 1
      values[count] = value
    end
  end
  return values
end

-- A type's rate limit (KEYS rate, starts): nil when none is recorded, else how many more
-- hand-outs the current window allows (`room`, may be 0 or less) and when the oldest start
-- in it leaves the window (`next_ms`). Starts older than the window are dropped first, so
-- `starts` holds at most a window's worth.
local function rate_room(rate, starts, now)
  local settings = redis.call('HMGET', rate, 'limit', 'per_ms')
  local limit, window = tonumber(settings[1]), tonumber(settings[2])
  if not limit or not window then
    return nil
  end
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - window)
  local room = limit - redis.call('ZCARD', starts)
  local next_ms = now + window
  if room < 1 then
    local oldest = redis.call('ZRANGE', starts, 0, 0, 'WITHSCORES')
    if oldest[2] then
      next_ms = tonumber(oldest[2]) + window
    end
  end
  return {room = room, next_ms = next_ms}
end
