-- Declares a recurring schedule under one event type, or changes its spec: the latest
-- declaration wins.
-- KEYS[1] schedules (hash: name -> record)   KEYS[2] schedule   KEYS[3] events
-- ARGV[1] name   ARGV[2] spec (see aioqueue/_recurring/spec.py: 'cron <expr> <tz>' or
--   'every <ms> <tz>')   ARGV[3] the token the name directory gave this declaration (see
--   schedule_name_claim.lua; the record keeps it)
-- Returns {outcome, server now ms, record JSON or false}: outcome 'created', 'same', the spec
-- it replaced, or 'superseded' (nothing written: a declaration with a newer token fenced or
-- wrote this record meanwhile). A replaced spec's pending next tick is cancelled (unless an
-- attempt of it has started), and the new spec's ticks start after now: no tick of the old
-- spec fires after the change reached Redis.
-- A record written where no live one was is `pending`: it produces no tick until
-- schedule_activate.lua makes it live, once the declaration has read the name directory
-- again and found its claim still standing. Only the directory can tell that the claim was
-- overtaken: the fence that says so here is lost with this slot's data (see
-- aioqueue/_recurring/names.py).
local schedules, schedule, events = KEYS[1], KEYS[2], KEYS[3]
local name, spec, token = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = server_time_ms()
local raw = redis.call('HGET', schedules, name)
local record = raw and decoded_object(raw) or nil  -- nil, never false
if record and record.spec == nil then
  -- A tombstone (schedule_fence.lua): the name left this type, or was removed.
  if (tonumber(record.fenced) or 0) >= token then
    return {'superseded', now, false}
  end
  record = nil
end
if record and (tonumber(record.token) or 0) > token then
  return {'superseded', now, false}
end
if record and record.spec == spec then
  if (tonumber(record.token) or 0) ~= token then
    -- The same schedule, declared again through a newer claim of the name: its ticks go on
    -- (a pending record stays pending, for the declaration to make live).
    record.token = token
    raw = cjson.encode(record)
    redis.call('HSET', schedules, name, raw)
  end
  return {'same', now, raw}
end
local outcome = 'created'
local fresh = {spec = spec, declared_at = now, token = token}
if not record or record.pending ~= nil then
  fresh.pending = 1
end
if record then
  outcome = tostring(record.spec)
  cancel_pending_tick(schedule, events, record.tick_id, now)
  fresh.tick = now
  fresh.previous_tick = record.tick
  fresh.produced_at = record.produced_at
end
raw = cjson.encode(fresh)
redis.call('HSET', schedules, name, raw)
return {outcome, now, raw}
