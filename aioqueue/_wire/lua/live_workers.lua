-- Lists the live workers of a prefix (see aioqueue/_wire/workers.py), forgetting those whose
-- record expired (they died without leaving: a clean stop leaves at once).
-- KEYS[1] index (zset: worker id -> when its record expires, ms)
-- Returns {server now ms, id, id, ...}: the ids whose records have not expired.
local index = KEYS[1]
local now = server_time_ms()
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local live = redis.call('ZRANGE', index, 0, -1)
table.insert(live, 1, now)
return live
