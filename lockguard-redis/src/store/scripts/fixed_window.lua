-- Fixed window: INCRBY and PEXPIRE in one step; refused requests are not counted.
-- KEYS[1] window counter
-- ARGV[1] limit, ARGV[2] window in milliseconds, ARGV[3] cost, ARGV[4] '1' to
-- peek: the decision the request would get, nothing stored
-- Returns {allowed, used, ttl_ms}.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  -- No window yet (or a counter without expiry, which is not ours): start one.
  if cost > limit then
    return {0, 0, window}
  end
  if ARGV[4] == '1' then
    return {1, cost, window}
  end
  redis.call('SET', KEYS[1], cost, 'PX', window)
  return {1, cost, window}
end
local used = tonumber(redis.call('GET', KEYS[1]))
if used + cost > limit then
  return {0, used, ttl}
end
if ARGV[4] == '1' then
  return {1, used + cost, ttl}
end
return {1, redis.call('INCRBY', KEYS[1], cost), ttl}
