
-- Take every lock of a multi-lock at once, or none (one lock:
-- lock_acquire.lua). The caller passes keys of one cluster slot, or any
-- keys of one server.
-- KEYS: four per lock, in the order asked: lock, the sequence fencing
-- tokens come from, queue, tickets
-- ARGV[1] lease (ms), ARGV[1 + i] lock i's token
-- Returns {1, fence1, fence2, ...} when every lock is ours; {0, i, pttl}
-- when lock i is held or has live waiters, and nothing was taken. As one
-- attempt does, a free lock with live waiters goes to the first of them:
-- nobody takes a free lock while live waiters queue ahead.
local n = #KEYS / 4
for i = 1, n do
  local lock, seq, queue, tickets = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  if redis.call('EXISTS', lock) == 1 then
    return {0, i, redis.call('PTTL', lock)}
  end
  if redis.call('EXISTS', queue) == 1 and queue_lib().lock_hand_first(lock, seq, queue, tickets) then
    return {0, i, redis.call('PTTL', lock)}
  end
end
local fences = {1}
for i = 1, n do
  redis.call('SET', KEYS[4 * i - 3], ARGV[1 + i], 'PX', ARGV[1])
  fences[i + 1] = seq_next(KEYS[4 * i - 2])
end
return fences
