-- Unlocks this session's lock $1, held by token $2, and ends its lease in
-- the key's row: one plain statement, run on the hold's session. Answers
-- whether the session held the lock. The row is written before the unlock
-- (the count waits for it), so that the next holder, granted the lock at
-- the unlock, waits for this statement's commit to read the row.
WITH g AS MATERIALIZED (
  SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
    FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x
), u AS (
  UPDATE __SCHEMA__.lock_fences f SET expires_at = NULL
    FROM g
   WHERE f.hi = g.hi AND f.lo = g.lo AND f.token = $2::text AND f.expires_at IS NOT NULL
  RETURNING 1
)
SELECT pg_advisory_unlock(g.hi, g.lo) AS held
  FROM g,
       (SELECT count(*) AS n,
               -- The session named and timed as an idle one again.
               set_config('application_name', 'lockguard', false)
               || set_config('idle_session_timeout', '0', false) AS reset
          FROM u) c
