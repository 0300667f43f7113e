-- Add to a counter (a hash of value v and version ver).
-- KEYS[1] counter, KEYS[2] the sequence versions come from (sequence.lua)
-- ARGV[1] delta, ARGV[2] expiry for a counter without one (ms, 0 = none)
-- Returns the new value, as a string: a Lua number would round values
-- beyond 2^53.
local floor = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
redis.call('HINCRBY', KEYS[1], 'v', ARGV[1])
redis.call('HSET', KEYS[1], 'ver', string.format('%.0f', seq_next(KEYS[2], floor)))
if ARGV[2] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('HGET', KEYS[1], 'v')
