-- Set a counter, optionally only if its version is still the expected one.
-- KEYS[1] counter
-- ARGV[1] value, ARGV[2] expected version ('' = any), ARGV[3] expiry for a
-- counter without one (ms, 0 = none)
-- Returns {1, new version} when set, {0, current version} when the version differed.
if redis.replicate_commands then redis.replicate_commands() end
local exists = redis.call('EXISTS', KEYS[1]) == 1
local ver = 0
if exists then
  ver = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
end
if ARGV[2] ~= '' and ver ~= tonumber(ARGV[2]) then
  return {0, ver}
end
if not exists then
  -- A new counter's version starts at the server's time in microseconds,
  -- so a counter that expired and came back never repeats a version.
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'ver', t[1] .. string.format('%06d', tonumber(t[2])))
end
redis.call('HSET', KEYS[1], 'v', ARGV[1])
ver = redis.call('HINCRBY', KEYS[1], 'ver', 1)
if ARGV[3] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, ver}
