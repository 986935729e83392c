-- Fences one event type's record of a schedule name with a token from the name directory
-- (see schedule_name_claim.lua): a record declared under an older token is replaced by a
-- tombstone {fenced = token}, and its pending next tick is cancelled (unless its attempt has
-- started). From then on schedule_tick.lua produces nothing for it, and schedule_declare.lua
-- refuses a declaration with a token at or below the tombstone's, so a declaration that was
-- overtaken cannot bring the record back. A record declared under the token or a newer one
-- is left alone. With no record a tombstone is written all the same, for that last reason.
-- KEYS[1] schedules   KEYS[2] schedule   KEYS[3] events
-- ARGV[1] name   ARGV[2] token
-- Returns 1 when a live record was fenced, else 0 (a pending one, see schedule_declare.lua,
-- is fenced all the same: it was never live).
local schedules, schedule, events = KEYS[1], KEYS[2], KEYS[3]
local name, token = ARGV[1], tonumber(ARGV[2])
local raw = redis.call('HGET', schedules, name)
local record = raw and decoded_object(raw) or nil  -- nil, never false
local live = record ~= nil and record.spec ~= nil
if live and (tonumber(record.token) or 0) >= token then
  return 0
end
if record and not live and (tonumber(record.fenced) or 0) >= token then
  return 0
end
if live then
  cancel_pending_tick(schedule, events, record.tick_id, server_time_ms())
end
redis.call('HSET', schedules, name, cjson.encode({fenced = token}))
return (live and record.pending == nil) and 1 or 0
