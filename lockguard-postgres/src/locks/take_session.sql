-- The take of a try_session.sql or a wait_session.sql, put in for
-- `__TAKE__` after their CTE `g` (the advisory lock's halves hi and lo,
-- whether this session now holds it, ok, and the time of the hold, t).
d AS MATERIALIZED (
  -- Unless a holder before kept the lock past its release (at_least;
  -- lock_kept_for_ms, a function, reads kept_locks with a snapshot of its
  -- own, taken after the grant): a fencing token, and the session named
  -- for the hold (what others read of it, see lock_held_ms) and idle for
  -- no longer than its lease and a slack (a paused or cut-off client's
  -- session ends, and the lock with it).
  SELECT f.fence,
         set_config('application_name',
                    format('lg %s %s %s', $2::text, to_hex(f.fence),
                           to_hex((extract(epoch FROM g.t) * 1000)::bigint + $3::bigint)),
                    false)
         || set_config('idle_session_timeout',
                       least(greatest($3::bigint, 1)
                             + least(greatest($3::bigint / 4, 50), 5000),
                             2147483647)::text, false) AS named
    FROM g, LATERAL (SELECT __FENCE__ AS fence) f
   WHERE g.ok AND (CASE WHEN g.ok THEN __SCHEMA__.lock_kept_for_ms($1::text, $2::text) END) IS NULL
)
