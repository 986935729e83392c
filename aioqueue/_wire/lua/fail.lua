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
local schedule, events, dead_letters, dead_letter_times = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local counts = KEYS[8]
local id, delivered_version, error_text, retry_delay_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max_attempts, bury_now, delivered_attempt = ARGV[5], ARGV[6], ARGV[7]
local raw = redis.call('HGET', events, id)
if not raw then
  return 'stale'
end
local envelope = decoded_object(raw)
if not envelope or tostring(version_of(envelope)) ~= delivered_version
    or (delivered_attempt and tostring(envelope.attempt) ~= delivered_attempt) then
  return 'stale'
end
local now = server_time_ms()
-- The attempt is over, whether a retry or the dead letters follow.
count_under_way(counts, envelope.due_at ~= nil and -1 or 0)
if bury_now == '1' or (tonumber(envelope.attempt) or 0) >= tonumber(max_attempts) then
  local serial = serial_keys(KEYS, 5)
  bury(schedule, events, dead_letters, dead_letter_times, id, envelope, error_text, now)
  if settle_serial(serial, schedule, events, envelope.serial, id) > 0 then
    wake_dispatchers(serial.wake)
  end
  return 'dead'
end
envelope.error = error_text
-- Only an event whose attempt is under way carries `due_at`, which is how `aioqueue stats`
-- tells in-flight events from those waiting for their retry.
envelope.due_at = nil
envelope.pushed = nil  -- its delivery was claimed: nothing of it is in the ready list
envelope.moved = take_moves(counts, 1) or envelope.moved
redis.call('HSET', events, id, cjson.encode(envelope))
redis.call('ZADD', schedule, now + tonumber(retry_delay_ms), id)
return 'retry'
