-- The draw from a slot's sequence (see sequence.lua), on its own so that a
-- script's uncontended path can draw before the sequence's other functions
-- are made (lock_acquire_fast.lua): a function with no upvalues costs the
-- server nothing measurable to make, one with upvalues about 0.05 µs each.
-- This file comes first in every script that draws.

-- The value after `now` (µs, or a floor above it) in the sequence `seq`: a
-- draw is one command, `SET ... GET` writing `now + 1` and answering the
-- value it replaced; when that was not below (the slot drew twice in a µs,
-- or the clock stepped back), the value after it is written instead.
local function seq_after(seq, now)
  local next = now + 1
  local cur = tonumber(redis.call('SET', seq, string.format('%.0f', next), 'GET') or '0')
  if cur >= next then
    next = cur + 1
    redis.call('SET', seq, string.format('%.0f', next))
  end
  return next
end
