-- Deletes dead letters for good.
-- KEYS[1] dead_letters   KEYS[2] dead_letter_times
-- ARGV: ids of dead letters
-- Returns how many dead letters were deleted.
local dead_letters, dead_letter_times = KEYS[1], KEYS[2]
local ids = ARGV
local deleted = 0
for _, id in ipairs(ids) do
  deleted = deleted + redis.call('HDEL', dead_letters, id)
  redis.call('ZREM', dead_letter_times, id)
end
return deleted
