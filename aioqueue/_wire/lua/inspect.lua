-- Everything the queue knows of one event, read atomically (aioqueue events show).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] dead_letters
-- KEYS[5] dead_letter_times
-- ARGV[1] id
-- Returns {server now ms, stored envelope or false, schedule score or false,
--          1 if a current delivery waits in the ready list else 0,
--          dead letter or false, died at ms or false}.
local schedule, events, ready = KEYS[1], KEYS[2], KEYS[3]
local dead_letters, dead_letter_times = KEYS[4], KEYS[5]
local id = ARGV[1]
local stored = redis.call('HGET', events, id)
local in_ready = 0
if stored and redis.call('LPOS', ready, delivery_of(id, stored)) then
  in_ready = 1
end
return {
  server_time_ms(),
  stored,
  redis.call('ZSCORE', schedule, id),
  in_ready,
  redis.call('HGET', dead_letters, id),
  redis.call('ZSCORE', dead_letter_times, id),
}
