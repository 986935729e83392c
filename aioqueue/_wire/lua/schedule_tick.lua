-- Produces one tick of a recurring schedule: enqueues the tick's event and records the tick,
-- atomically, provided the schedule is still as the caller read it. So a tick is produced
-- once however many services keep the schedule, and a service killed at any point neither
-- loses nor doubles one.
-- KEYS[1] schedules   KEYS[2] schedule   KEYS[3] events   KEYS[4] sequence   KEYS[5] wake
-- ARGV[1] name   ARGV[2] spec   ARGV[3] the tick the caller read ('' when none yet)
-- ARGV[4] the tick to produce (ms)   ARGV[5] event id   ARGV[6] payload (JSON text)
-- ARGV[7] context (JSON object of strings)   ARGV[8] due (ms, server clock)
-- ARGV[9] the record's token as the caller read it (see schedule_name_claim.lua)
-- Returns {outcome, server now ms, record JSON or false}: 'produced' (the event is
-- scheduled), 'kept' (an event with that id was pending already and is kept: the tick is
-- recorded all the same), 'moved' (another service produced a tick meanwhile: nothing
-- written), 'early' (the latest tick is still to come: nothing written), 'changed' (the
-- stored spec, or the declaration it belongs to, is another one: nothing written), 'gone'
-- (removed, the name moved to another event type, or its record is not live yet).
local schedules, schedule, events, sequence, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local name, spec, read_tick, tick = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local id, payload, context, due = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local token = tonumber(ARGV[9])
local now = server_time_ms()
local raw = redis.call('HGET', schedules, name)
if not raw then
  return {'gone', now, false}
end
local record = decoded_object(raw)
if not record or record.spec == nil or record.pending ~= nil then
  -- Unreadable, a tombstone (schedule_fence.lua), or a record not live yet
  -- (schedule_declare.lua).
  return {'gone', now, false}
end
if record.spec ~= spec or (tonumber(record.token) or 0) ~= token then
  return {'changed', now, raw}
end
local seen = record.tick and tostring(record.tick) or ''
if seen ~= read_tick then
  return {'moved', now, raw}
end
if record.tick and record.tick > now then
  -- The latest tick is still to come: one future tick at a time, so that a changed or
  -- removed schedule has exactly one pending tick to cancel.
  return {'early', now, raw}
end
local outcome = 'kept'
if redis.call('HEXISTS', events, id) == 0 then
  local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  write_event(schedule, events, sequence, id, payload, context, due)
  if not first[2] or due < tonumber(first[2]) then
    wake_dispatchers(wake)
  end
  outcome = 'produced'
end
record.previous_tick = record.tick
record.tick = tick
record.tick_id = id
record.produced_at = now
raw = cjson.encode(record)
redis.call('HSET', schedules, name, raw)
return {outcome, now, raw}
