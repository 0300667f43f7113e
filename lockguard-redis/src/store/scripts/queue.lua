-- The wait queue of a lock or a semaphore, shared by the scripts that take
-- and give back its lock or permits (this file is prepended to them).
--
-- queue:   a sorted set of waiter tokens scored by arrival (server time in
--          µs, strictly increasing), so the first member is served first.
-- tickets: a hash, waiter token -> 'deadline_ms attempt timeout_ms channel':
--          until when the waiter's place is kept without a refresh (each
--          attempt of a live waiter refreshes it), the number of the
--          attempt that set it, the waiter's timeout, and the channel its
--          client listens on. A semaphore also keeps '=fence' here for each
--          holder of a permit.
--
-- A grant to a waiter is published on its channel as 'token fence attempt':
-- the lock is reserved for it until its deadline, which that attempt set
-- (or the promotion below, later), so the waiter knows from its own request
-- how long the grant is certainly its own, and confirms it with its lease
-- in the background.
--
-- A waiter whose deadline passed is dropped when it reaches the head: a
-- dead waiter costs the queue at most its timeout, never a lease.
--
-- Far from the head, a lock's waiter is kept longer (see q.join): its
-- timeout times the number of waiters ahead of it, up to MAX_SPREAD times,
-- so its refreshes, a third of that apart, do not grow with the queue.
-- The NEAR waiters at the head are kept for their timeout alone: when one
-- enters them (a waiter left the head), q.promote brings its deadline in
-- to its timeout from now and publishes its token alone on its channel,
-- so it refreshes at its timeout's pace again. A dead waiter thus reaches
-- the head with at most its timeout left, as near the head it always had.
--
-- The functions are made by queue_lib() only on the paths that need them:
-- an uncontended lock and release pay for one closure, not for all of them.
local NEAR = 2
local MAX_SPREAD = 64

local function queue_lib()
  local q = {}

  -- The server's time in µs, read once per script and only if needed
  -- (sequence.lua).
  q.now_us = server_time

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

  -- A ticket's fields: deadline (ms), attempt, timeout (ms), channel; nil
  -- when unreadable. A ticket an older client wrote has no timeout: its
  -- place is then kept, and a lock handed to it reserved, until its
  -- deadline, as that client expects.
  local function read(ticket)
    if not ticket then
      return nil
    end
    local deadline, attempt, timeout, channel = string.match(ticket, '^(%d+) (%d+) (%d+) (.*)$')
    if deadline then
      return tonumber(deadline), attempt, tonumber(timeout), channel
    end
    deadline, attempt, channel = string.match(ticket, '^(%d+) (%d+) (.*)$')
    if not deadline then
      return nil
    end
    deadline = tonumber(deadline)
    return deadline, attempt, math.max(deadline - q.now_ms(), 0), channel
  end

  local function write(tickets, token, deadline, attempt, timeout, channel)
    redis.call('HSET', tickets, token,
      string.format('%d %s %d %s', deadline, attempt, timeout, channel))
  end

  -- The first waiter whose place is still kept, after dropping those ahead
  -- of it whose deadline passed: token, deadline (ms), attempt, channel,
  -- timeout (ms); nil when none.
  function q.head(queue, tickets)
    while true do
      local first = redis.call('ZRANGE', queue, 0, 0)[1]
      if not first then
        return nil
      end
      local deadline, attempt, timeout, channel = read(redis.call('HGET', tickets, first))
      if deadline and deadline > q.now_ms() then
        return first, deadline, attempt, channel, timeout
      end
      q.leave(queue, tickets, first)
    end
  end

  -- Takes a place at the tail (or keeps the one held) and refreshes its
  -- deadline: its timeout from now, or with `spread` (a lock's waiter) and
  -- NEAR or more waiters ahead, that many times its timeout, up to
  -- MAX_SPREAD times. Returns how long the place is kept (ms).
  function q.join(queue, tickets, token, timeout_ms, attempt, channel, spread)
    if not redis.call('ZSCORE', queue, token) then
      local score = q.now_us()
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
      if last and tonumber(last) >= score then
        score = tonumber(last) + 1
      end
      redis.call('ZADD', queue, string.format('%d', score), token)
    end
    local kept = timeout_ms
    if spread then
      local ahead = redis.call('ZRANK', queue, token)
      if ahead >= NEAR then
        kept = timeout_ms * math.min(ahead, MAX_SPREAD)
      end
    end
    write(tickets, token, q.now_ms() + kept, attempt, timeout_ms, channel)
    -- A queue nobody refreshes vanishes.
    q.keep(queue, 2 * kept)
    q.keep(tickets, 2 * kept)
    return kept
  end

  -- Brings the NEAR waiters at the head to their own timeout: each kept
  -- longer (it was far back) gets its timeout from now, and its token
  -- alone on its channel, to refresh at that pace again.
  function q.promote(queue, tickets)
    local near = redis.call('ZRANGE', queue, 0, NEAR - 1)
    if #near == 0 then
      return
    end
    local found = redis.call('HMGET', tickets, unpack(near))
    for i, token in ipairs(near) do
      local deadline, attempt, timeout, channel = read(found[i])
      if deadline and deadline > q.now_ms() + timeout then
        write(tickets, token, q.now_ms() + timeout, attempt, timeout, channel)
        redis.call('PUBLISH', channel, token)
      end
    end
  end

  -- How long a lock or permit handed to a waiter is kept for it to claim:
  -- until its place would have lapsed, and at most its timeout, so a dead
  -- waiter delays the queue by at most its timeout; never less than 50 ms,
  -- time for a live one to answer.
  function q.reservation(deadline, timeout)
    local ms = math.min(deadline - q.now_ms(), timeout)
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
    local first, deadline, attempt, channel, timeout = q.head(queue, tickets)
    if not first then
      return false
    end
    redis.call('SET', lock, first, 'PX', q.reservation(deadline, timeout))
    local f = seq_next(seq)
    q.leave(queue, tickets, first)
    q.notify(first, f, attempt, channel)
    q.promote(queue, tickets)
    return true
  end

  -- The semaphore holders whose lease has not ended (permits handed to a
  -- waiter and not yet claimed included).
  function q.semaphore_live(holders)
    return redis.call('ZCOUNT', holders, '(' .. string.format('%d', q.now_ms()), '+inf')
  end

  -- Drops the semaphore holders whose lease ended, with their fence records.
  -- Only the paths that refuse, hand out or keep the set run it: a holder's
  -- lease that ended no longer counts (q.semaphore_live), and the set's
  -- expiry, or the next of these paths, takes it away.
  function q.semaphore_expire(holders, tickets)
    local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', q.now_ms())
    if #expired > 0 then
      for _, t in ipairs(expired) do
        redis.call('HDEL', tickets, t)
      end
      redis.call('ZREMRANGEBYSCORE', holders, '-inf', q.now_ms())
    end
  end

  -- A permit's score: the end of its lease (ms), and half a ms more when
  -- it has a fence record (it was handed to a waiter), so that its release
  -- and renewals know without reading the record.
  function q.lease_end(ends_ms, recorded)
    return string.format(recorded and '%d.5' or '%d', ends_ms)
  end

  -- Whether a permit's score (a string, as ZSCORE answers) marks a record.
  function q.recorded(score)
    return tonumber(score) % 1 ~= 0
  end

  -- Gives a permit to token for ms, with a new fence (returned). A waiter
  -- handed it (`handed`) leaves the queue and gets a fence record, which
  -- its attempt reads when it claims the permit (its notification lost).
  -- Without one, a claim draws a fence of its own, greater than this one.
  -- The holders set is kept for twice ms: at once when no lease but this
  -- one's is running (`alone`: no other holder depends on the set's
  -- expiry), else when it would end sooner than ms, which is also when
  -- ended leases are dropped (about once a lease).
  function q.semaphore_give(holders, seq, queue, tickets, token, ms, handed, alone)
    local f = seq_next(seq)
    redis.call('ZADD', holders, q.lease_end(q.now_ms() + ms, handed), token)
    if alone then
      redis.call('PEXPIRE', holders, 2 * ms)
    elseif redis.call('PTTL', holders) < ms then
      q.semaphore_expire(holders, tickets)
      redis.call('PEXPIRE', holders, 2 * ms)
    end
    if handed then
      q.leave(queue, tickets, token)
      redis.call('HSET', tickets, token, '=' .. string.format('%.0f', f))
      q.keep(tickets, ms)
    end
    return f
  end

  -- Hands up to `free` permits to the first live waiters, each notified
  -- alone, stopping before `me` (a waiter asking for itself). Returns the
  -- permits left.
  function q.semaphore_hand_out(holders, seq, queue, tickets, free, me)
    while free > 0 do
      local first, deadline, attempt, channel, timeout = q.head(queue, tickets)
      if not first or first == me then
        break
      end
      local f = q.semaphore_give(holders, seq, queue, tickets, first, q.reservation(deadline, timeout), true, false)
      q.notify(first, f, attempt, channel)
      free = free - 1
    end
    return free
  end

  return q
end
