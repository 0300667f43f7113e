-- Waits in the server's queue of lock $1 for token $2 until the server
-- grants it, and takes it for a lease of $3 ms: one plain statement, run
-- on a session of the client's locks (read committed; see schema.sql's
-- lock_session). Answers the fencing token; NULL when the advisory lock
-- was granted but no fencing token was drawn (the key's first hold here,
-- or another holder's lease runs unreleased in the key's row): the client
-- then calls lock_wait_out on the same session, which holds the lock.
-- Also answers the µs the statement waited before the grant (the client
-- counts the lease from its send plus these: it may read the answer
-- long after the grant).
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
__DRAW__
SELECT (SELECT CASE WHEN u.named IS NOT NULL THEN u.fence END FROM u) AS fence,
       (extract(epoch FROM g.t - statement_timestamp()) * 1000000)::bigint AS waited_us
  FROM g
