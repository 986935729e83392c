-- Deletes dead letters for good.
-- KEYS[1] dead_letters   KEYS[2] dead_letter_times
-- ARGV: ids of dead letters
-- Returns how many dead letters were deleted.
local deleted = 0
for _, id in ipairs(ARGV) do
  deleted = deleted + redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return deleted
