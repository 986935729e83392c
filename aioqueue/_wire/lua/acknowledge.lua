-- Deletes events whose handlers succeeded (see acknowledge_deliveries in _leases.lua).
-- KEYS[1] schedule   KEYS[2] events
-- KEYS[3] serial_holders   KEYS[4] serial_waiting   KEYS[5] wake (optional, together): a
--   deleted event that held a serial key frees it for the next parked event of its value
-- KEYS[6] counts (optional, with 3-5): acknowledged attempts leave its `under_way` and add
--   to `finished` (see count_under_way in _prelude.lua)
-- ARGV: triples of (id, version, attempt), as the delivery gave them
-- Returns the number of events deleted.
local schedule, events, counts = KEYS[1], KEYS[2], KEYS[6]
local delivered = ARGV
return acknowledge_deliveries(schedule, events, delivered, serial_keys(KEYS, 3), counts)
