-- Sliding window log: a sorted set of admitted requests (score = time in us,
-- member = id:cost) and the running sum of their costs.
-- KEYS[1] log, KEYS[2] sum
-- ARGV[1] limit, ARGV[2] window (us), ARGV[3] cost, ARGV[4] unique member id,
-- ARGV[5] the time in us ('' = the server's TIME; set by tests only),
-- ARGV[6] '1' to peek: the decision the request would get, nothing stored
-- (expired entries are skipped, not removed)
-- Returns {allowed, used, reset_us, retry_us}.
if redis.replicate_commands then redis.replicate_commands() end
local now
if ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local window_ms = math.ceil(window / 1000)
if ARGV[5] ~= '' then
  -- Test time runs apart from the server's clock; expired entries are
  -- dropped by time below, so a longer TTL costs memory only.
  window_ms = window_ms + 600000
end
local function cost_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end
-- An entry counts while now < t + window.
local cutoff = now - window
local peek = ARGV[6] == '1'
local sum = tonumber(redis.call('GET', KEYS[2]) or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
-- Where the live entries start in the log: after the expired ones, which
-- a peek leaves in place.
local first_live = 0
if #expired > 0 then
  for _, m in ipairs(expired) do
    sum = sum - cost_of(m)
  end
  if sum < 0 then
    sum = 0
  end
  if peek then
    first_live = #expired
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
    redis.call('SET', KEYS[2], sum, 'KEEPTTL')
  end
end
if sum + cost > limit then
  -- Refused: reads only what the answer needs, never the whole log. The
  -- retry is when the oldest entries holding `need` of the cost expire
  -- (read from the oldest, a page at a time, until they add up); never, for
  -- a cost above the whole limit (a window's wait). The reset is when the
  -- newest entry expires.
  local need = sum + cost - limit
  local retry, reset = window, 0
  if need <= sum then
    -- Every entry costs at least 1: `need` entries always suffice.
    local freed, offset, size = 0, first_live, math.min(need, 64)
    while freed < need do
      local page = redis.call('ZRANGE', KEYS[1], offset, offset + size - 1, 'WITHSCORES')
      if #page == 0 then
        break
      end
      for i = 1, #page, 2 do
        freed = freed + cost_of(page[i])
        if freed >= need then
          retry = tonumber(page[i + 1]) + window - now
          break
        end
      end
      offset = offset + size
    end
  end
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if newest[2] then
    reset = tonumber(newest[2]) + window - now
  end
  return {0, sum, reset, retry}
end
if peek then
  return {1, sum + cost, window, 0}
end
redis.call('ZADD', KEYS[1], now, ARGV[4] .. ':' .. cost)
sum = sum + cost
redis.call('SET', KEYS[2], sum, 'PX', window_ms)
redis.call('PEXPIRE', KEYS[1], window_ms)
return {1, sum, window, 0}
