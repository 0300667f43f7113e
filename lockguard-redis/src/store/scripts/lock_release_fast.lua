-- The release's uncontended path, run before the shared functions are made
-- (sequence.lua, queue.lua, then lock_release.lua follow this file; see
-- lock_acquire_fast.lua for why): our lock, and nobody queued to hand it
-- to, is deleted here; every other case goes on below, with whether the
-- lock was ours in `ours`.
-- KEYS and ARGV: see lock_release.lua.
local lock, seq, queue, tickets = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]
local ours = redis.call('GET', lock) == token
if ours and redis.call('EXISTS', queue) == 0 then
  redis.call('DEL', lock)
  return 1
end
