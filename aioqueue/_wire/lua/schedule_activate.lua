-- Makes a recurring schedule's pending record live: the last step of a declaration that
-- wrote one (schedule_declare.lua), taken once the declaration has read the name directory
-- again and found its claim still standing (see aioqueue/_recurring/names.py).
-- KEYS[1] schedules (hash: name -> record)
-- ARGV[1] name   ARGV[2] the declaration's token
-- Returns {outcome, server now ms, record JSON or false}: 'activated' (the record is live
-- now), 'live' (it was live already: another declaration with the same token made it so),
-- or 'superseded' (no record of that token is here: a fence or a later declaration replaced
-- it, or the slot lost its data; nothing written).
local schedules = KEYS[1]
local name, token = ARGV[1], tonumber(ARGV[2])
local now = server_time_ms()
local raw = redis.call('HGET', schedules, name)
local record = raw and decoded_object(raw) or nil
if not record or record.spec == nil or (tonumber(record.token) or 0) ~= token then
  return {'superseded', now, false}
end
if record.pending == nil then
  return {'live', now, raw}
end
record.pending = nil
raw = cjson.encode(record)
redis.call('HSET', schedules, name, raw)
return {'activated', now, raw}
