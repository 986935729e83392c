-- Makes a pending event due now, keeping its attempt count (aioqueue events run-now).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] wake
-- ARGV[1] id
-- Returns 'due', 'missing' (no pending event: never scheduled, handled, cancelled or dead)
-- or 'in_flight' (an attempt is under way and its lease has not ended: making it due would
-- start a second attempt beside it).
local id = ARGV[1]
local stored = redis.call('HGET', KEYS[2], id)
if not stored then
  return 'missing'
end
local now = server_time_ms()
local ok, envelope = pcall(cjson.decode, stored)
local score = tonumber(redis.call('ZSCORE', KEYS[1], id))
if ok and type(envelope) == 'table' and envelope.due_at ~= nil and score and score > now then
  return 'in_flight'
end
redis.call('ZADD', KEYS[1], now, id)
-- Wake sleeping dispatchers; one token is enough (see enqueue.lua).
redis.call('RPUSH', KEYS[3], 1)
redis.call('LTRIM', KEYS[3], -1, -1)
return 'due'
