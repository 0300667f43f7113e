-- GCRA: the key holds the theoretical arrival time (TAT) in microseconds.
-- KEYS[1] TAT key
-- ARGV[1] emission interval T (us), ARGV[2] tolerance tau = T * burst (us),
-- ARGV[3] cost, ARGV[4] the time in us ('' = the server's TIME; set by tests only),
-- ARGV[5] '1' to peek: the decision the request would get, nothing stored
-- Returns {allowed, used_us, retry_us}: used_us is max(TAT, now) - now after the request.
if redis.replicate_commands then redis.replicate_commands() end
local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local T, tau, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local new_tat = tat + T * cost
local allow_at = new_tat - tau
if now < allow_at then
  return {0, tat - now, allow_at - now}
end
if ARGV[5] == '1' then
  return {1, new_tat - now, 0}
end
local ttl_ms = math.ceil((new_tat - now) / 1000)
if ttl_ms < 1 then
  ttl_ms = 1
end
if ARGV[4] ~= '' then
  -- Test time runs apart from the server's clock: keep the key long enough
  -- that real time never expires it early. An older TAT never changes a
  -- decision (max(TAT, now)), so this costs memory only.
  ttl_ms = ttl_ms + 600000
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', ttl_ms)
return {1, new_tat - now, 0}
