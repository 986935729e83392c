-- Removes a pending event. Copies already pushed to the ready list are dropped when a
-- consumer claims them (claim.lua compares them with the stored envelope).
-- KEYS[1] schedule   KEYS[2] events
-- KEYS[3] serial_holders   KEYS[4] serial_waiting   KEYS[5] wake (optional, together): an
--   event that held a serial key frees it; one parked on a key leaves its member in
--   serial_waiting, which unpark_next drops when it reaches it
-- KEYS[6] counts (optional): a cancelled attempt under way leaves its `under_way` (see
--   count_under_way in _prelude.lua)
-- ARGV[1] id
-- Returns 1 when an event was removed, 0 when none was pending.
local schedule, events, counts = KEYS[1], KEYS[2], KEYS[6]
local serial = serial_keys(KEYS, 3)
local id = ARGV[1]
local stored = (serial or counts) and redis.call('HGET', events, id)
local removed = redis.call('HDEL', events, id)
redis.call('ZREM', schedule, id)
if stored then
  local envelope = decoded_object(stored)
  if envelope then
    if envelope.due_at ~= nil then
      count_under_way(counts, -1)
    end
    if settle_serial(serial, schedule, events, envelope.serial, id) > 0 then
      wake_dispatchers(serial.wake)
    end
  end
end
return removed
