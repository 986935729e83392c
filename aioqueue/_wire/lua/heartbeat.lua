-- Writes one heartbeat of a live worker (see aioqueue/_wire/workers.py): its record, and in
-- the index of a prefix's workers the time its record expires. A worker that dies stops
-- beating, and both are gone by that time: the hash by its own TTL, the index entry at the
-- next listing (live_workers.lua).
-- KEYS[1] index (zset: worker id -> when its record expires, ms)   KEYS[2] the worker's hash
-- ARGV[1] worker id   ARGV[2] its record (JSON, as the worker describes itself)
-- ARGV[3] how long the record lives without another heartbeat, ms
-- Returns the server time of the heartbeat (ms).
local index, worker = KEYS[1], KEYS[2]
local id, record, lives = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = server_time_ms()
redis.call('HSETNX', worker, 'started_at', now)
redis.call('HSET', worker, 'record', record, 'beat_at', now)
redis.call('PEXPIRE', worker, lives)
redis.call('ZADD', index, now + lives, id)
return now
