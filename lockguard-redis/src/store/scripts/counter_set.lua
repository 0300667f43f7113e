-- Set a counter, optionally only if its version is still the expected one.
-- KEYS[1] counter, KEYS[2] the sequence versions come from (sequence.lua)
-- ARGV[1] value, ARGV[2] expected version ('' = any), ARGV[3] expiry for a
-- counter without one (ms, 0 = none)
-- Returns {1, new version} when set, {0, current version} when the version
-- differed. Versions compare as strings, exact at any size.
local current = redis.call('HGET', KEYS[1], 'ver') or '0'
if ARGV[2] ~= '' and current ~= ARGV[2] then
  return {0, tonumber(current)}
end
local ver = seq_next(KEYS[2], tonumber(current))
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'ver', string.format('%.0f', ver))
if ARGV[3] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, ver}
