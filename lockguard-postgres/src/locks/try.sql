-- One try at lock $1 for token $2 with a lease of $3 ms, never waiting:
-- one plain statement, run on a session of the client's locks (read
-- committed; see schema.sql's lock_session). Answers (acquired, n):
-- (false, ms left of the holder's lease, or NULL) when another session
-- holds the advisory lock; (true, fence) when taken; (true, NULL) when the
-- advisory lock is this session's but no fencing token was drawn (the
-- key's first hold here, or another holder's lease runs unreleased in the
-- key's row): the client then calls lock_take, which finishes or undoes it.
WITH g AS MATERIALIZED (
  -- The advisory lock (lock_id's halves of the key's hash), tried, and
  -- the time of the hold.
  SELECT y.hi, y.lo, pg_try_advisory_lock(y.hi, y.lo) AS ok, clock_timestamp() AS t
    FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
            FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
),
__DRAW__
SELECT g.ok AS acquired,
       CASE WHEN NOT g.ok THEN __SCHEMA__.lock_held_ms(g.hi, g.lo)
            ELSE (SELECT CASE WHEN u.named IS NOT NULL THEN u.fence END FROM u) END AS n
  FROM g
