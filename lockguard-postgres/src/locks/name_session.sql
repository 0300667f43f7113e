(
  -- The session named for the hold of a try_session.sql or a
  -- wait_session.sql that took the lock (z.fence, at z.t), put in for
  -- `__NAME__`: what others read of it (see lock_held_ms), and idle for
  -- no longer than its lease and a slack (a paused or cut-off client's
  -- session ends, and the lock with it), that idle timeout set when the
  -- session's is not already what this lease needs ($4, ms; NULL: it is).
  set_config('application_name',
             format('lg %s %s %s', $2::text, to_hex(z.fence),
                    to_hex((extract(epoch FROM z.t) * 1000)::bigint + $3::bigint)),
             false)
  || CASE WHEN $4::integer IS NOT NULL
          THEN set_config('idle_session_timeout', $4::integer::text, false)
          ELSE '' END
)
