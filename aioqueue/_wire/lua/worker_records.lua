-- Reads the records of the live workers live_workers.lua listed; writes nothing.
-- KEYS[1..n] the workers' hashes
-- Returns, per worker, {started_at ms, beat_at ms, record JSON}: false fields for one whose
-- record expired since it was listed.
local records = {}
for n, worker in ipairs(KEYS) do
  records[n] = redis.call('HMGET', worker, 'started_at', 'beat_at', 'record')
end
return records
