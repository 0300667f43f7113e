-- Waits in the server's queue of lock $1 for token $3 until the server
-- grants it (an idle timeout of $2 ms to set, or NULL), for a client of
-- session leases (LockLeases::Session): nothing records the hold or the
-- wait, not even the session's name (others name them by the session, see
-- lock_survey). One flat statement, as try_session.sql. Answers the
-- fencing token, NULL when a holder before kept the lock past its release
-- (kept_locks, at_least: the client then calls lock_wait_out_session on
-- the same session, which holds the lock), and the µs the statement waited
-- before the grant, as wait.sql does.
SELECT CASE WHEN z.fence IS NOT NULL AND __IDLE__ IS NOT NULL THEN z.fence END AS fence,
       (extract(epoch FROM z.t - statement_timestamp()) * 1000000)::bigint AS waited_us
  FROM (
    -- The fencing token, unless a holder before kept the lock: read by
    -- lock_kept_for_ms, a PL/pgSQL function, whose statement takes a
    -- snapshot of its own after the grant (this statement's was taken
    -- before its wait).
    SELECT g.t,
           CASE WHEN __SCHEMA__.lock_kept_for_ms($1::text, $3::text) IS NULL
                THEN __FENCE__ END AS fence
      FROM (
        -- The wait (on lock_id's halves of the key's hash), and then the
        -- time of the hold.
        SELECT pg_advisory_lock((hashtextextended('__SCHEMA__:' || $1::text, 8) >> 32)::integer,
                                ((hashtextextended('__SCHEMA__:' || $1::text, 8) << 32) >> 32)::integer)
                 ::text IS NOT NULL AS ok,
               clock_timestamp() AS t
      ) g
  ) z
