-- Reads who holds and who waits for a lock, a semaphore or a read-write
-- lock, changing nothing (an operator's survey).
-- KEYS[1] lock (a semaphore's or a read-write lock's holders), KEYS[2] the
-- sequence fencing tokens come from, KEYS[3] queue, KEYS[4] tickets,
-- KEYS[5] a read-write lock's writer, KEYS[6] its queued readers
-- ARGV[1] 'lock', 'sem' or 'rw'
-- Returns {holders, waiters, the sequence's value as a string ('0' when
-- never drawn)}: holders as a flat list {token, ms left, mode, ...} and
-- waiters as {token, mode, ...} in queue order, live ones only; mode is
-- 'r' or 'w' for a read-write lock, '' otherwise. A key of another type
-- than the kind's is read as empty.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind = ARGV[1]
local function typed(key, want)
  return redis.call('TYPE', key)['ok'] == want
end
local holders = {}
local function held(token, left, mode)
  holders[#holders + 1] = token
  holders[#holders + 1] = string.format('%d', left)
  holders[#holders + 1] = mode
end
if kind == 'lock' then
  if typed(KEYS[1], 'string') then
    local token = redis.call('GET', KEYS[1])
    if token then
      held(token, redis.call('PTTL', KEYS[1]), '')
    end
  end
else
  if typed(KEYS[1], 'zset') then
    local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
    for i = 1, #live, 2 do
      held(live[i], math.floor(tonumber(live[i + 1])) - now, kind == 'rw' and 'r' or '')
    end
  end
  if kind == 'rw' and typed(KEYS[5], 'string') then
    local writer = redis.call('GET', KEYS[5])
    if writer then
      held(writer, redis.call('PTTL', KEYS[5]), 'w')
    end
  end
end
local waiters = {}
if typed(KEYS[3], 'zset') then
  local queued = redis.call('ZRANGE', KEYS[3], 0, -1)
  local tickets = {}
  if #queued > 0 and typed(KEYS[4], 'hash') then
    tickets = redis.call('HMGET', KEYS[4], unpack(queued))
  end
  for i, token in ipairs(queued) do
    local deadline = tickets[i] and tonumber(string.match(tickets[i], '^(%d+) '))
    if deadline and deadline > now then
      local mode = ''
      if kind == 'rw' then
        mode = (typed(KEYS[6], 'set') and redis.call('SISMEMBER', KEYS[6], token) == 1) and 'r' or 'w'
      end
      waiters[#waiters + 1] = token
      waiters[#waiters + 1] = mode
    end
  end
end
return {holders, waiters, redis.call('GET', KEYS[2]) or '0'}
