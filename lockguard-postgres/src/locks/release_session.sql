-- Unlocks this session's lock $1, for a client of session leases
-- (LockLeases::Session): no row to write, so the next waiter is granted
-- the lock at the unlock with nothing to wait for, and the native unlock is
-- all there is. Answers whether the session held the lock. The session
-- keeps its name (read only while it holds or waits on a lock) and its
-- idle timeout (the next hold of the same lease sets none).
SELECT pg_advisory_unlock(y.hi, y.lo) AS held
  FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
          FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
