-- Schedules events of one type.
-- KEYS[1] schedule (zset id -> due ms)   KEYS[2] events (hash id -> envelope)
-- KEYS[3] sequence (string counter for envelope versions)
-- KEYS[4] wake (channel, optional; no key is written): published on when an event is due
--   before every event already scheduled, so a dispatcher sleeping until the old earliest
--   time wakes up.
-- The keys after it are optional too, and positional: a call passes a key only with every
-- key before it (a producer in another language may stop after KEYS[4]).
-- KEYS[5] counts (hash): its `under_way` loses one for each replacement of an event whose
--   attempt is under way (see count_under_way in _prelude.lua)
-- KEYS[6] ready (list): with max_wait, tells a dispatched version whose delivery still waits
--   there from one a handler took (see debounce_since)
-- KEYS[7] run record (hash; needs a mode with '@<attempt>:<call>'): one Spark task's record
--   of its run, which makes a retried task write nothing twice (see take_over_run.lua). The
--   call stores the ids it was given and their results as one field, '<attempt>:<call>' ->
--   [[id, ...], '1101...'], one field per call rather than per event because the record is
--   written on every call and read only by a retry. The call is refused when its attempt is
--   older than the record's `fence`: a retry of the task has taken the record over, and what
--   it read from the record must stay all this task ever wrote. It expires a day after the
--   run's last write.
-- ARGV[1] the mode: '1' to replace a pending event with the same id, '0' to keep it, or
--   '1:<ms>' to replace it as a debounce bounded by max_wait ms: the series begins at the
--   first enqueue (or when the pending version's attempt started), and no replacement makes
--   the event due later than that time plus max_wait. With a run record, followed by
--   '@<attempt>:<call>' (the Spark task's attempt id and this call's number in the attempt).
--   Any of these may end in '+wait' (needs the counts key): the caller follows the call with
--   WAIT on the same connection, which confirms only what that connection wrote; a call that
--   writes no event then writes a no-op to counts, so that the WAIT covers every earlier
--   write, the kept events' own included.
-- ARGV[2] event type wire name: checked against the keys' hash tag, so a producer cannot
--   write one type's events into another type's queue
-- then 5 values per event: id, payload (JSON text), context (JSON object of strings),
--   due kind ('delay' or 'at'), milliseconds (a delay, or epoch ms for 'at')
-- Returns one integer per event: 1 scheduled, 0 kept the pending event with that id.
local schedule, events, sequence, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local counts, ready, record = KEYS[5], KEYS[6], KEYS[7]
local mode, event_type = ARGV[1], ARGV[2]
local FIRST_EVENT, PER_EVENT = 3, 5  -- where the events' arguments start, and how many each
local replace = string.sub(mode, 1, 1) == '1'
local max_wait = tonumber(string.match(mode, '^1:(%d+)'))
local confirmed = string.sub(mode, -5) == '+wait'
local attempt, call = string.match(mode, '@(%d+):(%d+)')
local now = server_time_ms()
local tag = string.match(schedule, '{([^}]*)}')
if tag ~= event_type and string.sub(tag or '', 1, #event_type + 1) ~= event_type .. '#' then
  return redis.error_reply('event type ' .. event_type .. ' does not own key ' .. schedule)
end
-- The pending version of `id`, decoded, and its stored text; nil when there is none.
local function pending_envelope(id)
  local stored = redis.call('HGET', events, id)
  if stored then
    local envelope = decoded_object(stored)
    if envelope then
      return envelope, stored
    end
  end
  return nil
end

-- When the debounce series of `id` began: the pending version's, unless it has none or a
-- handler took its attempt (then that version is being handled and a new series begins
-- now). A version that was dispatched but whose delivery still waits in `ready` has reached
-- no handler, and this replacement makes that copy stale: its series goes on. Otherwise
-- replacements that keep landing between a dispatch and the claim (slow consumers, a storm)
-- would start a series each time and no version would ever be delivered.
local function debounce_since(previous, stored, id)
  local since = previous and tonumber(previous.since)
  if not is_time(since) then
    return now
  end
  if previous.due_at == nil then
    return since
  end
  -- LPOS walks the ready list, which a service keeps to a few batches; only a debounced
  -- replacement of a dispatched version pays for it.
  if ready and redis.call('LPOS', ready, delivery_of(id, stored)) then
    return since
  end
  return now
end

local results = {}
local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
local earliest = math.huge
if first[2] then
  earliest = tonumber(first[2])
end
local sooner = false
if confirmed and not counts then
  return redis.error_reply("enqueue mode '+wait' needs the counts key")
end
if record and #ARGV >= FIRST_EVENT then
  if not attempt then
    return redis.error_reply("a run record needs the mode's '@<attempt>:<call>'")
  end
  local refused = abandoned_attempt(record, tonumber(attempt))
  if refused then
    return refused
  end
end
local replaced_under_way = 0
local written = 0
-- A call carries up to thousands of events, and each redis.call costs more than the Lua
-- around it: the pending versions are read with one HMGET, and new events (every event,
-- unless `replace`) are written with one HSET and one ZADD.
local ids = {}
for i = FIRST_EVENT, #ARGV, PER_EVENT do
  ids[#ids + 1] = ARGV[i]
end
-- The due time of an event: `ms` after now for the due kind 'delay', else at epoch `ms`.
local function due_of(kind, ms)
  local due = tonumber(ms)
  if kind == 'delay' then
    due = now + due
  end
  return due
end
-- Notes a due time written: one before every event scheduled wakes the dispatchers.
local function written_due(due)
  if due < earliest then
    sooner = true
    earliest = due
  end
  return due
end
if not replace then
  local pending = hmget_all(events, ids)
  local new, taken = {}, {}
  for n, id in ipairs(ids) do
    if pending[n] or taken[id] then
      results[n] = 0  -- pending already, or earlier in this call
    else
      taken[id] = true
      new[#new + 1] = n
      results[n] = 1
    end
  end
  if #new > 0 then
    -- Versions for all of them at once. GET and SET rather than INCRBY, which the documented
    -- ACL rules do not grant (docs/operating/security.md): the same inside a script, which
    -- nothing interleaves; %d, because Lua would write a large number as 1e+14.
    local version = tonumber(redis.call('GET', sequence) or '0')
    redis.call('SET', sequence, string.format('%d', version + #new))
    local fields, members = {}, {}
    for _, n in ipairs(new) do
      local i = FIRST_EVENT + (n - 1) * PER_EVENT
      local id, payload, context, due_kind, due_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2],
        ARGV[i + 3], ARGV[i + 4]
      version = version + 1
      fields[#fields + 1] = id
      fields[#fields + 1] = envelope_text(payload, context, version)
      members[#members + 1] = written_due(due_of(due_kind, due_ms))
      members[#members + 1] = id
    end
    call_chunked('HSET', events, fields)
    call_chunked('ZADD', schedule, members)
    written = #new
  end
else
  -- A replacement reads its previous version one at a time: a later event of the call may
  -- replace what an earlier one wrote.
  for n, id in ipairs(ids) do
    local i = FIRST_EVENT + (n - 1) * PER_EVENT
    local payload, context, due_kind, due_ms = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
      ARGV[i + 4]
    local previous, stored = pending_envelope(id)
    local due, since, serial = due_of(due_kind, due_ms), nil, nil
    if max_wait then
      since = debounce_since(previous, stored, id)
      due = math.min(due, since + max_wait)
    end
    if previous and type(previous.serial) == 'string' then
      serial = previous.serial
    end
    if previous and previous.due_at ~= nil then
      replaced_under_way = replaced_under_way + 1
    end
    written_due(due)
    write_event(schedule, events, sequence, id, payload, context, due, since, serial)
    written = written + 1
    results[n] = 1
  end
end
if record and #ids > 0 then
  redis.call('HSET', record, attempt .. ':' .. call, cjson.encode({ids, table.concat(results)}))
  redis.call('EXPIRE', record, 86400)
end
count_under_way(counts, -replaced_under_way)
if sooner and wake then
  wake_dispatchers(wake)
end
if confirmed and written == 0 then
  -- HINCRBY by 0 changes nothing but is replicated like any write (see ARGV[1]).
  redis.call('HINCRBY', counts, 'under_way', 0)
end
return results
