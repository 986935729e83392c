-- Keeps an attempt that is still running from being dispatched again: moves the event's
-- pre-scheduled next attempt to `lease` ms from now. Used for sync handlers past their
-- timeout, whose thread cannot be stopped (see aioqueue/_delivery/threaded_calls.py).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] counts (optional): the move takes a number of
--   its move clock (`moved`, see take_moves in _prelude.lua)
-- ARGV[1] id   ARGV[2] delivered version   ARGV[3] delivered attempt   ARGV[4] lease ms
-- Returns 1 when the lease was extended, 0 when the attempt is no longer the one running (the
-- event was cancelled, replaced, settled or dispatched again meanwhile).
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then
  return 0
end
local envelope = decoded_object(raw)
if not envelope or tostring(version_of(envelope)) ~= ARGV[2]
    or tostring(envelope.attempt) ~= ARGV[3] or envelope.due_at == nil then
  return 0
end
if redis.call('ZADD', KEYS[1], 'XX', 'CH', server_time_ms() + tonumber(ARGV[4]), ARGV[1]) == 1 then
  local moved = take_moves(KEYS[3], 1)
  if moved then
    envelope.moved = moved
    redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(envelope))
  end
end
return 1
