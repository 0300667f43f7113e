
-- Give a lock up: hand it to the first live waiter in the same step (the
-- lock is never free in between, and only that waiter is notified), or
-- delete it when nobody waits. A waiter that gives up calls this too: it
-- leaves the queue, and passes the lock on if it had just been handed to it.
-- KEYS[1] lock, KEYS[2] the sequence fencing tokens come from (sequence.lua), KEYS[3] queue, KEYS[4] tickets
-- ARGV[1] token
-- Returns 1 when the lock was ours, 0 otherwise.
--
-- lock_release_fast.lua comes first: it deleted our lock when nobody
-- queued, and leaves the keys, the token and whether the lock was ours
-- (`ours`).
if not ours then
  local queued = redis.call('ZREM', queue, token)
  redis.call('HDEL', tickets, token)
  if queued == 1 then
    -- It may have been near the head: whoever is now keeps pace.
    queue_lib().promote(queue, tickets)
  end
  return 0
end
-- A holder is never queued: its place went when the lock became its.
-- The queue exists (lock_release_fast.lua).
if queue_lib().lock_hand_first(lock, seq, queue, tickets) then
  return 1
end
redis.call('DEL', lock)
return 1
