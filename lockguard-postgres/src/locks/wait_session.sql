-- Waits in the server's queue of lock $1 for token $2 until the server
-- grants it, and takes it for a lease of $3 ms, for a client of session
-- leases (LockLeases::Session): no row records the hold. Answers the
-- fencing token, NULL when a holder before kept the lock past its release
-- (kept_locks, at_least: the client then calls lock_wait_out_session on
-- the same session, which holds the lock), and the µs the statement
-- waited before the grant, as wait.sql does.
WITH n AS MATERIALIZED (
  -- The advisory lock (lock_id's halves of the key's hash); the session
  -- named for the wait (what others read of it, see lock_sessions).
  SELECT y.hi, y.lo, set_config('application_name', 'lg ' || $2::text, false) AS named
    FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
            FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
), g AS MATERIALIZED (
  -- The wait, and then the time of the hold.
  SELECT n.hi, n.lo, pg_advisory_lock(n.hi, n.lo)::text IS NOT NULL AS ok,
         clock_timestamp() AS t
    FROM n
),
__TAKE__
SELECT (SELECT CASE WHEN d.named IS NOT NULL THEN d.fence END FROM d) AS fence,
       (extract(epoch FROM g.t - statement_timestamp()) * 1000000)::bigint AS waited_us
  FROM g
