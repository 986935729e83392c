-- Deletes events whose handlers succeeded.
-- KEYS[1] schedule   KEYS[2] events
-- ARGV: pairs of (id, version)
-- An event is deleted only if it is still the delivered version: a replace that happened
-- while the handler ran keeps the new version scheduled.
-- Returns the number of events deleted.
local deleted = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    local ok, envelope = pcall(cjson.decode, raw)
    if ok and type(envelope) == 'table' and tostring(envelope.version) == ARGV[i + 1] then
      redis.call('HDEL', KEYS[2], id)
      redis.call('ZREM', KEYS[1], id)
      deleted = deleted + 1
    end
  end
end
return deleted
