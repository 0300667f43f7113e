-- Store a value unless a newer fencing token has written already.
-- KEYS[1] resource hash
-- ARGV[1] fencing token, ARGV[2] value
-- Returns 1 when stored, 0 when the token is stale.
--
-- Tokens are compared exactly, as decimal strings without leading zeros
-- (longer is larger, then digit by digit): a Lua number would round tokens
-- beyond 2^53 and let an older one pass.
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
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
