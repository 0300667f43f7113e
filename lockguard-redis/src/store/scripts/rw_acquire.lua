
-- Take a read or a write hold of a read-write lock, or wait for one in the
-- key's queue (see rw_lib.lua and queue.lua).
-- KEYS[1] readers, KEYS[2] the sequence fencing tokens come from
-- (sequence.lua), KEYS[3] queue, KEYS[4] tickets, KEYS[5] writer,
-- KEYS[6] reads
-- ARGV[1] token, ARGV[2] lease (ms), ARGV[3] 'r' or 'w', and for a waiter
-- (without them the script never queues): ARGV[4] its timeout (ms),
-- ARGV[5] the channel it is notified on, ARGV[6] the number of this attempt
-- Returns the fence when the hold is ours, {0, ms until the holders'
-- leases end, or -1} when not.
--
-- A hold is taken when it fits beside the holders (readers with readers,
-- a writer alone) and nobody queues ahead; a hold handed to us by a
-- release whose notification we missed is claimed with our lease and a
-- token of our own (greater than the one published).
if redis.replicate_commands then redis.replicate_commands() end
local readers, seq, queue, tickets, writer, reads = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rw = rw_lib(readers, writer, reads, seq, queue, tickets)
local q = rw.q
if mode == 'w' then
  if redis.call('GET', writer) == token then
    redis.call('PEXPIRE', writer, lease)
    return seq_next(seq)
  end
else
  local ends = redis.call('ZSCORE', readers, token)
  if ends and tonumber(ends) > q.now_ms() then
    redis.call('ZADD', readers, q.now_ms() + lease, token)
    q.keep(readers, lease)
    return seq_next(seq)
  end
end
rw.expire()
rw.admit(token)
local first = q.head(queue, tickets)
if (not first or first == token) and rw.fits(mode) then
  return rw.give(mode, token, lease)
end
if ARGV[4] then
  local kept = q.join(queue, tickets, token, tonumber(ARGV[4]), ARGV[6], ARGV[5])
  if mode == 'r' then
    redis.call('SADD', reads, token)
  end
  q.keep(reads, 2 * kept)
end
return {0, rw.busy_for()}
