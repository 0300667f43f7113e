
-- Give a permit back if it is still ours, and hand the free permits to the
-- first live waiters in the same step (each notified alone). A waiter that
-- gives up calls this too: it leaves the queue, and passes on a permit that
-- had just been handed to it.
-- KEYS[1] holders, KEYS[2] the sequence fencing tokens come from (sequence.lua), KEYS[3] queue, KEYS[4] tickets
-- ARGV[1] token, ARGV[2] permits
-- Returns 1 when the permit was still held, 0 otherwise.
if redis.replicate_commands then redis.replicate_commands() end
local holders, seq, queue, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local q = queue_lib()
local token = ARGV[1]
local ends = redis.call('ZSCORE', holders, token)
if not ends then
  -- A waiter leaving.
  q.leave(queue, tickets, token)
  return 0
end
-- A holder is never queued: its place went when the permit became its.
redis.call('ZREM', holders, token)
-- The fence record of a permit handed to it (marked in its score).
if q.recorded(ends) then
  redis.call('HDEL', tickets, token)
end
if redis.call('EXISTS', queue) == 1 then
  q.semaphore_expire(holders, tickets)
  local free = tonumber(ARGV[2]) - redis.call('ZCARD', holders)
  q.semaphore_hand_out(holders, seq, queue, tickets, free, nil)
end
if tonumber(ends) > q.now_ms() then
  return 1
end
return 0
