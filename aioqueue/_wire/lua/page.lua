-- One page of pending events in schedule order, after a cursor (aioqueue events list), as one
-- step of a walk through the schedule.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] sequence   KEYS[5] counts
-- ARGV[1] cursor score, as Redis wrote it ('-inf' for the first page)
-- ARGV[2] cursor id ('' takes every event at the cursor score, so a page can start at a time)
-- ARGV[3] score to list up to, not included ('' for no bound)   ARGV[4] events wanted
-- ARGV[5] where the walk began, as its first page returned it ('' on the first page)
-- Returns {server now ms, where the walk began, 1 if every event up to the bound was
-- examined else 0, score and id of the last event examined (false, false when none), then
-- id, score, stored envelope or false, 1 if a current delivery of it waits in the ready list
-- else 0, ...}: at most ARGV[4] events whose (score, id) comes after the cursor, in
-- (score, id) order.
--
-- A walk lists an event at most once. An event moves to a later score while the walk goes
-- on (dispatch moves it to its lease end, a claim further, a failure to its retry), and
-- would be listed again there. So the first page notes where the walk began: the version
-- counter (`sequence`: every enqueue, replace and requeue takes a new version), the move
-- clock (`counts` field `moves`, see take_moves in _prelude.lua) and the `pushed` number of
-- the first delivery in the ready list. Later pages leave out what was written or moved
-- since: a newer version, a newer `moved`, or an event under way whose delivery was in the
-- ready list when the walk began and has been claimed since (deliveries are claimed in the
-- order they were pushed, so it was claimed after the walk began). An event that stays where
-- it is is listed once; one that moved may be missing, or listed once, before it moved.
-- Leaving events out costs reading them: a page examines at most ARGV[4] + 1000 events, and
-- when the budget runs out before a page is full it returns what it found and where it
-- stopped (the caller's next cursor), so a page costs O(log N + page size + 1000).
--
-- Redis orders equal scores by the members' bytes, so the cursor's place is found by a
-- binary search over ranks: O(log N) reads however many events share one due time
-- (enqueue_many gives a whole batch the same one). The ready list is read whole when a
-- page needs it: it holds two dispatch batches at most.

local SKIP_BUDGET = 1000

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

local schedule, events, ready, sequence, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local score, id = ARGV[1], ARGV[2]
local highest, wanted = tonumber(ARGV[3]), tonumber(ARGV[4])
local walk_began = ARGV[5]
local first = redis.call('ZCOUNT', schedule, '-inf', '(' .. score)
if id ~= '' then
  local last = first + redis.call('ZCOUNT', schedule, score, score)
  while first < last do
    local middle = math.floor((first + last) / 2)
    if bytes_after(redis.call('ZRANGE', schedule, middle, middle)[1], id) then
      last = middle
    else
      first = middle + 1
    end
  end
end

local ready_list, waiting = nil, nil  -- the ready list, and its deliveries as a set
local function in_ready(member, stored)
  if not waiting then
    ready_list = ready_list or redis.call('LRANGE', ready, 0, -1)
    waiting = {}
    for _, delivery in ipairs(ready_list) do
      waiting[delivery] = true
    end
  end
  return waiting[delivery_of(member, stored)] == true
end

-- Where the walk began: given, or read now (this is its first page).
local began = walk_began
local written, moves, head
if began == '' then
  written = tonumber(redis.call('GET', sequence)) or 0
  moves = tonumber(redis.call('HGET', counts, 'moves')) or 0
  ready_list = redis.call('LRANGE', ready, 0, -1)
  for _, delivery in ipairs(ready_list) do
    local envelope = decoded_object(delivery)
    if envelope and tonumber(envelope.pushed) then
      head = tonumber(envelope.pushed)
      break
    end
  end
  began = string.format('%d:%d:%s', written, moves, head and string.format('%d', head) or '')
else
  local w, m, h = string.match(began, '^(%d+):(%d+):(%d*)$')
  written, moves, head = tonumber(w), tonumber(m), tonumber(h)
end
local first_page = walk_began == ''

-- Whether the walk lists this event here, or it was written or moved since the walk began.
local function stayed(member, stored)
  if first_page or not stored then
    return true
  end
  local envelope = decoded_object(stored)
  if not envelope then
    return true
  end
  if (tonumber(version_of(envelope)) or 0) > written then
    return false
  end
  local moved, pushed = tonumber(envelope.moved), tonumber(envelope.pushed)
  if (moved and moved > moves) or (pushed and pushed > moves) then
    return false
  end
  if envelope.due_at ~= nil and pushed and head and pushed >= head then
    return in_ready(member, stored)  -- else claimed during the walk
  end
  return true
end

local result = {server_time_ms(), began, 0, false, false}
local examined, found, rank = 0, 0, first
local budget = wanted + SKIP_BUDGET
local done = false  -- every event up to the bound was examined
while not done and found < wanted and examined < budget do
  local count = math.min(budget - examined, wanted - found + 50)
  local entries = redis.call('ZRANGE', schedule, rank, rank + count - 1, 'WITHSCORES')
  local stopped = false
  for i = 1, #entries, 2 do
    local member, member_score = entries[i], entries[i + 1]
    if highest and tonumber(member_score) >= highest then
      done, stopped = true, true
      break
    end
    examined, rank = examined + 1, rank + 1
    result[4], result[5] = member_score, member
    local stored = redis.call('HGET', events, member)
    if stayed(member, stored) then
      result[#result + 1] = member
      result[#result + 1] = member_score
      result[#result + 1] = stored
      result[#result + 1] = (stored and in_ready(member, stored)) and 1 or 0
      found = found + 1
      if found == wanted then
        stopped = true
        break
      end
    end
  end
  if not stopped and #entries < 2 * count then
    done = true
  end
end
if done then
  result[3] = 1
end
return result
