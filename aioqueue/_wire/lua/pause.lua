-- Pauses one type (one partition of it) for every service: from this call on, dispatch.lua
-- and claim.lua take none of its events, and the deliveries already waiting in the ready
-- list go back to the schedule as if never dispatched (their attempt uncounted, due at their
-- old due time), so a long pause neither spends attempts nor lets leases run out unclaimed.
-- Handlers already running finish as usual.
-- KEYS[1] paused   KEYS[2] ready   KEYS[3] schedule   KEYS[4] events
-- KEYS[5] counts (optional): the returned deliveries leave its `under_way` (see
--   count_under_way in _prelude.lua), and each move back takes a number of its move clock
--   (`moved`, see take_moves)
-- Returns how many waiting deliveries went back to the schedule.
-- The flag is a hash field (`paused` -> server time of the pause, ms), and the ready list is
-- emptied by LPOP, so a service's ACL user needs no command beyond what the queue needs.
local paused, ready, schedule, events, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
redis.call('HSET', paused, 'paused', server_time_ms())
local returned = 0
local waiting = redis.call('LLEN', ready)
local copies = {}
if waiting > 0 then
  copies = redis.call('LPOP', ready, waiting)
end
for _, raw in ipairs(copies) do
  local id, id_in_front = delivery_id(raw)
  local stored = id and redis.call('HGET', events, id)
  -- A stale copy (cancelled, replaced, dispatched again) has nothing to give back.
  if stored and is_delivery_of(raw, id, stored, id_in_front) then
    local envelope = cjson.decode(stored)
    local due = tonumber(envelope.due_at)
    if is_time(due) then
      give_back(schedule, events, counts, id, envelope, due, false)  -- taken out of the list
      returned = returned + 1
    end
  end
end
count_under_way(counts, -returned)
return returned
