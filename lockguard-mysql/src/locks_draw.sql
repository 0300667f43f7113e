-- The draw of a try or a wait (put in for DRAW in locks.sql), run once this
-- session holds the user lock of v_h (key p_key) for token p_token: unless
-- another holder's lease runs unreleased in the key's row (its session
-- ended unbeknownst to it; v_left is then its µs left, and the caller
-- goes on), draws a fencing token above the key's last and the clock in
-- µs, records a lease of p_lease_ms ms (the caller set its session up
-- before it asked for the lock: locks_session.sql), and answers (1,
-- fence, µs since the procedure began: the client counts the lease from
-- its call's send plus these, as it may read the answer long after),
-- leaving the procedure.
SET v_now = __NOW_US__;
-- A point read by the row's hash (a derived table of the clock joined to
-- it costs the server twice as much). A running lease of another token
-- was not released (a release ends its lease before it unlocks): its
-- holder's session ended, or is ending, while the holder may count on it.
SELECT MAX(f.fence),
       MAX(IF(f.expires_us > v_now AND NOT (f.token <=> p_token),
              f.expires_us - v_now, NULL))
  INTO v_fence, v_left
  FROM __P__lock_fences f WHERE f.h = v_h;
IF v_fence IS NULL THEN
  -- The key's first hold here (or since a restart, which empties the
  -- MEMORY table): a lock kept past its holder's release (at_least) stays
  -- kept, as __P__lock_kept, an InnoDB table, remembers it.
  SELECT MAX(IF(k.until_us > v_now AND NOT (k.token <=> p_token), k.until_us - v_now, NULL))
    INTO v_left
    FROM __P__lock_kept k WHERE k.h = v_h;
  IF v_left IS NULL THEN
    -- And right after a restart nobody takes it until every lease granted
    -- before may have ended (__P__lock_epoch).
    CALL __P__lock_epoch_left(v_left);
  END IF;
END IF;
-- Above the key's last, the clock, and on MariaDB every session lease's
-- token (__P__lock_fence_seq).
SET v_fence = GREATEST(COALESCE(v_fence, 0) + 1, v_now + 1
                       /*M! , NEXTVAL(__P__lock_fence_seq) */);
/*M! IF v_left IS NULL AND v_fence - v_now > 2000000 THEN
  -- The sequence lifted for a lock kept somewhere (see
  -- __P__lock_fence_seq): a session lease's keep, which no lease row of
  -- the key records, is read from its InnoDB row (its keeper's session
  -- may have ended).
  SELECT MAX(IF(k.until_us > v_now AND NOT (k.token <=> p_token), k.until_us - v_now, NULL))
    INTO v_left
    FROM __P__lock_kept k WHERE k.h = v_h;
END IF; */
IF v_left IS NULL THEN
  INSERT INTO __P__lock_fences (h, k, fence, token, conn, at_us, expires_us)
  VALUES (v_h, p_key, v_fence, p_token, CONNECTION_ID(), v_now,
          v_now + LEAST(p_lease_ms, 315360000000) * 1000)
  ON DUPLICATE KEY UPDATE k = VALUES(k), fence = VALUES(fence), token = VALUES(token),
    conn = VALUES(conn), at_us = VALUES(at_us), expires_us = VALUES(expires_us);
  SELECT 1, v_fence, GREATEST(v_now - v_start, 0);
  LEAVE proc;
END IF;
