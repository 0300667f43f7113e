
-- Give a read or write hold up, and hand the lock to the head of the queue
-- as far as it fits in the same step (see rw_lib.lua). A waiter that gives
-- up calls this too: it leaves the queue, and passes on a hold that had
-- just been handed to it.
-- KEYS[1] readers, KEYS[2] the sequence fencing tokens come from
-- (sequence.lua), KEYS[3] queue, KEYS[4] tickets, KEYS[5] writer,
-- KEYS[6] reads
-- ARGV[1] token, ARGV[2] 'r' or 'w'
-- Returns 1 when the hold was still ours, 0 otherwise.
if redis.replicate_commands then redis.replicate_commands() end
local readers, seq, queue, tickets, writer, reads = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, mode = ARGV[1], ARGV[2]
local rw = rw_lib(readers, writer, reads, seq, queue, tickets)
local q = rw.q
q.leave(queue, tickets, token)
redis.call('SREM', reads, token)
local held = 0
if mode == 'w' then
  if redis.call('GET', writer) == token then
    redis.call('DEL', writer)
    held = 1
  end
else
  local ends = redis.call('ZSCORE', readers, token)
  if ends then
    redis.call('ZREM', readers, token)
    if tonumber(ends) > q.now_ms() then
      held = 1
    end
  end
end
if redis.call('EXISTS', queue) == 1 then
  rw.expire()
  rw.admit(nil)
end
return held
