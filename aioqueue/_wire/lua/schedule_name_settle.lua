-- Records that the fences of a claim (schedule_name_claim.lua) are done: the types in the
-- entry's `from` hold no live record of the name any more. Only the claim that still owns the
-- entry (same token) may say so: a later claim carries the types over and settles itself.
-- KEYS[1] the directory   ARGV[1] name   ARGV[2] the claim's token
-- Returns 1 when `from` was cleared, else 0.
local directory = KEYS[1]
local name, token = ARGV[1], ARGV[2]
local raw = redis.call('HGET', directory, name)
local entry = raw and decoded_object(raw)
if not entry or tonumber(entry.token) ~= tonumber(token) or entry.from == nil then
  return 0
end
entry.from = nil
redis.call('HSET', directory, name, cjson.encode(entry))
return 1
