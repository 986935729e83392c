-- Resumes a paused type (one partition of it) and wakes its dispatchers, which then take
-- everything that came due meanwhile, in due order.
-- KEYS[1] paused   KEYS[2] wake
-- Returns 1 when it was paused, 0 when it was not.
local paused, wake = KEYS[1], KEYS[2]
local was_paused = redis.call('HDEL', paused, 'paused')
wake_dispatchers(wake)
return was_paused
