-- What waits in one queue, for a service's sweep (aioqueue/_delivery/wake_ups.py): it looks
-- at every queue it dispatches or consumes now and then, in one pipeline, so that work whose
-- wake-up it did not hear (a producer that publishes none, a subscription that was down) is
-- found within a scheduling interval. Reads only.
-- KEYS[1] schedule   KEYS[2] ready
-- Returns {server now ms, earliest score in the schedule or -1, ready list length}.
local schedule, ready = KEYS[1], KEYS[2]
local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
local earliest = -1
if first[2] and is_time(tonumber(first[2])) then
  earliest = tonumber(first[2])
end
return {server_time_ms(), earliest, redis.call('LLEN', ready)}
