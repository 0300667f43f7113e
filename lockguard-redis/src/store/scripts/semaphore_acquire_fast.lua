-- The acquire's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, then semaphore_acquire.lua follow this file;
-- see lock_acquire_fast.lua for why): a first attempt at a semaphore nobody
-- queues for, with a permit free, takes it here as semaphore_give does, its
-- fence drawn as seq_next draws one with no floor, through seq_after
-- (sequence_draw.lua, the one file before this one). When other holders'
-- leases run and the set would expire before this one's lease (its ended
-- leases are then dropped, which takes the shared functions), or in any
-- other case, nothing is written here and the script goes on below.
-- KEYS and ARGV: see semaphore_acquire.lua.
if redis.replicate_commands then redis.replicate_commands() end
if not (ARGV[4] and ARGV[6] ~= '1') and redis.call('EXISTS', KEYS[3]) == 0 then
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now_us / 1000)
  local lease = tonumber(ARGV[2])
  local live = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now_ms), '+inf')
  if live < tonumber(ARGV[3]) and (live == 0 or redis.call('PTTL', KEYS[1]) >= lease) then
    local f = seq_after(KEYS[2], now_us)
    redis.call('ZADD', KEYS[1], string.format('%d', now_ms + lease), ARGV[1])
    if live == 0 then
      redis.call('PEXPIRE', KEYS[1], 2 * lease)
    end
    return f
  end
end
