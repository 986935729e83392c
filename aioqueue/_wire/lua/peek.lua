-- What waits in queues, for a service's sweep (aioqueue/_delivery/wake_ups.py): it looks at
-- every queue it dispatches or consumes now and then, so that work whose wake-up it did not
-- hear (a producer that publishes none, a subscription that was down) is found within a
-- scheduling interval. On one server one call reads many queues, so that a sweep of a
-- thousand queues is a few commands, not a thousand; on a cluster a call reads one queue (its
-- keys share a slot, another queue's need not). Reads only.
-- KEYS[2n-1] the schedule of queue n   KEYS[2n] its ready list
-- Returns {server now ms, then per queue: earliest score in its schedule or -1 (empty), or -2
-- when the server refuses to read its keys (written by hand with the wrong type: its dispatch
-- says so), and its ready list's length}.
local replies = {server_time_ms()}
for n = 1, #KEYS, 2 do
  local first = redis.pcall('ZRANGE', KEYS[n], 0, 0, 'WITHSCORES')
  local length = redis.pcall('LLEN', KEYS[n + 1])
  if first.err or type(length) ~= 'number' then
    replies[#replies + 1] = -2
    replies[#replies + 1] = 0
  else
    local earliest = -1
    if first[2] and is_time(tonumber(first[2])) then
      earliest = tonumber(first[2])
    end
    replies[#replies + 1] = earliest
    replies[#replies + 1] = length
  end
end
return replies
