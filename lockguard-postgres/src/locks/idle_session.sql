(
  -- The session's idle timeout set to $2 ms, when that is given (NULL:
  -- the session has it already), put in for `__IDLE__` in the try and the
  -- wait of session leases: a paused or cut-off holder's session ends
  -- when its lease and a slack have passed, and the lock with it. Never
  -- NULL.
  CASE WHEN $2::integer IS NOT NULL
       THEN set_config('idle_session_timeout', $2::integer::text, false)
       ELSE '' END
)
