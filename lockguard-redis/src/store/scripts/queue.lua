-- The wait queue of a lock or a semaphore, shared by the scripts that take
-- and give back its lock or permits (this file is prepended to them).
--
-- queue:   a sorted set of waiter tokens scored by arrival (server time in
--          µs, strictly increasing), so the first member is served first.
-- tickets: a hash, waiter token -> 'deadline_ms attempt channel': until
--          when the waiter's place is kept without a refresh (each attempt
--          of a live waiter refreshes it), the number of the attempt that
--          set it, and the channel its client listens on. A semaphore also
--          keeps '=fence' here for each holder of a permit.
--
-- A grant to a waiter is published on its channel as 'token fence attempt':
-- the lock is reserved for it until its deadline, which that attempt set,
-- so the waiter knows from its own request how long the grant is certainly
-- its own, and confirms it with its lease in the background.
--
-- A waiter whose deadline passed is dropped when it reaches the head: a
-- dead waiter costs the queue at most its timeout, never a lease.
--
-- The functions are made by queue_lib() only on the paths that need them:
-- an uncontended lock and release pay for one closure, not for all of them.
local function queue_lib()
  local q = {}

  -- The server's time in µs, read once per script and only if needed.
  local now_cached
  function q.now_us()
    if not now_cached then
      local t = redis.call('TIME')
      now_cached = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    return now_cached
  end

  function q.now_ms()
    return math.floor(q.now_us() / 1000)
  end

  -- Sets a key's expiry to at least ms.
  function q.keep(key, ms)
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
  end

  function q.leave(queue, tickets, token)
    redis.call('ZREM', queue, token)
    redis.call('HDEL', tickets, token)
  end

  -- The first waiter whose place is still kept, after dropping those ahead
  -- of it whose deadline passed: token, deadline (ms), attempt, channel;
  -- nil when none.
  function q.head(queue, tickets)
    while true do
      local first = redis.call('ZRANGE', queue, 0, 0)[1]
      if not first then
        return nil
      end
      local ticket = redis.call('HGET', tickets, first)
      if ticket then
        local deadline, attempt, channel = string.match(ticket, '^(%d+) (%d+) (.*)$')
        if deadline and tonumber(deadline) > q.now_ms() then
          return first, tonumber(deadline), attempt, channel
        end
      end
      q.leave(queue, tickets, first)
    end
  end

  -- Takes a place at the tail (or keeps the one held) and refreshes its
  -- deadline.
  function q.join(queue, tickets, token, timeout_ms, attempt, channel)
    if not redis.call('ZSCORE', queue, token) then
      local score = q.now_us()
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
      if last and tonumber(last) >= score then
        score = tonumber(last) + 1
      end
      redis.call('ZADD', queue, string.format('%d', score), token)
    end
    local deadline = q.now_ms() + timeout_ms
    redis.call('HSET', tickets, token, string.format('%d', deadline) .. ' ' .. attempt .. ' ' .. channel)
    -- A queue nobody refreshes vanishes.
    q.keep(queue, 2 * timeout_ms)
    q.keep(tickets, 2 * timeout_ms)
  end

  -- How long a lock or permit handed to a waiter is kept for it to claim:
  -- until its place would have lapsed, so a dead waiter delays the queue by
  -- at most its timeout; never less than 50 ms, time for a live one to
  -- answer.
  function q.reservation(deadline)
    local ms = deadline - q.now_ms()
    if ms < 50 then
      ms = 50
    end
    return ms
  end

  -- Tells a waiter alone that it was granted the lock or a permit.
  function q.notify(waiter, fence, attempt, channel)
    redis.call('PUBLISH', channel, waiter .. ' ' .. string.format('%.0f', fence) .. ' ' .. attempt)
  end

  -- Hands the lock to the first live waiter and notifies it alone; false
  -- when nobody waits.
  function q.lock_hand_first(lock, seq, queue, tickets)
    local first, deadline, attempt, channel = q.head(queue, tickets)
    if not first then
      return false
    end
    redis.call('SET', lock, first, 'PX', q.reservation(deadline))
    local f = seq_next(seq)
    q.leave(queue, tickets, first)
    q.notify(first, f, attempt, channel)
    return true
  end

  -- Drops the semaphore holders whose lease ended, with their fence records.
  function q.semaphore_expire(holders, tickets)
    local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', q.now_ms())
    for _, t in ipairs(expired) do
      redis.call('HDEL', tickets, t)
    end
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', q.now_ms())
  end

  -- Gives a permit to token for ms, with a new fence (returned).
  function q.semaphore_give(holders, seq, queue, tickets, token, ms)
    local f = seq_next(seq)
    q.leave(queue, tickets, token)
    redis.call('ZADD', holders, q.now_ms() + ms, token)
    redis.call('HSET', tickets, token, '=' .. string.format('%.0f', f))
    q.keep(holders, ms)
    q.keep(tickets, ms)
    return f
  end

  -- Hands up to `free` permits to the first live waiters, each notified
  -- alone, stopping before `me` (a waiter asking for itself). Returns the
  -- permits left.
  function q.semaphore_hand_out(holders, seq, queue, tickets, free, me)
    while free > 0 do
      local first, deadline, attempt, channel = q.head(queue, tickets)
      if not first or first == me then
        break
      end
      local f = q.semaphore_give(holders, seq, queue, tickets, first, q.reservation(deadline))
      q.notify(first, f, attempt, channel)
      free = free - 1
    end
    return free
  end

  return q
end
