-- Remove a fenced value unless a newer fencing token has written already,
-- keeping the token (a tombstone) so that older tokens stay refused.
-- KEYS[1] resource hash
-- ARGV[1] fencing token
-- Returns 1 when removed (or the token recorded), 0 when the token is stale.
--
-- Tokens are compared exactly, as in fenced_write.lua.
local function newer(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end
local newest = redis.call('HGET', KEYS[1], 'fence')
if newest and newer(newest, ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
redis.call('HDEL', KEYS[1], 'value')
return 1
