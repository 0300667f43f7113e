-- Take one of N permits. The sorted set holds each holder's token scored by
-- its lease's end (ms, server time); expired holders are dropped first.
-- KEYS[1] holders, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] lease (ms), ARGV[3] permits
-- Returns {1, fence} when taken, {0, ms until the first lease ends} when full.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  return {1, redis.call('INCR', KEYS[2])}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
