-- Renews the leases of the attempts a live worker holds: one call for all it holds of one
-- queue, each period (see aioqueue/_delivery/leases.py and _leases.lua). An attempt is renewed only while it is still the one the worker claimed:
-- never another version (a replacement), another attempt (taken again after the lease
-- lapsed), nor an attempt settled, cancelled or given back meanwhile.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] counts (optional): each move takes a number of
--   its move clock (`moved`, see take_moves in _prelude.lua)
-- ARGV[1] lease ms   ARGV[2] the attempts: one JSON array [id, version, attempt, id, version,
--   attempt, ...] (one argument: a client packs every argument in Python)
-- Returns the positions (1 for the first) of those no longer held: the worker stops
-- renewing them.
local schedule, events, counts = KEYS[1], KEYS[2], KEYS[3]
local lease = tonumber(ARGV[1])
local held = cjson.decode(ARGV[2])
local ids, versions, attempts = {}, {}, {}
for i = 1, #held, 3 do
  ids[#ids + 1] = held[i]
  versions[#versions + 1] = tostring(held[i + 1])
  attempts[#attempts + 1] = tostring(held[i + 2])
end
if #ids == 0 then
  return {}
end
local now = server_time_ms()
local stored = hmget_all(events, ids)
local renewed, rewritten, lost = {}, {}, {}
local next_move = take_moves(counts, #ids)
for n, raw in ipairs(stored) do
  local envelope = raw and decoded_object(raw)
  if holds_claimed(schedule, ids[n], envelope, versions[n], attempts[n]) then
    renewed[#renewed + 1] = now + lease
    renewed[#renewed + 1] = ids[n]
    if next_move then
      envelope.moved = next_move + n - 1
      rewritten[#rewritten + 1] = ids[n]
      rewritten[#rewritten + 1] = cjson.encode(envelope)
    end
  else
    lost[#lost + 1] = n
  end
end
if #renewed > 0 then
  call_chunked('ZADD', schedule, renewed, 'XX')
  if #rewritten > 0 then
    call_chunked('HSET', events, rewritten)
  end
end
return lost
