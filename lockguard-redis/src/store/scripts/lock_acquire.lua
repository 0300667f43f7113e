
-- Take a lock, or wait for it in the key's queue (see queue.lua).
-- KEYS[1] lock, KEYS[2] the sequence fencing tokens come from, KEYS[3] queue, KEYS[4] tickets
-- ARGV[1] token, ARGV[2] lease (ms), and for a waiter (without them the
-- script never queues): ARGV[3] its timeout (ms), ARGV[4] the channel it is
-- notified on, ARGV[5] the number of this attempt
-- Returns the fence (a plain integer, the cheapest reply to read) when the
-- lock is ours, {0, pttl} when not, and
-- {0, pttl, kept} when the waiter is queued: its place is kept for kept ms
-- without a refresh (longer than its timeout far from the head; queue.lua).
--
-- A waiter calls this again when its refresh is due: a lock a release
-- handed to it meanwhile (its notification lost) is then claimed with its
-- own lease. Nobody takes a free lock while live waiters queue ahead: it
-- goes to the first.
--
-- lock_acquire_fast.lua comes first: it took a free lock nobody queued for,
-- and leaves the keys, the token and whether the lock was taken (`taken`).
if taken then
  local q = queue_lib()
  local first = q.head(queue, tickets)
  if not first or first == token then
    q.leave(queue, tickets, token)
    q.promote(queue, tickets)
    return seq_next(seq)
  end
  -- Waiters are ahead of us: the free lock goes to the first of them.
  q.lock_hand_first(lock, seq, queue, tickets)
elseif redis.call('GET', lock) == token then
  -- Handed to us by a release whose notification we missed: claim it with
  -- our lease and a token of our own (greater than the one published).
  redis.call('PEXPIRE', lock, ARGV[2])
  return seq_next(seq)
end
if ARGV[3] then
  local kept = queue_lib().join(queue, tickets, token, tonumber(ARGV[3]), ARGV[5], ARGV[4], true)
  return {0, redis.call('PTTL', lock), kept}
end
return {0, redis.call('PTTL', lock)}
