-- Raise a sequence (sequence.lua) to at least a value: Redlock keeps the
-- sequence of every node that answers at the highest token handed out.
-- KEYS[1] sequence
-- ARGV[1] value
-- Returns the counter after the call.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
