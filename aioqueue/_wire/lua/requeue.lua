-- Puts a dead event back into its queue, due now, with a fresh attempt count.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] sequence   KEYS[4] dead_letters
-- KEYS[5] dead_letter_times   KEYS[6] wake (optional): dispatchers sleeping until a later
--   time wake at once, as after an enqueue
-- ARGV[1] id
-- Returns 1 requeued; 0 no such dead letter; -1 an event with that id is pending (both kept);
-- -2 the dead letter has no readable envelope (it stays where it is).
local schedule, events, sequence = KEYS[1], KEYS[2], KEYS[3]
local dead_letters, dead_letter_times, wake = KEYS[4], KEYS[5], KEYS[6]
local id = ARGV[1]
local raw = redis.call('HGET', dead_letters, id)
if not raw then
  return 0
end
if redis.call('HEXISTS', events, id) == 1 then
  return -1
end
local envelope = decoded_object(raw)
if not envelope or type(payload_of(envelope)) ~= 'string' then
  return -2
end
local now = server_time_ms()
envelope.id = nil
envelope.attempt = nil  -- a fresh count: 0, left out (see write_event in _prelude.lua)
envelope.error = nil
envelope.died_at = nil
envelope.due_at = nil
envelope.parked = nil  -- left by a dispatch that parked it on its serial key
envelope.since = nil  -- a requeued event starts afresh, also as a debounce series
envelope.moved, envelope.pushed = nil, nil  -- its new version dates it (see page.lua)
-- Written with the keys write_event uses, whichever the dead letter was stored with.
envelope.p, envelope.payload = payload_of(envelope), nil
envelope.v, envelope.version = redis.call('INCR', sequence), nil
redis.call('HSET', events, id, cjson.encode(envelope))
redis.call('ZADD', schedule, now, id)
redis.call('HDEL', dead_letters, id)
redis.call('ZREM', dead_letter_times, id)
if wake then
  wake_dispatchers(wake)
end
return 1
