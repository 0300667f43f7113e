-- One try at lock $1 for token $2 with a lease of $3 ms, never waiting,
-- for a client of session leases (LockLeases::Session): the hold lives
-- with this session, and no row records it. Answers (acquired, n) as
-- try.sql does: (false, ms left of the holder's lease, or NULL) when
-- another session holds the advisory lock; (true, fence) when taken;
-- (true, NULL) when the advisory lock is this session's but a holder
-- before kept the lock past its release (kept_locks, at_least): the
-- client then calls lock_take_session, which finishes or undoes it.
WITH g AS MATERIALIZED (
  -- The advisory lock (lock_id's halves of the key's hash), tried, and
  -- the time of the hold.
  SELECT y.hi, y.lo, pg_try_advisory_lock(y.hi, y.lo) AS ok, clock_timestamp() AS t
    FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
            FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
),
__TAKE__
SELECT g.ok AS acquired,
       CASE WHEN NOT g.ok THEN __SCHEMA__.lock_held_ms(g.hi, g.lo)
            ELSE (SELECT CASE WHEN d.named IS NOT NULL THEN d.fence END FROM d) END AS n
  FROM g
