-- Counts one event type's queue (one partition) for `aioqueue stats`; writes nothing.
-- KEYS[1] schedule   KEYS[2] events   KEYS[3] ready   KEYS[4] dead_letters
-- KEYS[5] counts (`under_way`: envelopes with `due_at`, kept by the scripts that set and
--   remove it; `finished`: successes so far; see count_under_way in _prelude.lua)
-- O(1) in the size of the queue: lengths, one ZCOUNT (O(log N)), the counter, and the ready
-- list, which is bounded (two dispatch batches, plus stale copies), so reading it whole is
-- cheap. Counted at one instant of the server clock.
-- Ready are the dispatched events whose current delivery waits in the ready list; stale
-- copies there (of events cancelled, replaced or re-dispatched since) are not counted.
-- Returns {server now ms, pending, due now, ready, dead letters, attempts under way,
--   earliest due score among due events or -1, due_at of the oldest ready event or -1,
--   successes so far}.
local schedule, events, ready = KEYS[1], KEYS[2], KEYS[3]
local dead_letters, counts = KEYS[4], KEYS[5]
local now = server_time_ms()
local pending = redis.call('HLEN', events)
local due_now = redis.call('ZCOUNT', schedule, '-inf', now)
local dead = redis.call('HLEN', dead_letters)
local counted = redis.call('HMGET', counts, 'under_way', 'finished')
local under_way = tonumber(counted[1]) or 0
local finished = tonumber(counted[2]) or 0
local earliest_due, ready_head_due = -1, -1
local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) <= now then
  earliest_due = tonumber(first[2])
end
local _, deliveries = current_deliveries(events, redis.call('LRANGE', ready, 0, -1))
local ready_current = #deliveries
for _, raw in ipairs(deliveries) do
  local envelope = decoded_object(raw)
  if envelope and type(envelope.due_at) == 'number' then
    ready_head_due = envelope.due_at
    break
  end
end
return {now, pending, due_now, ready_current, dead, under_way, earliest_due, ready_head_due,
  finished}
