-- Take a lock if it is free and hand out the next fencing token.
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- Returns {1, fence} when taken, {0, pttl} when someone holds it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
