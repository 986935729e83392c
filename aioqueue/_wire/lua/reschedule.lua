-- Moves a pending event to another due time, keeping its payload, context and attempt count
-- (EventService.reschedule; run_now, `aioqueue events run-now`, is a move to now).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] wake   KEYS[4] counts (optional): the move
--   takes a number of its move clock (`moved`, see take_moves in _prelude.lua)
-- ARGV[1] id   ARGV[2] 'delay' or 'at'   ARGV[3] milliseconds: a delay from the server's now,
--   or epoch ms
-- Returns 'moved', 'missing' (no pending event: never scheduled, handled, cancelled or dead)
-- or 'in_flight' (an attempt is under way: moving it would start a second attempt beside
-- it, or drop the pre-scheduled retry of a lost worker; once that lease has ended the event
-- is due, and the next dispatch takes it again).
-- One ZADD on the existing member: there is no moment at which the event is not scheduled.
-- The envelope is rewritten with the move's number, which leaves no delivery stale: only an
-- event under way has one in the ready list, and that one is refused.
local schedule, events, wake, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, due_kind, due_ms = ARGV[1], ARGV[2], ARGV[3]
local stored = redis.call('HGET', events, id)
if not stored then
  return 'missing'
end
local now = server_time_ms()
local envelope = decoded_object(stored)
if envelope and envelope.due_at ~= nil then
  return 'in_flight'
end
local due = tonumber(due_ms)
if due_kind == 'delay' then
  due = now + due
end
if redis.call('ZADD', schedule, 'CH', due, id) == 1 and envelope then
  local moved = take_moves(counts, 1)
  if moved then
    envelope.moved = moved
    redis.call('HSET', events, id, cjson.encode(envelope))
  end
end
local first = redis.call('ZRANGE', schedule, 0, 0)
if first[1] == id then
  -- Now the earliest: a dispatcher sleeping until the old earliest time must wake.
  wake_dispatchers(wake)
end
return 'moved'
