-- Deletes events whose handlers succeeded (see acknowledge_deliveries in _prelude.lua).
-- KEYS[1] schedule   KEYS[2] events
-- ARGV: pairs of (id, version)
-- Returns the number of events deleted.
return acknowledge_deliveries(KEYS[1], KEYS[2], ARGV)
