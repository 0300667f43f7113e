-- Give a lock up on one Redlock node, or leave the key's waiting line (see
-- redlock_acquire.lua): a waiter that gives up calls this with its id.
-- KEYS[1] lock, KEYS[2] line, KEYS[3] alive
-- ARGV[1] token, ARGV[2] channel announcing the release to the waiters
-- Returns 1 when the lock was ours, 0 otherwise.
--
-- A token that does not hold the lock leaves the line and stays out of it
-- for 10 s (far longer than a request stays in flight): an attempt of a
-- waiter that gave up may still reach this node after its leave, and must
-- not put it back at the head for a waiter timeout. The mark is its score
-- in `alive`, negated: minus the time it ends (ms).
local lock, line, alive = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
if redis.call('GET', lock) ~= token then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREM', line, token)
  redis.call('ZADD', alive, string.format('%d', -(now + 10000)), token)
  if redis.call('PTTL', alive) < 10000 then
    redis.call('PEXPIRE', alive, 10000)
  end
  return 0
end
redis.call('DEL', lock)
redis.call('PUBLISH', ARGV[2], token)
return 1
