-- Declares a recurring schedule, or changes its spec: the latest declaration wins.
-- KEYS[1] schedules (hash: name -> record)   KEYS[2] schedule   KEYS[3] events
-- ARGV[1] name   ARGV[2] spec (see aioqueue/_recurring/spec.py: 'cron <expr> <tz>' or
--   'every <ms>')
-- Returns {outcome, server now ms, record JSON}: outcome 'created', 'same', or the spec it
-- replaced. A replaced spec's pending next tick is cancelled (unless an attempt of it has
-- started), and the new spec's ticks start after now: no tick of the old spec fires after
-- the change reached Redis.
local now = server_time_ms()
local name, spec = ARGV[1], ARGV[2]
local raw = redis.call('HGET', KEYS[1], name)
local ok, record = false, nil
if raw then
  ok, record = pcall(cjson.decode, raw)
end
if ok and type(record) == 'table' and record.spec == spec then
  return {'same', now, raw}
end
local outcome = 'created'
local fresh = {spec = spec, declared_at = now}
if ok and type(record) == 'table' then
  outcome = tostring(record.spec)
  cancel_pending_tick(KEYS[2], KEYS[3], record.tick_id, now)
  fresh.tick = now
  fresh.previous_tick = record.tick
  fresh.produced_at = record.produced_at
end
raw = cjson.encode(fresh)
redis.call('HSET', KEYS[1], name, raw)
return {outcome, now, raw}
