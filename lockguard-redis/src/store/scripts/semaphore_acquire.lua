
-- Take one of N permits, or wait for one in the queue (see queue.lua). The
-- holders sorted set scores each holder's token by its lease's end (ms,
-- server time; half a ms more marks a fence record, see q.lease_end);
-- holders whose lease ended do not count, and are dropped when the
-- semaphore is full.
-- KEYS[1] holders, KEYS[2] the sequence fencing tokens come from (sequence.lua), KEYS[3] queue, KEYS[4] tickets
-- ARGV[1] token, ARGV[2] lease (ms), ARGV[3] permits, and for a waiter
-- (without them the script never queues): ARGV[4] its timeout (ms), ARGV[5]
-- the channel it is notified on, ARGV[6] the number of this attempt
-- Returns the fence when a permit is ours, {0, ms until the first lease
-- ends} when not. Free permits go to queued waiters first, in order.
if redis.replicate_commands then redis.replicate_commands() end
local holders, seq, queue, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local q = queue_lib()
local token, lease = ARGV[1], tonumber(ARGV[2])
-- Only a waiter's later attempt may hold a place in the queue, or a permit
-- handed to it (or taken by an earlier attempt whose answer was lost): a
-- token is drawn per wait, and its first attempt is number 1.
local returning = ARGV[4] and ARGV[6] ~= '1'
if returning then
  local ends = redis.call('ZSCORE', holders, token)
  if ends and tonumber(ends) > q.now_ms() then
    -- Ours: claim it with our own lease, and the fence it was handed with
    -- (or one of our own, greater, when it has no record).
    local record = redis.call('HGET', tickets, token)
    redis.call('ZADD', holders, q.lease_end(q.now_ms() + lease, record), token)
    q.keep(holders, lease)
    if record then
      q.keep(tickets, lease)
      return tonumber(string.sub(record, 2))
    end
    return seq_next(seq)
  end
end
local permits = tonumber(ARGV[3])
local live = q.semaphore_live(holders)
local free = q.semaphore_hand_out(holders, seq, queue, tickets, permits - live, token)
if free > 0 then
  local alone = live == 0 and free == permits
  return q.semaphore_give(holders, seq, queue, tickets, token, lease, returning, alone)
end
q.semaphore_expire(holders, tickets)
if ARGV[4] then
  q.join(queue, tickets, token, tonumber(ARGV[4]), ARGV[6], ARGV[5])
end
local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - q.now_ms()}
