-- Shared helpers. aioqueue/_wire/scripts.py prepends this file to every script, so each script
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

-- What a consumer receives: the stored envelope with the event id put in front. The stored
-- envelope leaves the id out (it is the hash field already: bytes per pending event are what
-- a large backlog costs), and claim.lua rebuilds this exact text to recognise a current copy.
local function delivery_of(id, stored)
  -- Quoted by hand unless JSON escapes a character of it (cjson escapes exactly these): the
  -- same text as cjson.encode(id), at a fraction of its cost on every hot script's path.
  if not string.find(id, '[%c"\\/]') then
    return '{"id":"' .. id .. '",' .. string.sub(stored, 2)
  end
  return '{"id":' .. cjson.encode(id) .. ',' .. string.sub(stored, 2)
end

-- The id of a delivery, or nil if `raw` is not a JSON object with a string id. Deliveries
-- start with the id (see delivery_of), and an id that JSON leaves unescaped is read from
-- there without decoding the whole envelope; claim.lua compares the delivery with the
-- stored envelope afterwards, so a misread id could only make a delivery look stale.
local function delivery_id(raw)
  local id = string.match(raw, '^{"id":"([^"\\/%c]*)",')
  if id then
    return id
  end
  local envelope = decoded_object(raw)
  if envelope and type(envelope.id) == 'string' then
    return envelope.id
  end
  return nil
end

-- Leases. dispatch.lua counts an attempt (`attempt` + 1, `due_at`) when it pushes a delivery
-- to the ready list, but the attempt is spent only once claim.lua hands the delivery to a
-- worker. An event whose attempt is under way (its envelope carries `due_at`) is scheduled
-- at the end of its lease, and the lease's score tells the two apart: a pushed delivery no
-- worker claimed yet ends its lease half a millisecond before a whole millisecond, a claimed
-- one on a whole millisecond. So the claim marks nothing beyond the score it writes anyway,
-- and costs nothing more on the hot path. Until the claim, the count is provisional: a
-- delivery that waits in the ready list past its lease is left there, its count untouched
-- (dispatch.lua), and pause.lua and hand_back.lua take the count back for deliveries no
-- handler began. A claimed attempt's lease is renewed by its live worker (renew.lua); when it
-- lapses the worker is gone, and the next dispatch counts the attempt as spent.
local UNCLAIMED = 0.5

-- The score of a delivery's lease before a worker claims it: half a millisecond early rather
-- than late, so that a lease of 0 is over at once, as a claimed one's is.
local function unclaimed_lease_end(now, lease)
  return now + lease - UNCLAIMED
end

-- Whether the schedule score of an event whose attempt is under way is an unclaimed
-- delivery's lease (see unclaimed_lease_end).
local function is_unclaimed(score)
  return score % 1 == UNCLAIMED
end

-- The stored text of an envelope's first attempt, as dispatch.lua counts it: under serial
-- key value `serial`, due at `score`, numbered `move` on the move clock (nil without
-- counts). The fields the attempt adds are written after the stored text `raw` instead of
-- encoding the whole envelope again, which nearly every dispatched event (a first attempt)
-- would pay for. The text means what cjson.encode of the updated envelope would: JSON
-- objects are unordered, and `..` writes a number as cjson does (%.14g). nil when the
-- envelope already carries a field the attempt writes (a retry, a parked or a lapsed
-- attempt) or its serial key value changes: those are encoded whole.
local function first_attempt_text(raw, envelope, serial, score, move)
  if envelope.attempt ~= nil or envelope.due_at ~= nil or envelope.moved ~= nil
      or envelope.pushed ~= nil or envelope.parked ~= nil or envelope.id ~= nil
      or envelope.serial ~= serial or string.byte(raw, -1) ~= 125 then  -- 125 is '}'
    return nil
  end
  local text = string.sub(raw, 1, -2) .. ',"attempt":1,"due_at":' .. score
  if move then
    return text .. ',"moved":' .. move .. ',"pushed":' .. move .. '}'
  end
  return text .. '}'
end

-- Whether event `id` (decoded `envelope`, nil when none) is the claimed attempt `attempt`
-- of version `version` (both as text), under way: what renew.lua and hand_back.lua act on.
local function holds_claimed(schedule, id, envelope, version, attempt)
  if not envelope or envelope.due_at == nil or tostring(version_of(envelope)) ~= version
      or tostring(envelope.attempt) ~= attempt then
    return false
  end
  local score = tonumber(redis.call('ZSCORE', schedule, id))
  return score ~= nil and not is_unclaimed(score)
end

-- The error an attempt whose lease lapsed leaves behind: its handler began, and its worker
-- stopped renewing the lease before settling it.
local function lapsed_error(attempt)
  return 'attempt ' .. attempt .. ' was lost: its worker stopped renewing the lease (it died, '
    .. 'or lost its connection to Redis) before the handler finished'
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

-- The hand-back of the lease protocol (after take_moves, which it uses): puts attempt `id`
-- (decoded `envelope`), taken out of the schedule, back into it due at `due`. Unless `spent`,
-- its count goes back to what it was before the claim (no handler began it); either way it
-- is no longer under way nor in the ready list, and its move takes a number of the move
-- clock. pause.lua and hand_back.lua give back through here; the caller counts what it gave
-- back out of `under_way` (count_under_way).
local function give_back(schedule, events, counts, id, envelope, due, spent)
  if not spent then
    local count = (tonumber(envelope.attempt) or 1) - 1
    envelope.attempt = count > 0 and count or nil  -- 0 is left out (see write_event)
  end
  envelope.due_at = nil
  envelope.pushed = nil
  envelope.moved = take_moves(counts, 1) or envelope.moved
  redis.call('HSET', events, id, cjson.encode(envelope))
  redis.call('ZADD', schedule, due, id)
end

-- The hot scripts batch their commands (one HMGET, HSET, ZADD... for a whole batch): each
-- redis.call costs the script far more than the command itself. Lua unpacks only so many
-- values at once (about 8000), so long argument lists go in chunks. Even, to keep pairs whole.
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
local function hmget_all(key, fields)
  local values = {}
  for i = 1, #fields, UNPACK_CHUNK do
    local last = math.min(i + UNPACK_CHUNK - 1, #fields)
    local chunk = redis.call('HMGET', key, unpack(fields, i, last))
    for _, value in ipairs(chunk) do
      values[#values + 1] = value
    end
  end
  return values
end

-- Sorts ready-list entries `raws` by what claim.lua makes of them, reading their events with
-- one HMGET: the current deliveries (byte for byte the stored envelope with its id in front,
-- see delivery_of), as parallel lists of ids, deliveries and stored envelopes, in list
-- order; and the entries that are no delivery at all. Stale copies (of events cancelled,
-- replaced or re-dispatched since) are in neither.
local function current_deliveries(events, raws)
  local ids, readable, unreadable = {}, {}, {}
  for _, raw in ipairs(raws) do
    local id = delivery_id(raw)
    if id then
      ids[#ids + 1] = id
      readable[#readable + 1] = raw
    else
      unreadable[#unreadable + 1] = raw
    end
  end
  local stored = hmget_all(events, ids)
  local current_ids, deliveries, envelopes, seen = {}, {}, {}, {}
  for i, raw in ipairs(readable) do
    -- A second copy of one delivery (which dispatch.lua never pushes while the first waits)
    -- is taken as stale: only one may reach a handler.
    if stored[i] and not seen[ids[i]] and delivery_of(ids[i], stored[i]) == raw then
      seen[ids[i]] = true
      current_ids[#current_ids + 1] = ids[i]
      deliveries[#deliveries + 1] = raw
      envelopes[#envelopes + 1] = stored[i]
    end
  end
  return current_ids, deliveries, envelopes, unreadable
end

-- What acknowledging needs of stored envelope `raw` (false when missing): whether it is
-- version `version` (text), whether an attempt of it is under way (`due_at`), and the serial
-- key value it holds. Read from the text where that is unambiguous, as it is for nearly
-- every envelope: decoding each one cost acknowledging more than its commands did. A field
-- written by cjson at the top level reads as `"name":` after `{` or `,`; inside a string its
-- quotes are escaped, and the one nested object (context) holds only strings, so a number
-- after the colon is a top-level field. Anything else (a serial key anywhere, a `due_at`
-- that is not a number, another version text) is decoded, as before.
local function settled_view(raw, version)
  if not raw then
    return false
  end
  if string.match(raw, '[{,]"v":(%d+)[,}]') == version
      and not string.find(raw, '"serial":', 1, true) then
    local due_at = string.match(raw, '[{,]"due_at":(.)')
    if due_at == nil then
      return true, false, nil
    elseif string.find(due_at, '[%-%d]') then
      return true, true, nil
    end
  end
  local envelope = decoded_object(raw)
  if envelope and tostring(version_of(envelope)) == version then
    return true, envelope.due_at ~= nil, envelope.serial
  end
  return false
end

-- Deletes events whose handlers succeeded, each only if it is still the delivered version:
-- a replace that happened while the handler ran keeps the new version scheduled. Deleting a
-- version twice is harmless, so callers may retry. `delivered` holds id, version, id,
-- version... (versions as strings). Returns how many events it deleted.
-- With `serial` (see serial_keys), each deleted event that held a serial key frees it; with
-- `counts`, the deleted attempts leave `under_way` and count as `finished`.
local function acknowledge_deliveries(schedule, events, delivered, serial, counts)
  local ids, versions = {}, {}
  for i = 1, #delivered, 2 do
    ids[#ids + 1] = delivered[i]
    versions[#versions + 1] = delivered[i + 1]
  end
  if #ids == 0 then
    return 0
  end
  local stored = hmget_all(events, ids)
  local finished, keyed, ended = {}, {}, 0
  for i, raw in ipairs(stored) do
    local delivered, under_way, serial_value = settled_view(raw, versions[i])
    if delivered then
      finished[#finished + 1] = ids[i]
      if under_way then
        ended = ended + 1
      end
      if serial_value ~= nil then
        keyed[#keyed + 1] = {ids[i], serial_value}
      end
    end
  end
  if #finished == 0 then
    return 0
  end
  call_chunked('ZREM', schedule, finished)
  local deleted = call_chunked('HDEL', events, finished)
  count_under_way(counts, -ended)
  if counts and deleted > 0 then
    redis.call('HINCRBY', counts, 'finished', deleted)
  end
  local unparked = 0
  for _, pair in ipairs(keyed) do
    unparked = unparked + settle_serial(serial, schedule, events, pair[2], pair[1])
  end
  if unparked > 0 then
    wake_dispatchers(serial.wake)
  end
  return deleted
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

