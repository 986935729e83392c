-- Deletes events whose handlers succeeded (see acknowledge_delivery in _prelude.lua).
-- KEYS[1] schedule   KEYS[2] events
-- ARGV: pairs of (id, version)
-- Returns the number of events deleted.
local deleted = 0
for i = 1, #ARGV, 2 do
  deleted = deleted + acknowledge_delivery(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1])
end
return deleted
