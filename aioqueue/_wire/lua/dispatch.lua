-- Moves due events of one type to its ready list, atomically.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] dead_letters
-- KEYS[5] dead_letter_times   KEYS[6] paused (optional: while its field `paused` exists, nothing is taken)
-- KEYS[7] rate, KEYS[8] starts (optional): with a rate limit, no more events are moved to
--   the ready list than the current window still lets claims hand out, so events over the
--   limit wait in the schedule, in due order, spending no attempt and no lease
-- KEYS[9] serial_field   KEYS[10] serial_holders   KEYS[11] serial_waiting (optional,
--   together): when serial_field names a payload field, a due event whose value of it is
--   held by another live event is parked in serial_waiting instead (out of the schedule, no
--   attempt spent) until that event settles; see _serial_keys.lua
-- KEYS[12] counts (optional, with 9-11): its `under_way` (envelopes with `due_at`, see
--   count_under_way in _prelude.lua) follows the attempts this call starts, ends or parks,
--   and each pushed envelope gets the next number of its move clock as `moved` and `pushed`
--   (see take_moves in _prelude.lua)
-- KEYS[13] recorded (optional): when given and missing, the server lost the type's settings
--   (serial field, rate limit) with its data, and nothing is taken until a service that
--   handles the type has recorded them again (see settings_marks.py): the call returns at
--   once with `unrecorded` 1
-- ARGV[1] batch size   ARGV[2] lease ms   ARGV[3] max attempts   ARGV[4] ready list capacity
-- For each due event (see _leases.lua):
-- * waiting, or a claimed attempt whose lease lapsed (its worker is gone: that attempt was
--   spent): count the next attempt, schedule the event `lease` ms from now (so that a lost
--   delivery only delays it) and push its delivery (the envelope with its id). An event that
--   already had all its attempts goes to the dead-letter set instead;
-- * a delivery pushed earlier that no worker claimed within its lease: nothing is spent. It
--   is given another lease where it waits in the ready list, or pushed again if the list
--   lost it (its count stays: a handler has yet to begin it).
-- Returns {dispatched, buried, server now ms, earliest due ms or -1, limit, ready length,
-- parked, unrecorded, extended}: limit is how many events this call was allowed to take
-- (batch size, less when the ready list is full), ready length the length of the ready
-- list after the call, unrecorded 1 when KEYS[13] is missing (else 0), extended how many
-- unclaimed deliveries got another lease where they wait.

local schedule, events, ready = KEYS[1], KEYS[2], KEYS[3]
local dead_letters, dead_letter_times, paused = KEYS[4], KEYS[5], KEYS[6]
local rate, starts = KEYS[7], KEYS[8]
local serial_field, serial_holders, serial_waiting = KEYS[9], KEYS[10], KEYS[11]
local counts, recorded = KEYS[12], KEYS[13]
local batch_size, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_attempts, capacity = tonumber(ARGV[3]), tonumber(ARGV[4])

-- Why a decoded envelope cannot be delivered, or nil. A consumer cannot settle an envelope
-- without a version, nor claim one whose id is not its field, so without this check such an
-- event would come back after every lease until its attempts ran out, buried for the wrong
-- reason. The checks mirror Envelope.parse in aioqueue/_wire/envelope.py.
local function envelope_problem(envelope, id)
  if envelope.id ~= nil and envelope.id ~= id then
    return 'id field does not match the event id'
  end
  if envelope.type ~= nil and type(envelope.type) ~= 'string' then
    return 'type must be a string'
  end
  if type(payload_of(envelope)) ~= 'string' then
    return 'payload must be a string of JSON text'
  end
  local version = version_of(envelope)
  if type(version) ~= 'number' or version ~= math.floor(version) then
    return 'version must be an integer'
  end
  local context = envelope.context
  if context ~= nil and context ~= cjson.null then
    if type(context) ~= 'table' then
      return 'context must be an object of strings'
    end
    for key, value in pairs(context) do
      if type(key) ~= 'string' or type(value) ~= 'string' then
        return 'context must be an object of strings'
      end
    end
  end
  return nil
end

local now = server_time_ms()
-- GET rather than EXISTS: the ACL rule services run under (docs/operating/security.md)
-- allows GET, and a rule already deployed must go on working.
if recorded and not redis.call('GET', recorded) then
  -- Events of a serial key or over a rate limit would start at once without their settings;
  -- a limit the call did not reach, so the dispatcher waits for the recording to wake it.
  return {0, 0, now, -1, batch_size, redis.call('LLEN', ready), 0, 1, 0}
end
if paused and redis.call('HEXISTS', paused, 'paused') == 1 then
  -- Paused (pause.lua): no earliest time, and a limit the call did not reach, so dispatchers
  -- sleep until resume.lua wakes them or their scheduling interval passes (a limit of 0
  -- would read as a full batch: go on at once).
  return {0, 0, now, -1, batch_size, redis.call('LLEN', ready), 0, 0, 0}
end
-- The ready list is bounded: when consumers fall behind, events wait in the schedule
-- (where attempts are not spent) rather than in the list.
local ready_length = redis.call('LLEN', ready)
local limit = math.min(batch_size, capacity - ready_length)
local allowance = rate and rate_room(rate, starts, now)
if allowance then
  local room = allowance.room - ready_length  -- what waits in the ready list uses room too
  if room < 1 then
    -- Back when the window lets one more out; a limit not reached, so no busy loop.
    return {0, 0, now, allowance.next_ms, batch_size, ready_length, 0, 0, 0}
  end
  limit = math.min(limit, room)
end
-- Serial keys: the payload field, and per value met in this batch the id that holds it.
local payload_field = serial_field and redis.call('GET', serial_field)
local holder_of = {}
local taken, parked_envelopes, parked_ids, parked_members = {}, {}, {}, {}

-- Whether event `id` may start now under serial key `value` (then it holds the value), or
-- must be parked: another event holds the value and has not settled. A holder whose event
-- is gone (removed by hand, or by a path that could not free the key) holds nothing.
local function takes_serial_key(value, id)
  local holder = holder_of[value]
  if holder == nil then
    holder = redis.call('HGET', serial_holders, value)
    if holder and holder ~= id and redis.call('HEXISTS', events, holder) == 0 then
      holder = false
    end
  end
  if holder and holder ~= id then
    holder_of[value] = holder
    return false
  end
  holder_of[value] = id
  taken[#taken + 1] = value
  taken[#taken + 1] = id
  return true
end

local dispatched, buried, parked, extended = 0, 0, 0, 0

-- Writes the parks and takes of this call so far (they are batched, see call_chunked).
local function write_serial_batch()
  if #parked_ids > 0 then
    call_chunked('HSET', events, parked_envelopes)
    call_chunked('ZREM', schedule, parked_ids)
    call_chunked('ZADD', serial_waiting, parked_members)
    parked = parked + #parked_ids
    parked_envelopes, parked_ids, parked_members = {}, {}, {}
  end
  if #taken > 0 then
    call_chunked('HSET', serial_holders, taken)
    taken = {}
  end
end

-- Frees the serial key value `held` that event `id` held (it died, or its replacement is
-- under another value; see settle_serial). This call's parks and takes are written first,
-- so that the earliest event parked on the value is found among them too and a value taken
-- in this call stays taken. When a parked event comes back (due), the later events of the
-- value in this call wait behind it: '' is a holder no id can be.
local function free_serial_key(held, id)
  if not serial_waiting or type(held) ~= 'string' then
    return
  end
  write_serial_batch()
  local before = holder_of[held]
  local serial = {holders = serial_holders, waiting = serial_waiting}
  local moved = settle_serial(serial, schedule, events, held, id)
  if not before or before == id then
    holder_of[held] = moved > 0 and '' or nil
  end
end

local started, ended = 0, 0  -- attempts under way, for counts
local due = {}
if limit > 0 then
  due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
end
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do
    ids[(i + 1) / 2] = due[i]  -- filled by index (see call_chunked in _prelude.lua)
  end
  -- One HMGET, and below one HSET, ZADD and RPUSH, for the whole batch (see call_chunked).
  local stored = hmget_all(events, ids)
  -- A number for every event that may be pushed, in push order; those parked or buried
  -- leave gaps, which cost nothing.
  local next_move = take_moves(counts, #ids)
  local orphans, rewritten, leases, deliveries = {}, {}, {}, {}
  -- How many envelopes are rewritten (two entries each in `rewritten` and `leases`) and
  -- deliveries pushed so far: the lists are filled by these counts (see call_chunked).
  local rewrites, pushes = 0, 0
  local unclaimed_end = score_argument(unclaimed_lease_end(now, lease))
  -- The envelope's next version (its text), under a lease no worker has claimed yet: written
  -- with the batch's HSET and ZADD below; returned, for the ready list.
  local function rewrite_unclaimed(id, encoded)
    rewrites = rewrites + 1
    rewritten[2 * rewrites - 1], rewritten[2 * rewrites] = id, encoded
    leases[2 * rewrites - 1], leases[2 * rewrites] = unclaimed_end, id
    return encoded
  end
  for n, id in ipairs(ids) do
    local raw = stored[n]
    local score = tonumber(due[2 * n])
    if raw and not is_time(score) then
      -- Written by hand or by a broken producer: such a score cannot be a due time, and
      -- encoding it would fail this whole call, and with it every other event of the batch.
      bury(schedule, events, dead_letters, dead_letter_times, id, {id = id, raw = raw},
           'schedule score ' .. tostring(due[2 * n]) .. ' is not a time in milliseconds', now)
      buried = buried + 1
    elseif not raw then
      -- A schedule entry without an event (written by hand): nothing to deliver.
      orphans[#orphans + 1] = id
    else
      local ok, envelope = pcall(cjson.decode, raw)
      local problem = nil
      if not ok or type(envelope) ~= 'table' then
        problem = 'envelope is not valid JSON: ' .. tostring(envelope)
      else
        problem = envelope_problem(envelope, id)
        if problem then
          problem = 'envelope is malformed: ' .. problem
        end
      end
      if problem then
        bury(schedule, events, dead_letters, dead_letter_times, id, {id = id, raw = raw}, problem,
             now)
        buried = buried + 1
      elseif envelope.due_at ~= nil and is_unclaimed(score) then
        -- Pushed, and no worker claimed it within its lease (workers busy or starved, a
        -- failover): it spent nothing. Where its delivery still waits, it gets another
        -- lease and keeps its place; where the list lost it, it is pushed again.
        envelope.id = nil
        local waiting_at = redis.call('LPOS', ready, delivery_of(id, raw))
        if next_move then
          envelope.moved = next_move
          if not waiting_at then
            envelope.pushed = next_move
          end
          next_move = next_move + 1
        end
        local encoded = rewrite_unclaimed(id, cjson.encode(envelope))
        if waiting_at then
          -- The copy must stay byte for byte the stored envelope (see delivery_of).
          redis.call('LSET', ready, waiting_at, delivery_of(id, encoded))
          extended = extended + 1
        else
          pushes = pushes + 1
          deliveries[pushes] = delivery_of(id, encoded)
        end
      else
        local attempt = tonumber(envelope.attempt) or 0
        local lapsed = envelope.due_at ~= nil  -- a claimed attempt's lease ran out
        if attempt >= max_attempts then
          local last_error = envelope.error
          if lapsed then
            last_error = lapsed_error(attempt)
          elseif type(last_error) ~= 'string' then
            last_error = 'out of attempts after attempt ' .. attempt
          end
          if envelope.due_at ~= nil then
            ended = ended + 1
          end
          bury(schedule, events, dead_letters, dead_letter_times, id, envelope, last_error, now)
          buried = buried + 1
          free_serial_key(envelope.serial, id)
        else
          envelope.id = nil  -- stored without it; the delivery puts it back in front
          if lapsed then
            envelope.error = lapsed_error(attempt)
          end
          local value = payload_field and serial_value(envelope, payload_field) or nil
          if envelope.serial ~= nil and envelope.serial ~= value then
            -- A replacement under another value (or none): free what the replaced version
            -- held, before this one takes anything.
            free_serial_key(envelope.serial, id)
          end
          if value and not takes_serial_key(value, id) then
            -- Its value is busy: park it, due time kept, until the holder settles.
            local at = parked_time(score)
            if envelope.due_at ~= nil then
              -- A lost worker's attempt, due again: it is over, and the next waits its turn.
              envelope.due_at = nil
              ended = ended + 1
            end
            envelope.serial = value
            envelope.parked = at
            parked_envelopes[#parked_envelopes + 1] = id
            parked_envelopes[#parked_envelopes + 1] = cjson.encode(envelope)
            parked_ids[#parked_ids + 1] = id
            parked_members[#parked_members + 1] = 0
            parked_members[#parked_members + 1] = serial_member(value, at, id)
          else
            if envelope.due_at == nil then
              started = started + 1
            end
            local encoded = first_attempt_text(raw, envelope, value, score, next_move)
            if not encoded then
              envelope.serial = value  -- what acknowledge and fail free when it settles
              envelope.parked = nil
              envelope.attempt = attempt + 1
              envelope.due_at = score
              if next_move then
                envelope.moved, envelope.pushed = next_move, next_move
              end
              encoded = cjson.encode(envelope)
            end
            if next_move then
              next_move = next_move + 1
            end
            pushes = pushes + 1
            deliveries[pushes] = delivery_of(id, rewrite_unclaimed(id, encoded))
          end
        end
      end
    end
  end
  if #orphans > 0 then
    call_chunked('ZREM', schedule, orphans)
  end
  write_serial_batch()
  if #rewritten > 0 then
    call_chunked('HSET', events, rewritten)
    call_chunked('ZADD', schedule, leases)
  end
  if #deliveries > 0 then
    call_chunked('RPUSH', ready, deliveries)
    dispatched = #deliveries
    if ready_length == 0 then
      signal(ready)  -- consumers that found the list empty wait for this
    end
  end
end
count_under_way(counts, started - ended)
local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
local earliest = -1
if first[2] and is_time(tonumber(first[2])) then
  earliest = tonumber(first[2])
end
return {dispatched, buried, now, earliest, limit, ready_length + dispatched, parked, 0, extended}
