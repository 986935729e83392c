-- Everything the queue knows of one event, read atomically (aioqueue events show).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] dead_letters
-- KEYS[5] dead_letter_times
-- ARGV[1] id
-- Returns {server now ms, stored envelope or false, schedule score or false,
--          1 if a current delivery waits in the ready list else 0,
--          dead letter or false, died at ms or false}.
local id = ARGV[1]
local stored = redis.call('HGET', KEYS[2], id)
local in_ready = 0
if stored and redis.call('LPOS', KEYS[3], delivery_of(id, stored)) then
  in_ready = 1
end
return {
  server_time_ms(),
  stored,
  redis.call('ZSCORE', KEYS[1], id),
  in_ready,
  redis.call('HGET', KEYS[4], id),
  redis.call('ZSCORE', KEYS[5], id),
}
