-- The acquire's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, rw_lib.lua, then rw_acquire.lua follow this
-- file; see lock_acquire_fast.lua for why): a first attempt at a lock
-- nobody queues for takes a hold that fits beside the holders here, as
-- rw.give does (a first attempt has no place in the queue to leave), its
-- fence drawn as seq_next draws one with no floor, through seq_after
-- (sequence_draw.lua, the one file before this one). Every other case goes
-- on below: a hold already ours, one that does not fit; the ended readers
-- may have been dropped here, as the script below drops them first too.
-- KEYS and ARGV: see rw_acquire.lua.
if redis.replicate_commands then redis.replicate_commands() end
if not (ARGV[4] and ARGV[6] ~= '1') and redis.call('EXISTS', KEYS[3]) == 0 then
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now_us / 1000)
  local token, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
  local ours
  if mode == 'w' then
    ours = redis.call('GET', KEYS[5]) == token
  else
    local ends = redis.call('ZSCORE', KEYS[1], token)
    ours = ends and tonumber(ends) > now_ms
  end
  if not ours then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
    if redis.call('EXISTS', KEYS[5]) == 0 and (mode == 'r' or redis.call('ZCARD', KEYS[1]) == 0) then
      if mode == 'r' then
        redis.call('ZADD', KEYS[1], now_ms + lease, token)
        if redis.call('PTTL', KEYS[1]) < lease then
          redis.call('PEXPIRE', KEYS[1], lease)
        end
      else
        redis.call('SET', KEYS[5], token, 'PX', lease)
      end
      return seq_after(KEYS[2], now_us)
    end
  end
end
