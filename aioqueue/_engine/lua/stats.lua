-- Counts one event type's queue (one partition) for `aioqueue stats`; writes nothing.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] dead_letters
-- ARGV[1] HSCAN cursor over events ('0' starts a count)   ARGV[2] HSCAN COUNT hint
-- The counts are taken at one instant of the server clock. Counting in-flight events means
-- reading envelopes, so the caller walks the events hash in chunks (cursor) instead of
-- blocking the server for a large queue.
-- An event is *dispatched* while its stored envelope has `due_at` (dispatch.lua sets it;
-- enqueue, fail and requeue leave none) and its schedule entry is not due yet (a due one lost
-- its worker and waits to be dispatched again, so it counts as due).
-- Ready are the dispatched events whose current delivery waits in the ready list; stale
-- copies there (of events cancelled, replaced or re-dispatched since) are not counted.
-- Returns {server now ms, next cursor, dispatched events in this chunk, pending, due now,
--   ready, dead letters, earliest due score among due events or -1,
--   due_at of the oldest ready event or -1}.
-- The values after the third are only counted when ARGV[1] is '0' (else they are 0 / -1).
local now = server_time_ms()

local function dispatched(id, raw)
  local ok, envelope = pcall(cjson.decode, raw)
  if not ok or type(envelope) ~= 'table' or type(envelope.due_at) ~= 'number' then
    return false
  end
  local score = redis.call('ZSCORE', KEYS[1], id)
  return score ~= false and tonumber(score) > now
end

-- Whether a ready list entry is the delivery of the stored envelope (as claim.lua decides).
local function is_current(id, stored, raw)
  return stored and delivery_of(id, stored) == raw
end

local scan = redis.call('HSCAN', KEYS[2], ARGV[1], 'COUNT', ARGV[2])
local in_chunk = 0
local entries = scan[2]
for i = 1, #entries, 2 do
  if dispatched(entries[i], entries[i + 1]) then
    in_chunk = in_chunk + 1
  end
end

local pending, due_now, ready_current, dead = 0, 0, 0, 0
local earliest_due, ready_head_due = -1, -1
if ARGV[1] == '0' then
  pending = redis.call('HLEN', KEYS[2])
  due_now = redis.call('ZCOUNT', KEYS[1], '-inf', now)
  dead = redis.call('HLEN', KEYS[4])
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now then
    earliest_due = tonumber(first[2])
  end
  -- The ready list is bounded (two dispatch batches, plus stale copies), so reading it
  -- whole is cheap.
  local ready = redis.call('LRANGE', KEYS[3], 0, -1)
  for _, raw in ipairs(ready) do
    local ok, envelope = pcall(cjson.decode, raw)
    if ok and type(envelope) == 'table' and type(envelope.id) == 'string' then
      local stored = redis.call('HGET', KEYS[2], envelope.id)
      if is_current(envelope.id, stored, raw) and dispatched(envelope.id, stored) then
        ready_current = ready_current + 1
        if ready_head_due < 0 and type(envelope.due_at) == 'number' then
          ready_head_due = envelope.due_at
        end
      end
    end
  end
end
return {now, scan[1], in_chunk, pending, due_now, ready_current, dead, earliest_due,
  ready_head_due}
