-- Set a counter, optionally only if its version is still the expected one.
-- KEYS[1] counter
-- ARGV[1] value, ARGV[2] expected version ('' = any), ARGV[3] expiry for a
-- counter without one (ms, 0 = none)
-- Returns {1, new version} when set, {0, current version} when the version differed.
local ver = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
if ARGV[2] ~= '' and ver ~= tonumber(ARGV[2]) then
  return {0, ver}
end
redis.call('HSET', KEYS[1], 'v', ARGV[1])
ver = redis.call('HINCRBY', KEYS[1], 'ver', 1)
if ARGV[3] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, ver}
