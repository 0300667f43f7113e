-- The release's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, then semaphore_release.lua follow this file;
-- see lock_acquire_fast.lua for why): a permit of ours without a fence
-- record, and nobody queued to hand it to, is given back here; every other
-- case goes on below, with nothing written.
-- KEYS and ARGV: see semaphore_release.lua.
if redis.replicate_commands then redis.replicate_commands() end
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ends and tonumber(ends) % 1 == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  local t = redis.call('TIME')
  if tonumber(ends) > math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) then
    return 1
  end
  return 0
end
