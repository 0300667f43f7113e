-- Give a permit back if it is still ours, and wake the waiters.
-- KEYS[1] holders
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when the permit was still held, 0 otherwise.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
if tonumber(ends) > now then
  return 1
end
return 0
