-- Take a lock on one Redlock node, in the order of the key's waiting line.
-- KEYS[1] lock, KEYS[2] the sequence fencing tokens come from (sequence.lua),
-- KEYS[3] line: a sorted set of waiters scored by when they began to wait,
-- KEYS[4] alive: the same waiters scored by when their place lapses (ms)
-- ARGV[1] token, ARGV[2] lease (ms), and for a waiter (without them the
-- script never joins the line): ARGV[3] its id, ARGV[4] when it began to
-- wait (ms, its client's clock), ARGV[5] its timeout (ms)
-- Returns the fence when the lock is ours, {0, pttl} when not (pttl -2:
-- free, but a live waiter is ahead in the line).
--
-- Every node of a Redlock client is sent the same waiter id and score, so
-- every node orders the line the same way and agrees on its head: nobody
-- takes a free lock while a live waiter is ahead of it, and the head gets a
-- quorum as soon as the lock is free. A waiter that stops refreshing its
-- place (each attempt does) lapses after its timeout; one that gave up is
-- kept out (redlock_release.lua).
local lock, seq, line, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, waiter = ARGV[1], ARGV[3]
if waiter or redis.call('EXISTS', alive) == 1 then
  local now = math.floor(server_time() / 1000)
  -- Waiters whose place lapsed (scores 0..now), and the marks of waiters
  -- that left (negative scores, see redlock_release.lua) that ended.
  local lapsed = redis.call('ZRANGEBYSCORE', alive, 0, now)
  if #lapsed > 0 then
    redis.call('ZREM', line, unpack(lapsed))
    redis.call('ZREMRANGEBYSCORE', alive, 0, now)
  end
  redis.call('ZREMRANGEBYSCORE', alive, '(' .. string.format('%d', -now), '(0')
  if waiter then
    local left = redis.call('ZSCORE', alive, waiter)
    if left and tonumber(left) < 0 then
      -- It gave up: this attempt was still in flight. It takes no place.
      waiter = nil
    end
  end
  if waiter then
    local timeout = tonumber(ARGV[5])
    redis.call('ZADD', line, 'NX', ARGV[4], waiter)
    redis.call('ZADD', alive, string.format('%d', now + timeout), waiter)
    -- A line nobody refreshes vanishes (not before the marks of those who
    -- left end).
    for _, key in ipairs({line, alive}) do
      if redis.call('PTTL', key) < 2 * timeout then
        redis.call('PEXPIRE', key, 2 * timeout)
      end
    end
  end
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  if first and first ~= waiter then
    return {0, redis.call('PTTL', lock)}
  end
end
if redis.call('SET', lock, token, 'NX', 'PX', ARGV[2]) then
  if waiter then
    redis.call('ZREM', line, waiter)
    redis.call('ZREM', alive, waiter)
  end
  return seq_next(seq, nil, true)
end
return {0, redis.call('PTTL', lock)}
