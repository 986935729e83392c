-- One page of pending events in schedule order, after a cursor (aioqueue events list).
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready
-- ARGV[1] cursor score, as Redis wrote it ('-inf' for the first page)
-- ARGV[2] cursor id ('' takes every event at the cursor score, so a page can start at a time)
-- ARGV[3] score to list up to, not included ('' for no bound)   ARGV[4] page size
-- Returns {server now ms, id, score, stored envelope or false, 1 if a current delivery of it
-- waits in the ready list else 0, ...}: at most ARGV[4] events whose (score, id) comes after
-- the cursor, in (score, id) order. The ready list is read whole: it holds two dispatch
-- batches at most. Redis orders equal scores
-- by the members' bytes, so the cursor's place is found by a binary search over ranks:
-- O(log N) reads however many events share one due time (enqueue_many gives a whole batch
-- the same one), and a page costs O(log N + page size) whatever the backlog.

-- Whether `a` sorts after `b` byte by byte, as Redis sorts members (Lua's own string
-- comparison follows the server's collation locale).
local function bytes_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return #a > #b
end

local key = KEYS[1]
local score, id = ARGV[1], ARGV[2]
local limit = tonumber(ARGV[4])
local first = redis.call('ZCOUNT', key, '-inf', '(' .. score)
if id ~= '' then
  local last = first + redis.call('ZCOUNT', key, score, score)
  while first < last do
    local middle = math.floor((first + last) / 2)
    if bytes_after(redis.call('ZRANGE', key, middle, middle)[1], id) then
      last = middle
    else
      first = middle + 1
    end
  end
end
local entries = redis.call('ZRANGE', key, first, first + limit - 1, 'WITHSCORES')
local highest = tonumber(ARGV[3])
local ready = {}
if #entries > 0 then
  for _, delivery in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    ready[delivery] = true
  end
end
local result = {server_time_ms()}
for i = 1, #entries, 2 do
  local member = entries[i]
  if highest and tonumber(entries[i + 1]) >= highest then
    break
  end
  local stored = redis.call('HGET', KEYS[2], member)
  result[#result + 1] = member
  result[#result + 1] = entries[i + 1]
  result[#result + 1] = stored
  result[#result + 1] = (stored and ready[delivery_of(member, stored)]) and 1 or 0
end
return result
