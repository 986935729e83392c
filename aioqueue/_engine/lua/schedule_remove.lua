-- Removes a recurring schedule and its pending next tick (unless an attempt of it started).
-- KEYS[1] schedules   KEYS[2] schedule   KEYS[3] events
-- ARGV[1] name
-- Returns 1 when a schedule was removed, 0 when there was none.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  return 0
end
local ok, record = pcall(cjson.decode, raw)
if ok and type(record) == 'table' then
  cancel_pending_tick(KEYS[2], KEYS[3], record.tick_id, server_time_ms())
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
