-- Store a value unless a newer fencing token has written already.
-- KEYS[1] resource hash
-- ARGV[1] fencing token, ARGV[2] value
-- Returns 1 when stored, 0 when the token is stale.
local newest = tonumber(redis.call('HGET', KEYS[1], 'fence'))
if newest and newest > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
