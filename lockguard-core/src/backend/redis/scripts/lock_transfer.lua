-- Hand a lock straight to a waiting task of the same client: replace our
-- token with the waiter's, with the waiter's lease and a new fencing token.
-- Nobody else is woken: the lock never becomes free.
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] our token, ARGV[2] the new token, ARGV[3] lease in milliseconds
-- Returns the new fencing token, or 0 when the lock was no longer ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return redis.call('INCR', KEYS[2])
end
return 0
