-- One try at lock $1 (an idle timeout of $2 ms to set, or NULL), never
-- waiting, for a client of session leases
-- (LockLeases::Session): the hold lives with this session, and nothing
-- records it, not even the session's name (a name set per take costs the
-- server a quarter of this statement; others name the holder by its
-- session, see lock_survey). One flat statement, every part a branch of
-- one CASE (a nested subquery costs the executor a node of its own to
-- start at every run; a CASE runs only the branch it takes, in order),
-- naming no table (the executor opens every table a statement names, and
-- its index, at every run, taken or not): a lock kept past its release
-- (kept_locks, at_least) is found through the sequence, which a keep lifts
-- 3 s past its kept time (lock_fence_keep), where it otherwise runs at
-- most a second ahead of the clock (lock_fence_rebase). Answers n: the
-- fencing token when taken; NULL when the advisory lock is this
-- session's but the token drawn is more than 2 s ahead of the clock (some
-- lock is kept): the client then calls lock_take_session, which reads the
-- key's kept row and finishes or undoes the take; when another session
-- holds the advisory lock, 0, or, while some lock is kept, -1 - the ms
-- left of this key's kept time (a holder's lease is its client's alone:
-- nothing here says how long it has).
SELECT CASE WHEN pg_try_advisory_lock(
                   -- The advisory lock: lock_id's halves of the key's hash.
                   (hashtextextended('__SCHEMA__:' || $1::text, 8) >> 32)::integer,
                   ((hashtextextended('__SCHEMA__:' || $1::text, 8) << 32) >> 32)::integer)
            THEN CASE -- The session's idle timeout, when asked: set_config
                      -- never answers NULL, so this branch is never taken.
                      WHEN __IDLE__ IS NULL THEN NULL
                      WHEN nextval('__SCHEMA__.lock_fence_seq')
                           > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 2000000
                      THEN NULL
                      WHEN currval('__SCHEMA__.lock_fence_seq')
                           > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
                      THEN currval('__SCHEMA__.lock_fence_seq')
                      ELSE __SCHEMA__.lock_fence_rebase() END
            WHEN pg_sequence_last_value('__SCHEMA__.lock_fence_seq'::regclass)
                 > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 2000000
            THEN -1 - coalesce(__SCHEMA__.lock_kept_ms($1::text), -1)
            ELSE 0 END AS n
