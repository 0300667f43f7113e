-- The sequence that fencing tokens and counter versions are drawn from (one
-- key per cluster slot, shared by every key in it; this file is prepended
-- to the scripts that draw from it).
--
-- Each value drawn is greater than the one before and than the server's
-- clock in µs. So a key's tokens and versions strictly increase across the
-- key's expiry and a step back of the clock (the sequence remembers), and
-- across a restart that lost the data (the clock remembers, unless it also
-- stepped back, or the slot drew faster than one value a µs). Redlock's
-- nodes draw on a clock of whole ms (`coarse`: the ms times 1000), so that
-- nodes whose sequences agree draw the same value within a ms, and need no
-- raising (redlock.rs). Values stay below 2^53, exact as Lua numbers,
-- until the year 2255.
--
-- The server's clock is read once per script (`server_time`): a script runs
-- at one instant, and every later read would cost a command. The draw
-- itself, one command, is `seq_after` (sequence_draw.lua, which comes
-- before this file).

-- The server's time in µs, read at most once per script.
local server_time_us
local function server_time()
  if not server_time_us then
    local t = redis.call('TIME')
    server_time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_time_us
end

-- floor (optional): the value drawn is also greater than it. coarse: the
-- clock in whole ms (Redlock).
local function seq_next(seq, floor, coarse)
  local now = server_time()
  if coarse then
    now = math.floor(now / 1000) * 1000
  end
  if floor and floor > now then
    now = floor
  end
  return seq_after(seq, now)
end
