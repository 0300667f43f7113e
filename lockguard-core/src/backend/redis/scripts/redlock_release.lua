-- Give a lock up on one Redlock node, or leave the key's waiting line (see
-- redlock_acquire.lua): a waiter that gives up calls this with its id.
-- KEYS[1] lock, KEYS[2] line, KEYS[3] alive
-- ARGV[1] token, ARGV[2] channel announcing the release to the waiters
-- Returns 1 when the lock was ours, 0 otherwise.
local lock, line, alive = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
if redis.call('GET', lock) ~= token then
  redis.call('ZREM', line, token)
  redis.call('ZREM', alive, token)
  return 0
end
redis.call('DEL', lock)
redis.call('PUBLISH', ARGV[2], token)
return 1
