-- A read-write lock's holders and its handoffs, shared by the scripts that
-- take and give it back (this file is prepended to them, after queue.lua).
--
-- readers: a sorted set of reader tokens scored by lease end (ms, server
--          time); expired readers are dropped by each script first.
-- writer:  the writer's token, with its lease as the key's expiry.
-- reads:   a set of the queued waiters that are readers (the others in the
--          queue wait to write); stale members of waiters gone are harmless.
-- The queue and tickets are the lock queue's (queue.lua): one FIFO queue
-- for readers and writers, so a reader that arrives while a writer waits
-- queues behind it.

local function rw_lib(readers, writer, reads, seq, queue, tickets)
  local rw = {}
  local q = queue_lib()
  rw.q = q

  -- Drops the readers whose lease ended.
  function rw.expire()
    redis.call('ZREMRANGEBYSCORE', readers, '-inf', q.now_ms())
  end

  -- Whether a hold of `mode` ('r' or 'w') fits beside the holders.
  function rw.fits(mode)
    if redis.call('EXISTS', writer) == 1 then
      return false
    end
    return mode == 'r' or redis.call('ZCARD', readers) == 0
  end

  -- Gives `token` a hold of `mode` for `ms`; leaves the queue.
  function rw.give(mode, token, ms)
    q.leave(queue, tickets, token)
    redis.call('SREM', reads, token)
    if mode == 'r' then
      redis.call('ZADD', readers, q.now_ms() + ms, token)
      q.keep(readers, ms)
    else
      redis.call('SET', writer, token, 'PX', ms)
    end
    return seq_next(seq)
  end

  -- Hands the lock to the head of the queue as far as it fits: the run of
  -- readers there while no writer holds it, or the one writer there when
  -- nobody does, each notified alone; stops before `me` (a waiter asking
  -- for itself).
  function rw.admit(me)
    while true do
      local first, deadline, attempt, channel, timeout = q.head(queue, tickets)
      if not first or first == me then
        return
      end
      local mode = 'w'
      if redis.call('SISMEMBER', reads, first) == 1 then
        mode = 'r'
      end
      if not rw.fits(mode) then
        return
      end
      local f = rw.give(mode, first, q.reservation(deadline, timeout))
      q.notify(first, f, attempt, channel)
      if mode == 'w' then
        return
      end
    end
  end

  -- How long until a hold could fit (ms): the writer's lease, or the last
  -- reader's; -1 when nobody holds it.
  function rw.busy_for()
    local left = redis.call('PTTL', writer)
    if left >= 0 then
      return left
    end
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
    if last then
      return math.max(tonumber(last) - q.now_ms(), 0)
    end
    return -1
  end

  return rw
end
