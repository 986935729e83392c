-- Shared helpers, after _prelude.lua and _serial_keys.lua: the lease protocol, from the
-- attempt dispatch counts to the acknowledgement that ends it (see PRELUDE_PARTS in
-- functions.py). aioqueue/_delivery/leases.py is the services' side.
--
-- Leases. dispatch.lua counts an attempt (`attempt` + 1, `due_at`) when it pushes a delivery
-- to the ready list, but the attempt is spent only once claim.lua hands the delivery to a
-- worker. An event whose attempt is under way (its envelope carries `due_at`) is scheduled
-- at the end of its lease, and the lease's score tells the two apart: a pushed delivery no
-- worker claimed yet ends its lease half a millisecond before a whole millisecond, a claimed
-- one on a whole millisecond. So the claim marks nothing beyond the score it writes anyway,
-- and costs nothing more on the hot path. Until the claim, the count is provisional: a
-- delivery that waits in the ready list past its lease is left there, its count untouched
-- (dispatch.lua), and pause.lua and hand_back.lua take the count back for deliveries no
-- handler began. A claimed attempt's lease is renewed by its live worker (renew.lua); when it
-- lapses the worker is gone, and the next dispatch counts the attempt as spent.
local UNCLAIMED = 0.5

-- The score of a delivery's lease before a worker claims it: half a millisecond early rather
-- than late, so that a lease of 0 is over at once, as a claimed one's is.
local function unclaimed_lease_end(now, lease)
  return now + lease - UNCLAIMED
end

-- Whether the schedule score of an event whose attempt is under way is an unclaimed
-- delivery's lease (see unclaimed_lease_end).
local function is_unclaimed(score)
  return score % 1 == UNCLAIMED
end

-- The stored text of an envelope's first attempt, as dispatch.lua counts it: under serial
-- key value `serial`, due at `score`, numbered `move` on the move clock (nil without
-- counts). The fields the attempt adds are written after the stored text `raw` instead of
-- encoding the whole envelope again, which nearly every dispatched event (a first attempt)
-- would pay for. The text means what cjson.encode of the updated envelope would: JSON
-- objects are unordered, and numbers are written as cjson writes them (see number_json).
-- nil when the envelope already carries a field the attempt writes (a retry, a parked or a
-- lapsed attempt) or its serial key value changes: those are encoded whole. So is one whose
-- text holds `"id":` anywhere, read from the text because dispatch has cleared `envelope.id`
-- by then: an id the stored text carries must not stay in it (the delivery puts the id in
-- front), and a context key named `id` merely takes the slower way.
local function first_attempt_text(raw, envelope, serial, score, move)
  if envelope.attempt ~= nil or envelope.due_at ~= nil or envelope.moved ~= nil
      or envelope.pushed ~= nil or envelope.parked ~= nil or envelope.serial ~= serial
      or string.byte(raw, -1) ~= 125  -- 125 is '}'
      or string.find(raw, '"id":', 1, true) then
    return nil
  end
  local text = string.sub(raw, 1, -2) .. ',"attempt":1,"due_at":' .. number_json(score)
  if move then
    move = number_json(move)  -- formatted once for both fields
    return text .. ',"moved":' .. move .. ',"pushed":' .. move .. '}'
  end
  return text .. '}'
end

-- Whether event `id` (decoded `envelope`, nil when none) is the claimed attempt `attempt`
-- of version `version` (both as text), under way: what renew.lua and hand_back.lua act on.
local function holds_claimed(schedule, id, envelope, version, attempt)
  if not envelope or envelope.due_at == nil or tostring(version_of(envelope)) ~= version
      or tostring(envelope.attempt) ~= attempt then
    return false
  end
  local score = tonumber(redis.call('ZSCORE', schedule, id))
  return score ~= nil and not is_unclaimed(score)
end

-- The error an attempt whose lease lapsed leaves behind: its handler began, and its worker
-- stopped renewing the lease before settling it.
local function lapsed_error(attempt)
  return 'attempt ' .. attempt .. ' was lost: its worker stopped renewing the lease (it died, '
    .. 'or lost its connection to Redis) before the handler finished'
end

-- The hand-back of the lease protocol (after take_moves, which it uses): puts attempt `id`
-- (decoded `envelope`), taken out of the schedule, back into it due at `due`. Unless `spent`,
-- its count goes back to what it was before the claim (no handler began it); either way it
-- is no longer under way nor in the ready list, and its move takes a number of the move
-- clock. pause.lua and hand_back.lua give back through here; the caller counts what it gave
-- back out of `under_way` (count_under_way).
local function give_back(schedule, events, counts, id, envelope, due, spent)
  if not spent then
    local count = (tonumber(envelope.attempt) or 1) - 1
    envelope.attempt = count > 0 and count or nil  -- 0 is left out (see write_event)
  end
  envelope.due_at = nil
  envelope.pushed = nil
  envelope.moved = take_moves(counts, 1) or envelope.moved
  redis.call('HSET', events, id, cjson.encode(envelope))
  redis.call('ZADD', schedule, due, id)
end

-- Sorts ready-list entries `raws` by what claim.lua makes of them, reading their events with
-- one HMGET: the current deliveries (byte for byte the stored envelope with its id in front,
-- see delivery_of), as parallel lists of ids, deliveries and stored envelopes, in list
-- order; and the entries that are no delivery at all. Stale copies (of events cancelled,
-- replaced or re-dispatched since) are in neither.
local function current_deliveries(events, raws)
  local ids, readable, in_front, unreadable = {}, {}, {}, {}
  local read = 0  -- the three parallel lists' length (see call_chunked in _prelude.lua)
  for _, raw in ipairs(raws) do
    local id, id_in_front = delivery_id(raw)
    if id then
      read = read + 1
      ids[read], readable[read], in_front[read] = id, raw, id_in_front
    else
      unreadable[#unreadable + 1] = raw
    end
  end
  local stored = hmget_all(events, ids)
  local current_ids, deliveries, envelopes, seen = {}, {}, {}, {}
  local current = 0
  for i, raw in ipairs(readable) do
    -- A second copy of one delivery (which dispatch.lua never pushes while the first waits)
    -- is taken as stale: only one may reach a handler.
    if stored[i] and not seen[ids[i]]
        and is_delivery_of(raw, ids[i], stored[i], in_front[i]) then
      seen[ids[i]] = true
      current = current + 1
      current_ids[current], deliveries[current], envelopes[current] = ids[i], raw, stored[i]
    end
  end
  return current_ids, deliveries, envelopes, unreadable
end

-- The first `"name":` in cjson's text `raw` (`key` is that text): nil when there is none,
-- else whether it follows `{` or `,` (as every key cjson writes does) and where its value
-- begins. A plain search: an unanchored pattern is tried at every position of the text, and
-- on an envelope with an eight-field payload cost acknowledging four microseconds an event.
-- Inside a string every quote is escaped, so outside one `"name":` can only be a key.
local function find_key(raw, key)
  local first, last = string.find(raw, key, 1, true)
  if not first then
    return nil
  end
  local before = string.byte(raw, first - 1)
  return before == 123 or before == 44, last + 1  -- 123 is '{', 44 is ','
end

-- The whole number (text) that the first `"name":` (`key`) of cjson's text `raw` names, if
-- that is a key (see find_key) and a plain whole number follows; else nil.
local function whole_number_after(raw, key)
  local is_key, value_at = find_key(raw, key)
  return is_key and string.match(raw, '^(%d+)[,}]', value_at) or nil
end

-- Whether an attempt of stored envelope `raw` (cjson's text) is under way: whether it carries
-- `due_at`. Read from the text when the first `"due_at":` is missing or is a key with a
-- number after it (a context's value is a string, so that is the envelope's own); anything
-- else (a context's key first, a value written by hand) is decoded.
local function under_way_in(raw)
  local is_key, value_at = find_key(raw, '"due_at":')
  if is_key == nil then
    return false
  elseif is_key and string.find(raw, '^[%-%d]', value_at) then
    return true
  end
  local envelope = decoded_object(raw)
  return envelope ~= nil and envelope.due_at ~= nil
end

-- Claim receipts. A claim's reply can be lost after its script ran: the connection is cut
-- on the way back, or the reply times out. redis-py then sends the call again, and a consumer
-- whose call failed sends it again itself; a second claim would take other deliveries, while
-- the ones the first took waited out their lease with no handler begun and then counted as
-- spent. So every claim of a consumer leaves a receipt under the consumer's own key (one key
-- each, overwritten by its next claim): the call's token, the server time it ran at, the
-- lease end it wrote and the ids it took, if any. A call that brings the receipt's token
-- again takes nothing new: it hands out again those of the receipt's deliveries that are
-- still its own, and the consumer holds them as if the first reply had come late.
-- A consumer's tokens grow, one per claim, and it sends a claim only once the one before
-- returned or was given up. So a call whose token is below the receipt's is a copy that the
-- server read late, from a connection its consumer had given up on: it takes nothing, since
-- no one would receive what it took.
-- The receipt outlives the lease by a margin: a delivery whose lease ended is still the
-- claim's until a dispatch takes it back, and its receipt is worth having until then.
local RECEIPT_MARGIN_MS = 60000

-- Leaves the receipt of a claim that took `ids` at server time `now` with lease `lease`:
-- the token, then `|` and the JSON array [now, lease end, ids]. The token comes first, as
-- text, so that a claim of its own (nearly every one) tells it is no repeat from the
-- receipt's first bytes, without decoding the rest.
local function write_claim_receipt(receipt, token, now, lease, ids)
  redis.call('SET', receipt, token .. '|' .. cjson.encode({now, now + lease, ids}),
             'PX', lease + RECEIPT_MARGIN_MS)
end

-- The reply of a call with claim token `token` that is not a claim of its own (else nil):
-- for the receipt's own token, the receipt's deliveries that are still under way with the
-- lease the claim wrote (an event since settled, cancelled or replaced, or whose lease
-- lapsed and which dispatch took back, is left out), with the claim's server time, so that
-- the consumer reckons the lease from when it began; for an older token, nothing. It
-- writes nothing. GET, not GETRANGE of the token: the documented ACL rules allow GET, and
-- copying a receipt (about 20 bytes an id) costs a claim far less than its events do.
local function repeated_claim(schedule, events, receipt, token, now)
  local text = redis.call('GET', receipt)
  local recorded = text and string.match(text, '^(%d+)|')
  local mine = tonumber(token)
  if not recorded or not mine or mine > tonumber(recorded) then
    return nil
  elseif mine < tonumber(recorded) then
    return {now, 0}
  end
  local record = decoded_object(string.sub(text, #recorded + 2))
  if not record then
    return nil
  end
  local claimed_at, lease_end, ids = record[1], record[2], record[3]
  local result = {claimed_at, 0}
  local stored = hmget_all(events, ids)
  for i, id in ipairs(ids) do
    if stored[i] and under_way_in(stored[i])
        and tonumber(redis.call('ZSCORE', schedule, id)) == lease_end then
      result[#result + 1] = delivery_of(id, stored[i])
    end
  end
  return result
end

-- What acknowledging needs of stored envelope `raw` (false when missing): whether it is
-- version `version` at attempt `attempt` (texts), whether an attempt of it is under way
-- (`due_at`), and the serial key value it holds. Read from the text where that is
-- unambiguous, as it is for nearly every envelope: decoding each one cost acknowledging more
-- than its commands did. The first key named `v`, `attempt` or `due_at` (find_key) is the
-- envelope's own unless the context has one of that name, and a context holds only strings,
-- so a number after it is the envelope's. Anything else (a serial key anywhere, a context's
-- key first, another version or attempt, a text cjson did not write) is decoded, as before.
local function settled_view(raw, version, attempt)
  if not raw then
    return false
  end
  if not string.find(raw, '"serial":', 1, true) then
    -- The text of a first attempt (first_attempt_text) holds `"attempt":<n>,"due_at":`, and
    -- with it and the version's own bytes found anywhere it is the delivered attempt, under
    -- way: only a key can hold an unescaped `"name":`, and only the envelope's own keys have
    -- numbers after them. Two plain searches take half the time of reading each field's
    -- number (0.74 against 1.44 microseconds an event, docs/benchmarks.md).
    local _, version_end = string.find(raw, '"v":' .. version, 1, true)
    local after_version = version_end and string.byte(raw, version_end + 1)
    if (after_version == 44 or after_version == 125)  -- ',' or '}': all of the number
        and string.find(raw, '"attempt":' .. attempt .. ',"due_at":', 1, true) then
      return true, true, nil
    end
    if whole_number_after(raw, '"v":') == version
        and whole_number_after(raw, '"attempt":') == attempt then
      return true, under_way_in(raw), nil
    end
  end
  local envelope = decoded_object(raw)
  if envelope and tostring(version_of(envelope)) == version
      and tostring(envelope.attempt) == attempt then
    return true, envelope.due_at ~= nil, envelope.serial
  end
  return false
end

-- Deletes events whose handlers succeeded, each only if it is still the delivered attempt
-- (version and attempt), as renewals and hand-backs hold only it (holds_claimed): a replace
-- that happened while the handler ran keeps the new version scheduled, and a success
-- acknowledged only after its lease lapsed and another worker took the event again (a
-- failover held the acknowledgement back) leaves that attempt running, and its serial key
-- held: deleting the event would free the key for the next event of its value beside it.
-- That attempt settles the event itself. Deleting an attempt twice is harmless, so callers
-- may retry. `delivered` holds id, version, attempt, id, version, attempt... (versions and
-- attempts as strings). Returns how many events it deleted.
-- With `serial` (see serial_keys), each deleted event that held a serial key frees it; with
-- `counts`, the deleted attempts leave `under_way` and count as `finished`.
local function acknowledge_deliveries(schedule, events, delivered, serial, counts)
  local ids, versions, attempts = {}, {}, {}
  for i = 1, #delivered, 3 do
    local n = (i + 2) / 3  -- filled by index (see call_chunked in _prelude.lua)
    ids[n], versions[n], attempts[n] = delivered[i], delivered[i + 1], delivered[i + 2]
  end
  if #ids == 0 then
    return 0
  end
  local stored = hmget_all(events, ids)
  local finished, keyed, ended, finished_count = {}, {}, 0, 0
  for i, raw in ipairs(stored) do
    local delivered, under_way, serial_value = settled_view(raw, versions[i], attempts[i])
    if delivered then
      finished_count = finished_count + 1
      finished[finished_count] = ids[i]
      if under_way then
        ended = ended + 1
      end
      if serial_value ~= nil then
        keyed[#keyed + 1] = {ids[i], serial_value}
      end
    end
  end
  if finished_count == 0 then
    return 0
  end
  call_chunked('ZREM', schedule, finished)
  local deleted = call_chunked('HDEL', events, finished)
  count_under_way(counts, -ended)
  if counts and deleted > 0 then
    redis.call('HINCRBY', counts, 'finished', deleted)
  end
  local unparked = 0
  for _, pair in ipairs(keyed) do
    unparked = unparked + settle_serial(serial, schedule, events, pair[2], pair[1])
  end
  if unparked > 0 then
    wake_dispatchers(serial.wake)
  end
  return deleted
end
