-- Gives a recurring schedule's name to an event type, or takes it from every type (removal),
-- in the prefix's name directory. A name is unique per prefix: its records of other types
-- must go, and on Redis Cluster they live in other hash tags than the directory, so this
-- script cannot remove them itself. It hands out a fencing token instead (see
-- aioqueue/_recurring/names.py): every change of owner takes the next token, and the caller
-- fences the records of the types it returns with it (schedule_fence.lua) before it writes
-- the new owner's record (schedule_declare.lua). Until schedule_name_settle.lua says those
-- fences are done, the entry keeps the types in `from`, so a caller that dies half-way leaves
-- them to be fenced by the next claim, or by their own keepers.
-- KEYS[1] the directory (hash: name -> JSON {type, token, from}; a removed name keeps
--   {token}, so tokens only grow; a plain type name was written before tokens, token 0)
-- ARGV[1] name   ARGV[2] event type, or '' to remove the name   ARGV[3] the least token the
--   claim may take (optional): a directory that lost its data starts again below the tokens
--   the types' records still hold, and a declaration under a smaller one would be refused
-- Returns {token, type to fence, type to fence, ...}; with no type to fence and no change of
-- owner, nothing is written.
local directory = KEYS[1]
local name, wanted, floor = ARGV[1], ARGV[2], tonumber(ARGV[3]) or 0
local raw = redis.call('HGET', directory, name)
local entry = nil
if raw then
  entry = decoded_object(raw) or {type = raw, token = 0}
end
local token = entry and tonumber(entry.token) or 0
local owner = entry and type(entry.type) == 'string' and entry.type or nil
local stale, seen = {}, {}
local function add_stale(event_type)
  if type(event_type) == 'string' and event_type ~= wanted and not seen[event_type] then
    seen[event_type] = true
    stale[#stale + 1] = event_type
  end
end
if entry and type(entry.from) == 'table' then
  for _, event_type in ipairs(entry.from) do
    add_stale(event_type)
  end
end
add_stale(owner)
if wanted ~= '' and owner == wanted and #stale == 0 and token >= floor then
  return {token}
end
if wanted == '' or owner ~= wanted then
  token = token + 1
end
token = math.max(token, floor)
local fresh = {token = token}
if wanted ~= '' then
  fresh.type = wanted
end
if #stale > 0 then
  fresh.from = stale
end
redis.call('HSET', directory, name, cjson.encode(fresh))
local result = {token}
for _, event_type in ipairs(stale) do
  result[#result + 1] = event_type
end
return result
