-- Moves a pending event to another due time, keeping its payload, context and attempt count
-- (EventService.reschedule; run_now, `aioqueue events run-now`, is a move to now).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] wake
-- ARGV[1] id   ARGV[2] 'delay' or 'at'   ARGV[3] milliseconds: a delay from the server's now,
--   or epoch ms
-- Returns 'moved', 'missing' (no pending event: never scheduled, handled, cancelled or dead)
-- or 'in_flight' (an attempt is under way and its lease has not ended: moving it would start
-- a second attempt beside it, or drop the pre-scheduled retry of a lost worker).
-- One ZADD on the existing member: there is no moment at which the event is not scheduled.
local id = ARGV[1]
local stored = redis.call('HGET', KEYS[2], id)
if not stored then
  return 'missing'
end
local now = server_time_ms()
local envelope = decoded_object(stored)
local score = tonumber(redis.call('ZSCORE', KEYS[1], id))
if envelope and envelope.due_at ~= nil and score and score > now then
  return 'in_flight'
end
local due = tonumber(ARGV[3])
if ARGV[2] == 'delay' then
  due = now + due
end
redis.call('ZADD', KEYS[1], due, id)
local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if first[1] == id then
  -- Now the earliest: a dispatcher sleeping until the old earliest time must wake.
  wake_dispatchers(KEYS[3])
end
return 'moved'
