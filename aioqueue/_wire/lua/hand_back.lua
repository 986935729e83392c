-- Gives back attempts a stopping worker holds, so that another worker takes them at once
-- instead of after their lease (see aioqueue/_delivery/leases.py and
-- _leases.lua). An attempt no handler began spends nothing: its count goes back to what it
-- was before the claim, and it is due at its old due time, ahead of what came due later. An
-- attempt whose handler was cut off is spent: it keeps its count and error, and is due now
-- (after its last attempt, the next dispatch moves it to the dead letters with that error).
-- Only the attempt the worker claimed is given back, never a version or attempt that
-- replaced it, nor one settled meanwhile.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] wake: dispatchers sleeping until a later
--   time wake at once   KEYS[4] counts (optional): the attempts given back leave its
--   `under_way` (see count_under_way) and each move takes a number of its move clock
-- ARGV[1] the attempts: one JSON array [id, version, attempt, error, ...], error '' for an
--   attempt no handler began, else why its handler was cut off
-- Returns how many attempts were given back.
local schedule, events, wake, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local given = cjson.decode(ARGV[1])
local now = server_time_ms()
local returned = 0
for i = 1, #given, 4 do
  local id, version, attempt, cut_off = given[i], tostring(given[i + 1]), tostring(given[i + 2]),
    given[i + 3]
  local envelope = decoded_object(redis.call('HGET', events, id) or '')
  if holds_claimed(schedule, id, envelope, version, attempt) then
    local due, spent = now, cut_off ~= ''
    if spent then
      envelope.error = cut_off
    elseif is_time(tonumber(envelope.due_at)) then
      due = tonumber(envelope.due_at)
    end
    give_back(schedule, events, counts, id, envelope, due, spent)
    returned = returned + 1
  end
end
count_under_way(counts, -returned)
if returned > 0 then
  wake_dispatchers(wake)
end
return returned
