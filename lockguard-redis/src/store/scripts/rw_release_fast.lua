-- The release's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, rw_lib.lua, then rw_release.lua follow this
-- file; see lock_acquire_fast.lua for why): with nobody queued, a hold is
-- given up here, exactly as the script below gives it up when there is
-- nobody to hand the lock to.
-- KEYS and ARGV: see rw_release.lua.
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('EXISTS', KEYS[3]) == 0 then
  local token = ARGV[1]
  redis.call('HDEL', KEYS[4], token)
  redis.call('SREM', KEYS[6], token)
  if ARGV[2] == 'w' then
    if redis.call('GET', KEYS[5]) == token then
      redis.call('DEL', KEYS[5])
      return 1
    end
    return 0
  end
  local ends = redis.call('ZSCORE', KEYS[1], token)
  if ends then
    redis.call('ZREM', KEYS[1], token)
    local t = redis.call('TIME')
    if tonumber(ends) > math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) then
      return 1
    end
  end
  return 0
end
