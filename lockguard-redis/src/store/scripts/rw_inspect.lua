-- Reads a read-write lock without changing it.
-- KEYS[1] readers, KEYS[2] writer, KEYS[3] the sequence fencing tokens
-- come from, KEYS[4] queue
-- Returns {live readers, 1 when a writer holds it (else 0), ms left of the
-- soonest-ending lease or -1, queued waiters, the sequence's value as a
-- string ('0' when never drawn)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = '(' .. string.format('%d', now)
local readers = redis.call('ZCOUNT', KEYS[1], live, '+inf')
local writer, left = 0, redis.call('PTTL', KEYS[2])
if left >= 0 then
  writer = 1
else
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  left = first[2] and (tonumber(first[2]) - now) or -1
end
return {readers, writer, left, redis.call('ZCARD', KEYS[4]), redis.call('GET', KEYS[3]) or '0'}
