-- Delete a lock only if it still carries our token, and wake the waiters.
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the lock was no longer ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
