-- Renew a read or write hold's lease if it is still ours.
-- KEYS[1] readers, KEYS[2] writer
-- ARGV[1] token, ARGV[2] lease (ms), ARGV[3] 'r' or 'w'
-- Returns 1 when renewed, 0 when the hold had expired or was not ours.
if redis.replicate_commands then redis.replicate_commands() end
local readers, writer = KEYS[1], KEYS[2]
local token, lease = ARGV[1], tonumber(ARGV[2])
if ARGV[3] == 'w' then
  if redis.call('GET', writer) == token then
    return redis.call('PEXPIRE', writer, lease)
  end
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = redis.call('ZSCORE', readers, token)
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', readers, 'XX', now + lease, token)
if redis.call('PTTL', readers) < lease then
  redis.call('PEXPIRE', readers, lease)
end
return 1
