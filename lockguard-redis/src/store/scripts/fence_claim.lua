-- Claim a value of a sequence (sequence.lua) for one holder: set the
-- sequence to the value only if it is below it. Redlock's semaphore permits
-- hold at once, so each needs a token no other permit has: a value is
-- claimed on a node once (drawn there, or set from below by this script),
-- and a token whose value a quorum of nodes gave its holder alone is
-- nobody else's, since any two quorums share a node.
-- KEYS[1] sequence
-- ARGV[1] value
-- Returns {1, value} when claimed, {0, counter} when the sequence was
-- already there or beyond.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, want}
end
return {0, cur}
