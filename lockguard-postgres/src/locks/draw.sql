-- The draw of a try (try.sql) or a wait (wait.sql), put in for
-- `__DRAW__` after their CTE `g` (the advisory lock's halves hi and lo,
-- whether this session now holds it, ok, and the time of the hold, t).
u AS (
  -- The key's row, unless another holder's lease runs there unreleased
  -- (then written back as it was): the hold's lease and a fencing token
  -- above both the last and the clock. The row's lock waits for a release
  -- of it still committing, whose unlock freed this lock, and the row is
  -- read as that release left it (PostgreSQL re-reads an updated row at
  -- read committed); a condition in the WHERE clause would be read from
  -- this statement's snapshot, which may be older.
  UPDATE __SCHEMA__.lock_fences f
     SET key = CASE WHEN f.expires_at > g.t AND f.token IS DISTINCT FROM $2::text
                    THEN f.key ELSE $1::text END,
         fence = CASE WHEN f.expires_at > g.t AND f.token IS DISTINCT FROM $2::text
                      THEN f.fence
                      ELSE greatest(f.fence + 1, __FENCE__) END,
         at = CASE WHEN f.expires_at > g.t AND f.token IS DISTINCT FROM $2::text
                   THEN f.at ELSE g.t END,
         expires_at = CASE WHEN f.expires_at > g.t AND f.token IS DISTINCT FROM $2::text
                           THEN f.expires_at ELSE g.t + $3::bigint * interval '1 millisecond' END,
         token = CASE WHEN f.expires_at > g.t AND f.token IS DISTINCT FROM $2::text
                      THEN f.token ELSE $2::text END
    FROM g
   WHERE g.ok AND f.hi = g.hi AND f.lo = g.lo
  -- Taken: the session named for the hold (what others read of it, see
  -- lock_held_ms) and idle for no longer than its lease and a slack (a
  -- paused or cut-off client's session ends, and the lock with it).
  RETURNING f.fence,
            CASE WHEN f.token = $2::text AND f.at = g.t
                 THEN set_config('application_name',
                                 format('lg %s %s %s', $2::text, to_hex(f.fence),
                                        to_hex((extract(epoch FROM g.t) * 1000)::bigint + $3::bigint)),
                                 false)
                      || set_config('idle_session_timeout',
                                    least(greatest($3::bigint, 1)
                                          + least(greatest($3::bigint / 4, 50), 5000),
                                          2147483647)::text, false)
            END AS named
)
