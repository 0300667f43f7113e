-- Mark a member; say whether this is its first mark.
-- KEYS[1] set of marked members
-- ARGV[1] member, ARGV[2] expiry for a set without one (ms, 0 = none)
-- Returns 1 the first time, 0 after.
local first = redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[2] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return first
