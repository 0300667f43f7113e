-- Add to a counter (a hash of value v and version ver).
-- KEYS[1] counter
-- ARGV[1] delta, ARGV[2] expiry for a counter without one (ms, 0 = none)
-- Returns the new value, as a string: a Lua number would round values
-- beyond 2^53.
if redis.replicate_commands then redis.replicate_commands() end
-- A new counter's version starts at the server's time in microseconds, so a
-- counter that expired and came back never repeats a version a reader saw.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'ver', t[1] .. string.format('%06d', tonumber(t[2])))
end
redis.call('HINCRBY', KEYS[1], 'v', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if ARGV[2] ~= '0' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('HGET', KEYS[1], 'v')
