-- One try at lock $1 for token $2 with a lease of $3 ms (an idle timeout
-- of $4 ms to set, or NULL), never waiting, for a client of session
-- leases (LockLeases::Session): the hold lives with this session, and no
-- row records it. One flat statement (a CTE's materialization costs a
-- cycle a fifth of the server's time). Answers
-- (acquired, n) as try.sql does: (false, ms left of the holder's lease, or
-- NULL) when another session holds the advisory lock; (true, fence) when
-- taken; (true, NULL) when the advisory lock is this session's but a
-- holder before kept the lock past its release (kept_locks, at_least):
-- the client then calls lock_take_session, which finishes or undoes it.
SELECT z.ok AS acquired,
       CASE WHEN NOT z.ok THEN __SCHEMA__.lock_held_ms(z.hi, z.lo)
            -- Taken: the session named for the hold.
            WHEN z.fence IS NOT NULL
                 AND __NAME__ IS NOT NULL
            THEN z.fence END AS n
  FROM (
    -- The fencing token, unless the lock is not this session's or a
    -- holder before kept it.
    SELECT g.hi, g.lo, g.ok, g.t,
           CASE WHEN g.ok AND NOT EXISTS (SELECT 1 FROM __SCHEMA__.kept_locks k
                                           WHERE k.key = $1::text AND k.until > g.t
                                             AND k.token IS DISTINCT FROM $2::text)
                THEN __FENCE__ END AS fence
      FROM (
        -- The advisory lock (lock_id's halves of the key's hash), tried,
        -- and the time of the hold.
        SELECT w.hi, w.lo, pg_try_advisory_lock(w.hi, w.lo) AS ok, clock_timestamp() AS t
          FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
                  FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) w
      ) g
  ) z
