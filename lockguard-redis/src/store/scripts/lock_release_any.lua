-- Release whichever of several locks carries our token (a Redlock semaphore
-- permit is one of N slot locks), and wake the waiters.
-- KEYS[1..N] slot locks
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when a slot was released, 0 when none carried the token.
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    redis.call('PUBLISH', ARGV[2], ARGV[1])
    return 1
  end
end
return 0
