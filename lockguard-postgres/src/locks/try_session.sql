-- One try at lock $1 for token $2 with a lease of $3 ms (an idle timeout of $4 ms to set, or NULL), never waiting,
-- for a client of session leases (LockLeases::Session): the hold lives
-- with this session, and no row records it. One flat statement (a CTE's
-- materialization costs a cycle a fifth of the server's time). Answers
-- (acquired, n) as try.sql does: (false, ms left of the holder's lease, or
-- NULL) when another session holds the advisory lock; (true, fence) when
-- taken; (true, NULL) when the advisory lock is this session's but a
-- holder before kept the lock past its release (kept_locks, at_least):
-- the client then calls lock_take_session, which finishes or undoes it.
SELECT z.ok AS acquired,
       CASE WHEN NOT z.ok THEN __SCHEMA__.lock_held_ms(z.hi, z.lo)
            -- Taken: the session named for the hold (what others read of
            -- it, see lock_held_ms) and idle for no longer than its lease
            -- and a slack (a paused or cut-off client's session ends, and
            -- the lock with it).
            WHEN z.fence IS NOT NULL
                 AND (set_config('application_name',
                                 format('lg %s %s %s', $2::text, to_hex(z.fence),
                                        to_hex((extract(epoch FROM z.t) * 1000)::bigint + $3::bigint)),
                                 false)
                      -- The idle timeout, when the session's is not already
                      -- what this lease needs ($4, ms; NULL: it is).
                      || CASE WHEN $4::integer IS NOT NULL
                              THEN set_config('idle_session_timeout', $4::integer::text, false)
                              ELSE '' END) IS NOT NULL
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
