-- One try at lock $1 for token $3 (an idle timeout of $2 ms to set, or
-- NULL), never waiting, for a client of session leases
-- (LockLeases::Session): the hold lives with this session, and nothing
-- records it, not even the session's name (a name set per take costs the
-- server a quarter of this statement; others name the holder by its
-- session, see lock_survey). One flat statement, every part a branch of
-- one CASE (a nested subquery costs the executor a node of its own to
-- start at every run; a CASE runs only the branch it takes, in order),
-- with the key's kept row (kept_locks, at_least: a lock kept past its
-- release, by another token) read once, beside it (the executor opens
-- every table a statement names at every run, branch taken or not), from
-- this statement's snapshot, taken just before the try (a keep commits
-- before its keeper's session can free the lock).
-- Answers n: the fencing token when taken; NULL when the advisory lock is
-- this session's but the lock is kept: the client then calls
-- lock_take_session, which finishes or undoes the take; when another
-- session holds the advisory lock, -1 - the ms left of the key's kept
-- time when it is kept, else 0 (a holder's lease is its client's alone:
-- nothing here says how long it has).
SELECT CASE WHEN pg_try_advisory_lock(
                   -- The advisory lock: lock_id's halves of the key's hash.
                   (hashtextextended('__SCHEMA__:' || $1::text, 8) >> 32)::integer,
                   ((hashtextextended('__SCHEMA__:' || $1::text, 8) << 32) >> 32)::integer)
            THEN CASE WHEN k.until IS NOT NULL THEN NULL
                      -- The session's idle timeout, when asked: set_config
                      -- never answers NULL, so this branch is never taken.
                      WHEN __IDLE__ IS NULL THEN NULL
                      WHEN nextval('__SCHEMA__.lock_fence_seq')
                           > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
                      THEN currval('__SCHEMA__.lock_fence_seq')
                      ELSE __SCHEMA__.lock_fence_rebase() END
            ELSE -1 - coalesce(ceil(extract(epoch FROM k.until - clock_timestamp()) * 1000)::bigint, -1)
            END AS n
  FROM (SELECT 1) x
  LEFT JOIN __SCHEMA__.kept_locks k
    ON k.key = $1::text AND k.until > clock_timestamp() AND k.token IS DISTINCT FROM $3::text
