-- The sequence that fencing tokens and counter versions are drawn from (one
-- key per cluster slot, shared by every key in it; this file is prepended
-- to the scripts that draw from it).
--
-- Each value drawn is greater than the one before and than the server's
-- clock, in ms times 1000. So a key's tokens and versions strictly increase
-- across the key's expiry and a step back of the clock (the sequence
-- remembers), and across a restart that lost the data (the clock remembers,
-- unless it also stepped back, or the slot drew more than 1000 values a ms).
-- The clock counts whole ms so that Redlock nodes whose sequences agree
-- draw the same value within a ms, and need no raising (redlock.rs).
-- Values stay below 2^53, exact as Lua numbers, until the year 2255.
-- floor (optional): the value drawn is also greater than it.
local function seq_next(seq, floor)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000
  if floor and floor > now then
    now = floor
  end
  local cur = tonumber(redis.call('GET', seq) or '0')
  if cur < now then
    redis.call('SET', seq, string.format('%.0f', now + 1))
    return now + 1
  end
  return redis.call('INCR', seq)
end

