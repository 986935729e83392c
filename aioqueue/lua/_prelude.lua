-- Shared helpers. aioqueue/_scripts.py prepends this file to every script, so each script
-- is still one self-contained EVAL that touches only the keys passed in KEYS.

-- Milliseconds on the Redis server's clock: every due time lives on this one clock, so
-- workers with skewed clocks still agree on what is due.
local function server_time_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- What a consumer receives: the stored envelope with the event id put in front. The stored
-- envelope leaves the id out (it is the hash field already: bytes per pending event are what
-- a large backlog costs), and claim.lua rebuilds this exact text to recognise a current copy.
local function delivery_of(id, stored)
  return '{"id":' .. cjson.encode(id) .. ',' .. string.sub(stored, 2)
end

-- Moves one event out of the queue into the dead-letter set, keeping its envelope and
-- the reason. Nothing leaves a queue silently: every removal other than success or
-- cancel goes through here. Dead letters carry their id, so each one reads on its own.
local function bury(schedule, events, dead_letters, dead_letter_times, id, envelope, err, now)
  envelope.id = id
  envelope.error = err
  envelope.died_at = now
  redis.call('ZREM', schedule, id)
  redis.call('HDEL', events, id)
  redis.call('HSET', dead_letters, id, cjson.encode(envelope))
  redis.call('ZADD', dead_letter_times, now, id)
end

-- Deletes an event whose handler succeeded, only if it is still the delivered `version`: a
-- replace that happened while the handler ran keeps the new version scheduled. Deleting a
-- version twice is harmless, so callers may retry. Returns 1 if it deleted the event, else 0.
local function acknowledge_delivery(schedule, events, id, version)
  local raw = redis.call('HGET', events, id)
  if not raw then
    return 0
  end
  local ok, envelope = pcall(cjson.decode, raw)
  if ok and type(envelope) == 'table' and tostring(envelope.version) == version then
    redis.call('HDEL', events, id)
    redis.call('ZREM', schedule, id)
    return 1
  end
  return 0
end
