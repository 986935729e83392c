-- Records a failed attempt: schedules the retry, or buries the event when it is out of
-- attempts (or when ARGV[6] is '1': its payload can never be handled).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] dead_letters   KEYS[4] dead_letter_times
-- KEYS[5] serial_holders   KEYS[6] serial_waiting   KEYS[7] wake (optional, together): a
--   buried event that held a serial key frees it; a retry keeps it (later events of its
--   value wait for the retry)
-- KEYS[8] counts (optional, with 5-7): this attempt leaves its `under_way` (see
--   count_under_way in _prelude.lua); a retry's move takes a number of its move clock
--   (`moved`, see take_moves)
-- ARGV[1] id   ARGV[2] delivered version   ARGV[3] error text   ARGV[4] retry delay ms
-- ARGV[5] max attempts   ARGV[6] '1' to bury now   ARGV[7] delivered attempt (optional)
-- Returns 'retry', 'dead', or 'stale' when the event was cancelled or replaced meanwhile, or
-- (with ARGV[7]) taken again by another worker after this attempt's lease lapsed.
local id = ARGV[1]
local raw = redis.call('HGET', KEYS[2], id)
if not raw then
  return 'stale'
end
local envelope = decoded_object(raw)
if not envelope or tostring(version_of(envelope)) ~= ARGV[2]
    or (ARGV[7] and tostring(envelope.attempt) ~= ARGV[7]) then
  return 'stale'
end
local now = server_time_ms()
-- The attempt is over, whether a retry or the dead letters follow.
count_under_way(KEYS[8], envelope.due_at ~= nil and -1 or 0)
if ARGV[6] == '1' or (tonumber(envelope.attempt) or 0) >= tonumber(ARGV[5]) then
  local serial = serial_keys(KEYS, 5)
  bury(KEYS[1], KEYS[2], KEYS[3], KEYS[4], id, envelope, ARGV[3], now)
  if settle_serial(serial, KEYS[1], KEYS[2], envelope.serial, id) > 0 then
    wake_dispatchers(serial.wake)
  end
  return 'dead'
end
envelope.error = ARGV[3]
-- Only an event whose attempt is under way carries `due_at`, which is how `aioqueue stats`
-- tells in-flight events from those waiting for their retry.
envelope.due_at = nil
envelope.pushed = nil  -- its delivery was claimed: nothing of it is in the ready list
envelope.moved = take_moves(KEYS[8], 1) or envelope.moved
redis.call('HSET', KEYS[2], id, cjson.encode(envelope))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), id)
return 'retry'
