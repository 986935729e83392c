-- Removes a pending event. Copies already pushed to the ready list are dropped when a
-- consumer claims them (claim.lua compares them with the stored envelope).
-- KEYS[1] schedule   KEYS[2] events
-- ARGV[1] id
-- Returns 1 when an event was removed, 0 when none was pending.
local removed = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return removed
