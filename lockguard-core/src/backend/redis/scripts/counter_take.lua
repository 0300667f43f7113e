-- Subtract n only if at least n is there: stock that never goes below zero.
-- KEYS[1] counter
-- ARGV[1] n, ARGV[2] expiry for a counter without one (ms, 0 = none)
-- Returns {1, new value} when taken, {0, current value} otherwise, values as
-- strings (exact beyond 2^53; the comparison is exact up to 2^53).
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if tonumber(v) < tonumber(ARGV[1]) then
  return {0, v}
end
redis.call('HINCRBY', KEYS[1], 'v', '-' .. ARGV[1])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if ARGV[2] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, redis.call('HGET', KEYS[1], 'v')}
