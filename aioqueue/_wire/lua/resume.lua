-- Resumes a paused type (one partition of it) and wakes its dispatchers, which then take
-- everything that came due meanwhile, in due order.
-- KEYS[1] paused   KEYS[2] wake
-- Returns 1 when it was paused, 0 when it was not.
local was_paused = redis.call('HDEL', KEYS[1], 'paused')
wake_dispatchers(KEYS[2])
return was_paused
