-- Reads a lock or a semaphore without changing it.
-- KEYS[1] lock (or the semaphore's holders), KEYS[2] the sequence fencing
-- tokens come from, KEYS[3] queue
-- ARGV[1] 'lock' or 'semaphore'
-- Returns {holders, ms left of the (soonest-ending) lease or -1, queued
-- waiters, the sequence's value as a string ('0' when never drawn)}.
local holders, left
if ARGV[1] == 'lock' then
  left = redis.call('PTTL', KEYS[1])
  if left == -2 then
    holders, left = 0, -1
  else
    holders = 1
  end
else
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local live = '(' .. string.format('%d', now)
  holders = redis.call('ZCOUNT', KEYS[1], live, '+inf')
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  left = first[2] and (tonumber(first[2]) - now) or -1
end
return {holders, left, redis.call('ZCARD', KEYS[3]), redis.call('GET', KEYS[2]) or '0'}
