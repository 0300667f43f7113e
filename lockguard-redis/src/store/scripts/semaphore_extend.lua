-- Renew a permit's lease if it is still ours.
-- KEYS[1] holders
-- ARGV[1] token, ARGV[2] lease (ms)
-- Returns 1 when renewed, 0 when the permit had expired or was not ours.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
-- Half a ms over a whole one marks a permit with a fence record (see
-- q.lease_end in queue.lua); the renewal keeps the mark.
local mark = tonumber(ends) % 1
redis.call('ZADD', KEYS[1], 'XX', string.format('%.1f', now + lease + mark), ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
