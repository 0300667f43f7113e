-- Waits in the server's queue of lock $1 for token $2 until the server
-- grants it, and takes it for a lease of $3 ms: one plain statement, run
-- on a session of the client's locks (read committed; see schema.sql's
-- lock_session). Answers the fencing token; NULL when the advisory lock
-- was granted but no fencing token was drawn (the key's first hold here,
-- or another holder's lease runs unreleased in the key's row): the client
-- then calls lock_wait_out on the same session, which holds the lock.
WITH g AS MATERIALIZED (
  -- The advisory lock (lock_id's halves of the key's hash); the session
  -- named for the wait (what others read of it, see lock_sessions).
  SELECT y.hi, y.lo, set_config('application_name', 'lg ' || $2::text, false) AS named
    FROM (SELECT (h >> 32)::integer AS hi, ((h << 32) >> 32)::integer AS lo
            FROM (SELECT hashtextextended('__SCHEMA__:' || $1::text, 8) AS h) x) y
), l AS MATERIALIZED (
  -- The wait, and then the time of the hold.
  SELECT g.hi, g.lo, pg_advisory_lock(g.hi, g.lo)::text AS locked, clock_timestamp() AS t
    FROM g
), u AS (
  -- As in try.sql: the key's row, taken unless another holder's lease
  -- runs there unreleased, read as the release that freed the lock left
  -- it.
  UPDATE __SCHEMA__.lock_fences f
     SET key = CASE WHEN f.expires_at > l.t AND f.token IS DISTINCT FROM $2::text
                    THEN f.key ELSE $1::text END,
         fence = CASE WHEN f.expires_at > l.t AND f.token IS DISTINCT FROM $2::text
                      THEN f.fence
                      ELSE greatest(f.fence, (extract(epoch FROM l.t) * 1000000)::bigint) + 1 END,
         at = CASE WHEN f.expires_at > l.t AND f.token IS DISTINCT FROM $2::text
                   THEN f.at ELSE l.t END,
         expires_at = CASE WHEN f.expires_at > l.t AND f.token IS DISTINCT FROM $2::text
                           THEN f.expires_at ELSE l.t + $3::bigint * interval '1 millisecond' END,
         token = CASE WHEN f.expires_at > l.t AND f.token IS DISTINCT FROM $2::text
                      THEN f.token ELSE $2::text END
    FROM l
   WHERE f.hi = l.hi AND f.lo = l.lo
  RETURNING f.fence,
            CASE WHEN f.token = $2::text AND f.at = l.t
                 THEN set_config('application_name',
                                 format('lg %s %s %s', $2::text, to_hex(f.fence),
                                        to_hex((extract(epoch FROM l.t) * 1000)::bigint + $3::bigint)),
                                 false)
                      || set_config('idle_session_timeout',
                                    least(greatest($3::bigint, 1)
                                          + least(greatest($3::bigint / 4, 50), 5000),
                                          2147483647)::text, false)
            END AS named
)
SELECT (SELECT CASE WHEN u.named IS NOT NULL THEN u.fence END FROM u) AS fence
  FROM l
