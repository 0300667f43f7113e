-- Subtract n only if at least n is there: stock that never goes below zero.
-- KEYS[1] counter, KEYS[2] the sequence versions come from (sequence.lua)
-- ARGV[1] n, ARGV[2] expiry for a counter without one (ms, 0 = none)
-- Returns {1, new value} when taken, {0, current value} otherwise, values as
-- strings. The check is on the sign of the result, exact at any size (a
-- Lua number rounds beyond 2^53, but never across zero).
local taken = redis.call('HINCRBY', KEYS[1], 'v', '-' .. ARGV[1])
if taken < 0 then
  redis.call('HINCRBY', KEYS[1], 'v', ARGV[1])
  if redis.call('HLEN', KEYS[1]) == 1 and tonumber(redis.call('HGET', KEYS[1], 'v')) == 0 then
    -- The check created a counter that did not exist: remove it again.
    redis.call('DEL', KEYS[1])
  end
  return {0, redis.call('HGET', KEYS[1], 'v') or '0'}
end
local floor = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
redis.call('HSET', KEYS[1], 'ver', string.format('%.0f', seq_next(KEYS[2], floor)))
if ARGV[2] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, redis.call('HGET', KEYS[1], 'v')}
