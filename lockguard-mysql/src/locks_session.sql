-- A try's or a wait's set-up of its session (put in for BEFORE_LOCK in
-- locks.sql), before it asks for the user lock, so that nothing of it
-- runs between a grant and its answer. Idle for no longer than the lease
-- and a slack once it holds the lock: a paused or cut-off client's
-- session ends, and the lock with it (no session idles while it waits in
-- GET_LOCK; one that does not get the lock is set back).
SET SESSION wait_timeout = LEAST(CEIL((LEAST(p_lease_ms, 315360000000)
  + LEAST(GREATEST(p_lease_ms DIV 4, 50), 5000)) / 1000), 31536000);
