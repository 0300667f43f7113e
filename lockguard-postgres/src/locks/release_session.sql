-- Unlocks this session's lock $1, for a client of session leases
-- (LockLeases::Session): no row to write, so the next waiter is granted
-- the lock at the unlock with nothing to wait for. Answers whether the
-- session held the lock. ($2, the hold's token, is the release.sql's
-- parameter, unused here.)
SELECT pg_advisory_unlock(y.hi, y.lo) AS held,
       -- The session named and timed as an idle one again.
       set_config('application_name', 'lockguard', false)
       || set_config('idle_session_timeout', '0', false)
       || left($2::text, 0) AS reset
  FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
          FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
