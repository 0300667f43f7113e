(
  -- A fencing token drawn at the grant (g.t), put in for `__FENCE__`:
  -- schema.sql's lock_fence_next, written out (a call of a SQL function
  -- with a FROM clause is not inlined).
  SELECT CASE WHEN s.v > s.c THEN s.v ELSE __SCHEMA__.lock_fence_rebase() END
    FROM (SELECT nextval('__SCHEMA__.lock_fence_seq') AS v,
                 (extract(epoch FROM g.t) * 1000000)::bigint AS c) s
)
