-- How many events are due in each of `buckets` consecutive windows (the dashboard's view of
-- the schedule ahead); writes nothing.
-- KEYS[1] schedule
-- ARGV[1] start ms ('' for the server's now)   ARGV[2] bucket width ms   ARGV[3] buckets
-- Returns {start ms, count, count, ...}: bucket i holds scores in [start + i*width,
-- start + (i+1)*width). One ZCOUNT per bucket: O(buckets * log N), whatever the backlog.
local schedule = KEYS[1]
local start = tonumber(ARGV[1]) or server_time_ms()
local width, buckets = tonumber(ARGV[2]), tonumber(ARGV[3])
local result = {start}
for i = 0, buckets - 1 do
  local low = start + i * width
  result[#result + 1] = redis.call('ZCOUNT', schedule, low, '(' .. (low + width))
end
return result
