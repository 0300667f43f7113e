-- The acquire's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, then lock_acquire.lua follow this file): their
-- closures and upvalues cost the server about 0.3 µs a call, as much as a
-- third of this path. A free lock nobody queues for is taken here, its
-- fence drawn as seq_next (sequence.lua) draws one with no floor, through
-- seq_after (sequence_draw.lua, the one file before this one); every
-- other case goes on below, with the lock taken or not in `taken`.
-- KEYS and ARGV: see lock_acquire.lua.
local lock, seq, queue, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]
local taken = redis.call('SET', lock, token, 'NX', 'PX', ARGV[2])
if taken and redis.call('EXISTS', queue) == 0 then
  local t = redis.call('TIME')
  return seq_after(seq, tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
