-- Sliding window log: a sorted set of admitted requests (score = time in us,
-- member = id:cost) and the running sum of their costs.
-- KEYS[1] log, KEYS[2] sum
-- ARGV[1] limit, ARGV[2] window (us), ARGV[3] cost, ARGV[4] unique member id,
-- ARGV[5] the time in us ('' = the server's TIME; set by tests only)
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
local sum = tonumber(redis.call('GET', KEYS[2]) or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #expired > 0 then
  for _, m in ipairs(expired) do
    sum = sum - cost_of(m)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
  if sum < 0 then
    sum = 0
  end
  redis.call('SET', KEYS[2], sum, 'KEEPTTL')
end
if sum + cost > limit then
  local need = sum + cost - limit
  local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local freed, retry, reset = 0, window, 0
  for i = 1, #entries, 2 do
    freed = freed + cost_of(entries[i])
    if freed >= need and retry == window then
      retry = tonumber(entries[i + 1]) + window - now
    end
    reset = tonumber(entries[i + 1]) + window - now
  end
  return {0, sum, reset, retry}
end
redis.call('ZADD', KEYS[1], now, ARGV[4] .. ':' .. cost)
sum = sum + cost
redis.call('SET', KEYS[2], sum, 'PX', window_ms)
redis.call('PEXPIRE', KEYS[1], window_ms)
return {1, sum, window, 0}
