-- Schedules events of one type.
-- KEYS[1] schedule (zset id -> due ms)   KEYS[2] events (hash id -> envelope)
-- KEYS[3] sequence (string counter for envelope versions)
-- KEYS[4] wake (list, optional): gets a token when an event is due before every event
--   already scheduled, so a dispatcher sleeping until the old earliest time wakes up.
-- ARGV[1] '1' to replace a pending event with the same id, '0' to keep it
-- ARGV[2] event type wire name: checked against the keys' hash tag, so a producer cannot
--   write one type's events into another type's queue
-- then 5 values per event: id, payload (JSON text), context (JSON object of strings),
--   due kind ('delay' or 'at'), milliseconds (a delay, or epoch ms for 'at')
-- Returns one integer per event: 1 scheduled, 0 kept the pending event with that id.
local now = server_time_ms()
local replace = ARGV[1] == '1'
local event_type = ARGV[2]
local tag = string.match(KEYS[1], '{([^}]*)}')
if tag ~= event_type and string.sub(tag or '', 1, #event_type + 1) ~= event_type .. '#' then
  return redis.error_reply('event type ' .. event_type .. ' does not own key ' .. KEYS[1])
end
local results = {}
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = math.huge
if first[2] then
  earliest = tonumber(first[2])
end
local sooner = false
for i = 3, #ARGV, 5 do
  local id = ARGV[i]
  if not replace and redis.call('HEXISTS', KEYS[2], id) == 1 then
    results[#results + 1] = 0
  else
    local due = tonumber(ARGV[i + 4])
    if ARGV[i + 3] == 'delay' then
      due = now + due
    end
    write_event(KEYS[1], KEYS[2], KEYS[3], id, ARGV[i + 1], ARGV[i + 2], due)
    results[#results + 1] = 1
    if due < earliest then
      sooner = true
      earliest = due
    end
  end
end
if sooner and KEYS[4] then
  wake_dispatchers(KEYS[4])
end
return results
