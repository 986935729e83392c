-- Acknowledges finished events, then takes up to `count` envelopes from a ready list for
-- handler slots that are free right now.
-- KEYS[1] ready   KEYS[2] schedule   KEYS[3] events   KEYS[4] dead_letters
-- KEYS[5] dead_letter_times   KEYS[6] paused (optional: while its field `paused` exists, nothing is taken)
-- KEYS[7] rate, KEYS[8] starts (optional): with a rate limit recorded in `rate`, at most
--   `limit` events are handed out in any `per_ms` window, each hand-out noted in `starts`
-- KEYS[9] serial_holders   KEYS[10] serial_waiting   KEYS[11] wake (optional, together): an
--   acknowledged event that held a serial key frees it (see settle_serial in _serial_keys.lua)
-- KEYS[12] counts (optional, with 9-11): acknowledged attempts leave its `under_way` and
--   add to `finished` (see count_under_way in _prelude.lua)
-- KEYS[13] receipt (optional): the consuming taker's claim receipt, with ARGV[3] (see the
--   claim receipts in _leases.lua): a call that brings the token of the receipt's claim again
--   (its reply was lost) takes nothing new, and hands out again what that claim took
-- ARGV[1] count   ARGV[2] lease ms   ARGV[3] the claim's token ('' without a receipt)
-- ARGV[4] (optional) the deliveries to acknowledge: one JSON array [id, version, attempt,
-- id, version, attempt, ...], versions and attempts as strings. One argument rather than two per event, because a
-- client packs every argument of every call in Python.
-- A consumer hands the slots of events it just finished to the events it takes next, and
-- acknowledging them in the same call keeps it at its parallelism without a round trip of
-- its own (see acknowledge_deliveries in _leases.lua).
-- An envelope is handed out only if it is still byte-for-byte the stored one (plus its id,
-- see delivery_of in _prelude.lua): an event that was cancelled, replaced or re-dispatched
-- since it was pushed is dropped here, so a stale copy never reaches a handler. The claim
-- spends the attempt dispatch counted: it moves the event's lease to a whole `lease` ms from
-- now, which marks it claimed, and which its worker renews while it holds the event (see
-- _leases.lua).
-- Returns {server now ms, envelopes left in the ready list, envelope, envelope, ...}, or
-- {server now ms, -1, envelopes in the ready list} while the type is paused, or
-- {server now ms, -2, envelopes in the ready list, ms when the rate limit lets one more out}.
local ready, schedule, events = KEYS[1], KEYS[2], KEYS[3]
local dead_letters, dead_letter_times, paused = KEYS[4], KEYS[5], KEYS[6]
local rate, starts, counts, receipt = KEYS[7], KEYS[8], KEYS[12], KEYS[13]
local count, lease, token, acknowledged = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = server_time_ms()
if acknowledged then
  -- Again too when this call repeats a claim: acknowledging a version twice is harmless.
  acknowledge_deliveries(schedule, events, cjson.decode(acknowledged), serial_keys(KEYS, 9),
                         counts)
end
if receipt then
  local repeated = repeated_claim(schedule, events, receipt, token, now)
  if repeated then
    repeated[2] = redis.call('LLEN', ready)
    return repeated
  end
end

-- The claim's reply, and the ids it took.
local function take()
  if paused and redis.call('HEXISTS', paused, 'paused') == 1 then
    return {now, -1, redis.call('LLEN', ready)}, {}
  end
  local allowance = rate and rate_room(rate, starts, now)
  if allowance and allowance.room < count then
    count = allowance.room
    if count < 1 then
      return {now, -2, redis.call('LLEN', ready), allowance.next_ms}, {}
    end
  end
  local result = {now, 0}
  if count < 1 then
    result[2] = redis.call('LLEN', ready)
    return result, {}
  end
  local popped = redis.call('LPOP', ready, count)
  if not popped then
    return result, {}
  end
  result[2] = redis.call('LLEN', ready)
  local ids, deliveries, _, unreadable = current_deliveries(events, popped)
  for _, raw in ipairs(unreadable) do
    -- Not ours to interpret, but never dropped silently.
    local id = 'unreadable:' .. redis.sha1hex(raw)
    bury(schedule, events, dead_letters, dead_letter_times, id, {id = id, raw = raw},
      'ready list entry is not a valid envelope', now)
  end
  -- Filled by index, not appended (see call_chunked in _prelude.lua).
  local leases = {}
  local lease_end = score_argument(now + lease)
  for i, raw in ipairs(deliveries) do
    leases[2 * i - 1] = lease_end
    leases[2 * i] = ids[i]
    result[i + 2] = raw
  end
  if #leases > 0 then
    call_chunked('ZADD', schedule, leases, 'XX')
    if allowance then
      -- Each start's member is its id and this mark. Made only under a rate limit: a
      -- concatenation per event that a type without one would throw away.
      local started, started_at, start_mark = {}, score_argument(now), '@' .. now
      for i, id in ipairs(ids) do
        started[2 * i - 1] = started_at
        started[2 * i] = id .. start_mark
      end
      call_chunked('ZADD', starts, started)
    end
  end
  return result, ids
end

local result, taken = take()
if receipt then
  -- Whatever it took, even nothing: a copy of this call that the server runs later must
  -- find it done (see repeated_claim).
  write_claim_receipt(receipt, token, now, lease, taken)
end
return result
