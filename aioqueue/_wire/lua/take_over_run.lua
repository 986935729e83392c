-- A retried attempt of a Spark task takes its task's run record over (see enqueue.lua).
-- KEYS[1] run record (hash: `fence`, and '<attempt>:<call>' -> [[id, ...], '1101...'] for
--   every enqueue call an attempt of the task made)
-- ARGV[1] the attempt's id (Spark's task attempt id: a retry's is larger)
-- Raises the record's fence to this attempt, so that from now on the enqueue calls of every
-- earlier attempt (one killed halfway may still have a pipeline on its way) are refused and
-- write nothing. Then what the record holds is all the task ever wrote, and the attempt can
-- skip those ids and count their results instead of writing them again: an event the failed
-- attempt wrote and a handler finished meanwhile is not created again.
-- Returns the record's call entries, as [field, value, field, value, ...], or an error when
-- a later attempt has taken the record over already.
local record = KEYS[1]
local attempt = tonumber(ARGV[1])
local refused = abandoned_attempt(record, attempt)
if refused then
  return refused
end
redis.call('HSET', record, 'fence', attempt)
redis.call('EXPIRE', record, 86400)
local entries = {}
local all = redis.call('HGETALL', record)
for i = 1, #all, 2 do
  if all[i] ~= 'fence' then
    entries[#entries + 1] = all[i]
    entries[#entries + 1] = all[i + 1]
  end
end
return entries
