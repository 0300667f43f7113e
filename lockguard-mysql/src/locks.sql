-- Locks (schema versions 9 to 12): the server's own user locks (GET_LOCK), each
-- held by a database session of the client's own (locks.rs). A waiter
-- waits in the server, whose queue grants the lock to its first waiter the
-- moment the holder releases it or its session ends: no bell, no mail.
--
-- A lock's row is keyed by the SHA-1 of the database, the table prefix and
-- the key (filled in for LOCK_H by schema.rs), its user lock named
-- `lockguard ` and its 40 hex digits (within the 64 characters a name may
-- have). Its fencing token and lease live in
-- __P__lock_fences, a MEMORY table: no write of a lock reaches the disk or
-- a transaction log. Fencing tokens are above the key's last and the
-- database's clock in µs, so they strictly increase across the row's
-- removal and a restart (which empties the table).
--
-- A holder's lease is recorded there, so that the successor of a holder
-- whose session ended unbeknownst to it (a cut connection, a client
-- killed or paused past its lease whose session the server ended) waits
-- out that lease; a release ends it just before its unlock, so a lease
-- its successor finds running was never released, and is waited out
-- whatever the state of its session (one being torn down releases its
-- user locks one at a time, and may still look alive to the waiter its
-- end woke). A holder's session is ended by the server once idle past
-- its lease (wait_timeout, whole seconds).
--
-- A client of session leases (LockLeases::Session, schema version 13, on
-- MariaDB) records no hold: its try and its wait are one statement each
-- (locks.rs), `GET_LOCK` and the next value of __P__lock_fence_seq, and its
-- release the bare `RELEASE_LOCK`. A session's end hands its lock on at
-- once; the old holder's fenced writes are then refused, since every
-- token drawn after is greater.
--
-- Routines here touch a MEMORY table in single statements only, never
-- inside a function (a function's tables are locked for its caller's whole
-- statement) and never around a wait.
SET SESSION max_heap_table_size = 1073741824
-- ;;
-- One row per lock key: its newest fencing token and the lease of its
-- latest hold (NULL once released), by whom (token, connection id). Up to
-- 1 GiB (the MEMORY table's size is fixed when it is made: the statement
-- above), about 300,000 keys held in the last minute.
CREATE TABLE IF NOT EXISTS __P__lock_fences (
  h BINARY(20) NOT NULL,
  k VARBINARY(2900) NOT NULL,
  fence BIGINT NOT NULL,
  token VARBINARY(64) NULL,
  conn BIGINT UNSIGNED NULL,
  at_us BIGINT NOT NULL,
  expires_us BIGINT NULL,
  PRIMARY KEY (h)
) ENGINE=MEMORY
-- ;;
-- A lock released before its at_least passed, kept until `until_us` (µs on
-- the database's clock): its holder's session keeps the user lock until
-- then, and its row of __P__lock_fences the lease; this InnoDB row keeps
-- it past a restart of the server too (which empties the MEMORY table),
-- for whoever takes the lock next to wait out. Written at at_least's
-- release alone, and read by a key's first draw (no row of its own in
-- __P__lock_fences).
CREATE TABLE IF NOT EXISTS __P__lock_kept (
  h BINARY(20) NOT NULL,
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  fence BIGINT NOT NULL,
  until_us BIGINT NOT NULL,
  PRIMARY KEY (h)
) ENGINE=InnoDB
-- ;;
-- The longest lease any lock was taken or renewed with, in ms (schema
-- version 12; one row, InnoDB, so a restart keeps it). Written only when
-- a hold asks for a longer lease than any before, so an application that
-- keeps to a few leases writes it a few times in all. See __P__lock_epoch.
CREATE TABLE IF NOT EXISTS __P__lock_bound (
  id TINYINT NOT NULL,
  lease_ms BIGINT NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB
-- ;;
-- Until when (µs on the database's clock) no lock is taken anew after the
-- MEMORY tables were emptied (version 12; one row, MEMORY). A restart
-- empties __P__lock_fences while every holder of the server that went
-- down may still count on its lease: its session is gone with the
-- server, but it learns that only at its next renewal, or never (a fixed
-- lease). So an empty __P__lock_epoch, which tells that the MEMORY tables
-- are new, is filled with the moment it is found empty plus the longest
-- lease any hold could have had (__P__lock_bound), and until then a key
-- with no row of its own is taken by nobody (Redis's "delayed restart",
-- done by the database itself). A new schema's bound is 0: no wait.
CREATE TABLE IF NOT EXISTS __P__lock_epoch (
  id TINYINT NOT NULL,
  until_us BIGINT NOT NULL,
  PRIMARY KEY (id)
) ENGINE=MEMORY
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_epoch_left
-- ;;
-- The µs left of the wait after the MEMORY tables were emptied (see
-- __P__lock_epoch), filling __P__lock_epoch when it is empty; NULL when
-- there is none to wait.
CREATE PROCEDURE __P__lock_epoch_left(OUT p_left BIGINT)
BEGIN
  DECLARE v_now BIGINT DEFAULT __NOW_US__;
  DECLARE v_until BIGINT;
  SELECT MAX(e.until_us) INTO v_until FROM __P__lock_epoch e;
  IF v_until IS NULL THEN
    SELECT COALESCE(MAX(b.lease_ms), 0) INTO v_until FROM __P__lock_bound b;
    INSERT IGNORE INTO __P__lock_epoch (id, until_us) VALUES (1, v_now + v_until * 1000);
    SELECT MAX(e.until_us) INTO v_until FROM __P__lock_epoch e;
  END IF;
  SET p_left = IF(v_until > v_now, v_until - v_now, NULL);
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_session_start
-- ;;
-- A session of a client's locks starts: the first after a restart fills
-- __P__lock_epoch (the wait counts from then, not from the first take of
-- a lock with no record, which may come long after). Answers the longest
-- lease recorded, which the client records again only when it asks for a
-- longer one (lock_bound_at_least), so a try and a wait never read it.
CREATE PROCEDURE __P__lock_session_start()
BEGIN
  DECLARE v_left BIGINT;
  CALL __P__lock_epoch_left(v_left);
  SELECT COALESCE(MAX(b.lease_ms), 0) FROM __P__lock_bound b;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_bound_at_least
-- ;;
-- Records a hold's lease of p_lease_ms ms in __P__lock_bound when it is
-- longer than any before (a read, and then rarely a write): called by a
-- client before it first asks for a lock on a lease longer than its
-- session read, and by a renewal.
CREATE PROCEDURE __P__lock_bound_at_least(p_lease_ms BIGINT)
BEGIN
  DECLARE v_bound BIGINT;
  SELECT MAX(b.lease_ms) INTO v_bound FROM __P__lock_bound b;
  IF v_bound IS NULL OR v_bound < p_lease_ms THEN
    -- At repeatable read, this write alone: a server whose binary log is
    -- in STATEMENT format refuses InnoDB writes at read committed (the
    -- session's level), and locks write nothing else to InnoDB.
    SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
    INSERT INTO __P__lock_bound (id, lease_ms) VALUES (1, p_lease_ms)
      ON DUPLICATE KEY UPDATE lease_ms = GREATEST(lease_ms, VALUES(lease_ms));
  END IF;
END
-- ;;
-- Every lock's fencing token, on MariaDB (schema version 13): a session
-- lease's is the next value (locks.rs), a recorded one's the greatest of
-- that, the key's last and the clock (locks_draw.sql). The sequence is
-- kept at or above the database's clock in µs (a session lease's draw
-- that finds it behind lifts it a second ahead: lock_fence_rebase), so
-- tokens stay above every token of schema versions before 13 (the clock
-- and the key's last), and after a failover of a second or more to a
-- replica whose sequence lags, above the old primary's. A
-- lock kept past its release (at_least) lifts it to 3 s past its kept
-- time (lock_lease), and a session lease's draw more than 2 s ahead of
-- the clock reads the kept time of its own key before it holds
-- (lock_kept_left): one more statement while some lock is kept, none
-- otherwise. Its cache is written to InnoDB ahead of the values it hands
-- out, so a restart continues above every token drawn.
/*M! CREATE SEQUENCE IF NOT EXISTS __P__lock_fence_seq
  START WITH 1 MINVALUE 1 MAXVALUE 9223372036854775806 INCREMENT BY 1 CACHE 1000 NOCYCLE */
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_fence_lift
-- ;;
-- Lifts __P__lock_fence_seq to p_to, unless it is there already (MariaDB's
-- SETVAL never moves a sequence down). SETVAL takes a constant: the
-- statement is written out.
/*M! CREATE PROCEDURE __P__lock_fence_lift(p_to BIGINT)
BEGIN
  SET @lockguard_lift = CONCAT('DO SETVAL(__P__lock_fence_seq, ', p_to, ')');
  PREPARE lockguard_lift FROM @lockguard_lift;
  EXECUTE lockguard_lift;
  DEALLOCATE PREPARE lockguard_lift;
END */
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_fence_rebase
-- ;;
-- A session lease's draw that found __P__lock_fence_seq at or behind the
-- clock: lifts it a second ahead and draws again. Answers (the fencing
-- token, the clock in µs).
/*M! CREATE PROCEDURE __P__lock_fence_rebase()
BEGIN
  CALL __P__lock_fence_lift(__NOW_US__ + 1000000);
  SELECT NEXTVAL(__P__lock_fence_seq), __NOW_US__;
END */
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_kept_left
-- ;;
-- The µs left of a lock p_key kept past its release (at_least) by a hold
-- other than token p_token's, or NULL: read by a session lease's take
-- whose draw found __P__lock_fence_seq lifted for a kept lock, after the
-- take's grant.
CREATE PROCEDURE __P__lock_kept_left(p_key VARBINARY(2900), p_token VARBINARY(64))
BEGIN
  DECLARE v_now BIGINT DEFAULT __NOW_US__;
  SELECT (SELECT MAX(k.until_us - v_now) FROM __P__lock_kept k
           WHERE k.h = __LOCK_H__ AND k.until_us > v_now AND NOT (k.token <=> p_token));
END
-- ;;
-- The keys a client of session leases held, by their row key: written at
-- a client's first hold of a key and once an hour after (locks.rs), so
-- that a survey can name a held user lock, which records nothing else.
-- Swept a day after.
CREATE TABLE IF NOT EXISTS __P__lock_names (
  h BINARY(20) NOT NULL,
  k VARBINARY(2900) NOT NULL,
  seen_us BIGINT NOT NULL,
  PRIMARY KEY (h)
) ENGINE=MEMORY
-- ;;
-- Each session's latest wait in GET_LOCK, by connection id, for
-- inspection and survey: a row counts while its session waits in
-- GET_LOCK (its state `User lock`); rows of sessions that ended are swept.
CREATE TABLE IF NOT EXISTS __P__lock_waits (
  conn BIGINT UNSIGNED NOT NULL,
  h BINARY(20) NOT NULL,
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  since_us BIGINT NOT NULL,
  PRIMARY KEY (conn),
  KEY (h)
) ENGINE=MEMORY
-- ;;
-- Version 9's first draw, a procedure of its own: now inlined in the try
-- and the wait (locks_draw.sql).
DROP PROCEDURE IF EXISTS __P__lock_draw
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_try
-- ;;
-- One try at lock p_key for token p_token with a lease of p_lease_ms ms,
-- never waiting. Answers (1, fence, µs since it began) when taken; (0, ms
-- left of the holder's lease or NULL, NULL) when not.
CREATE PROCEDURE __P__lock_try(p_key VARBINARY(2900), p_token VARBINARY(64), p_lease_ms BIGINT)
proc: BEGIN
  DECLARE v_start BIGINT DEFAULT __NOW_US__;
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_now BIGINT;
  DECLARE v_fence BIGINT;
  DECLARE v_left BIGINT;
  __BEFORE_LOCK__
  IF GET_LOCK(CONCAT('lockguard ', HEX(v_h)), 0) = 1 THEN
    __DRAW__
    -- Another holder's lease runs: given back.
    DO RELEASE_LOCK(CONCAT('lockguard ', HEX(v_h)));
    SET SESSION wait_timeout = @@GLOBAL.wait_timeout;
    SELECT 0, CEIL(v_left / 1000), NULL;
  ELSE
    SET SESSION wait_timeout = @@GLOBAL.wait_timeout;
    SET v_now = __NOW_US__;
    SELECT 0, (SELECT CEIL((MAX(f.expires_us) - v_now) / 1000)
                 FROM __P__lock_fences f WHERE f.h = v_h AND f.expires_us > v_now), NULL;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_wait
-- ;;
-- Waits in the server's queue of lock p_key for token p_token until the
-- server grants it, and takes it for a lease of p_lease_ms ms. Answers
-- (1, fence, µs it waited before the lease began). A wait is stopped with
-- KILL QUERY on its session.
CREATE PROCEDURE __P__lock_wait(p_key VARBINARY(2900), p_token VARBINARY(64), p_lease_ms BIGINT)
proc: BEGIN
  DECLARE v_start BIGINT DEFAULT __NOW_US__;
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_now BIGINT;
  DECLARE v_fence BIGINT;
  DECLARE v_left BIGINT;
  REPLACE INTO __P__lock_waits (conn, h, k, token, since_us)
  VALUES (CONNECTION_ID(), v_h, p_key, p_token, __NOW_US__);
  __BEFORE_LOCK__
  IF GET_LOCK(CONCAT('lockguard ', HEX(v_h)), 31536000) = 1 THEN
    -- The wait's row stays (off the handoff's path) until this session's
    -- next wait replaces it or the session ends: a row counts as a waiter
    -- only while its session waits in GET_LOCK.
    wait_out: LOOP
      __DRAW__
      -- Another holder's lease runs unreleased: waited out (a release or
      -- an eviction ends it sooner, so it is looked at again).
      DO SLEEP(LEAST(v_left, 50000) / 1000000);
    END LOOP wait_out;
  END IF;
  DELETE FROM __P__lock_waits WHERE conn = CONNECTION_ID();
  SELECT 0, NULL, NULL;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_release
-- ;;
-- Ends token p_token's lease of lock p_key, then unlocks the lock on the
-- hold's session: answers whether the session held it. The lease ends
-- first, so the next holder, granted the lock by the unlock, finds no
-- lease of this hold running (one it finds was never released, and it
-- waits that out).
CREATE PROCEDURE __P__lock_release(p_key VARBINARY(2900), p_token VARBINARY(64))
BEGIN
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_held INT;
  UPDATE __P__lock_fences SET expires_us = NULL, conn = NULL
   WHERE h = v_h AND token = p_token AND expires_us IS NOT NULL;
  SET v_held = COALESCE(RELEASE_LOCK(CONCAT('lockguard ', HEX(v_h))), 0);
  SET SESSION wait_timeout = @@GLOBAL.wait_timeout;
  SELECT v_held;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_lease
-- ;;
-- Renews token p_token's lease of lock p_key (fencing token p_fence) to
-- p_lease_ms ms from now, on the hold's session: answers whether the
-- session still holds the lock. With p_keep (the release of a lock taken
-- with at_least), the lease is also kept in an InnoDB row, past the
-- session's end and a restart of the server.
CREATE PROCEDURE __P__lock_lease(p_key VARBINARY(2900), p_token VARBINARY(64),
                                 p_fence BIGINT, p_lease_ms BIGINT, p_keep TINYINT)
BEGIN
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_held INT DEFAULT IS_USED_LOCK(CONCAT('lockguard ', HEX(v_h))) <=> CONNECTION_ID();
  DECLARE v_until BIGINT DEFAULT __NOW_US__ + LEAST(p_lease_ms, 315360000000) * 1000;
  IF v_held THEN
    IF p_keep = 1 THEN
      -- Session leases' takes read the kept time while the sequence is
      -- this far ahead (see __P__lock_fence_seq); lifted before the row is
      -- written, so no take misses the row.
      /*M! CALL __P__lock_fence_lift(v_until + 3000000); */
      REPLACE INTO __P__lock_kept (h, k, token, fence, until_us)
      VALUES (v_h, p_key, p_token, p_fence, v_until);
    ELSE
      -- (A kept time outlives a restart in __P__lock_kept: it need not
      -- lengthen the wait after every restart.)
      CALL __P__lock_bound_at_least(p_lease_ms);
    END IF;
    UPDATE __P__lock_fences SET expires_us = v_until, conn = CONNECTION_ID()
     WHERE h = v_h AND token = p_token AND fence = p_fence;
    SET SESSION wait_timeout = LEAST(CEIL((LEAST(p_lease_ms, 315360000000)
      + LEAST(GREATEST(p_lease_ms DIV 4, 50), 5000)) / 1000), 31536000);
  END IF;
  SELECT v_held;
END
-- ;;
-- lock_lease's with p_keep = 1, a procedure of its own for a while.
DROP PROCEDURE IF EXISTS __P__lock_keep
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_forget
-- ;;
-- Ends the lease an attempt of token p_token may have recorded for lock
-- p_key (its answer lost, or nobody waiting for it), on any session.
CREATE PROCEDURE __P__lock_forget(p_key VARBINARY(2900), p_token VARBINARY(64))
BEGIN
  UPDATE __P__lock_fences SET expires_us = NULL, conn = NULL
   WHERE h = __LOCK_H__ AND token = p_token AND expires_us IS NOT NULL;
  SELECT ROW_COUNT();
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_inspect
-- ;;
-- Lock p_key from any session: (holders, ms left of the lease, waiters,
-- newest fencing token). A lease running unreleased counts as a holder:
-- the next holder waits it out.
CREATE PROCEDURE __P__lock_inspect(p_key VARBINARY(2900))
BEGIN
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_now BIGINT DEFAULT __NOW_US__;
  DECLARE v_used INT DEFAULT IS_USED_LOCK(CONCAT('lockguard ', HEX(v_h))) IS NOT NULL;
  DECLARE v_fence BIGINT;
  DECLARE v_left BIGINT;
  DECLARE v_waiters BIGINT;
  SELECT MAX(fence),
         MAX(IF(expires_us > v_now, CEIL((expires_us - v_now) / 1000), NULL))
    INTO v_fence, v_left
    FROM __P__lock_fences WHERE h = v_h;
  IF v_left IS NULL THEN
    -- Kept past a restart (its lease row gone with the MEMORY table).
    SELECT MAX(CEIL((until_us - v_now) / 1000)) INTO v_left
      FROM __P__lock_kept WHERE h = v_h AND until_us > v_now;
  END IF;
  IF v_left IS NULL AND v_fence IS NULL THEN
    -- No row: nobody takes it until a restart's wait is over.
    CALL __P__lock_epoch_left(v_left);
    SET v_left = CEIL(v_left / 1000);
  END IF;
  -- A session lease's token is the sequence's: none drawn is above its
  -- next value not cached (MariaDB).
  /*M! SELECT GREATEST(COALESCE(v_fence, 0), s.next_not_cached_value - 1) INTO v_fence
         FROM __P__lock_fence_seq s; */
  -- A wait's row stays after its grant: it counts while its session
  -- waits in GET_LOCK.
  SELECT COUNT(*) INTO v_waiters FROM __P__lock_waits w
   WHERE w.h = v_h
     AND EXISTS (SELECT 1 FROM information_schema.PROCESSLIST p
                  WHERE p.ID = w.conn AND p.STATE = 'User lock');
  SELECT IF(v_used OR v_left IS NOT NULL, 1, 0), v_left, v_waiters, COALESCE(v_fence, 0);
END
-- ;;
DROP PROCEDURE IF EXISTS __P__lock_evict
-- ;;
-- Forces token p_token's hold of lock p_key free, from any session: its
-- lease ends and its session is ended, which hands the lock to the first
-- waiter. Answers whether the token held it.
CREATE PROCEDURE __P__lock_evict(p_key VARBINARY(2900), p_token VARBINARY(64))
BEGIN
  DECLARE v_h BINARY(20) DEFAULT __LOCK_H__;
  DECLARE v_conn BIGINT UNSIGNED;
  DECLARE v_found INT DEFAULT 0;
  DECLARE v_kept INT DEFAULT 0;
  SELECT MAX(conn), COUNT(*) INTO v_conn, v_found FROM __P__lock_fences
   WHERE h = v_h AND token = p_token AND expires_us > __NOW_US__;
  SELECT COUNT(*) INTO v_kept FROM __P__lock_kept
   WHERE h = v_h AND token = p_token AND until_us > __NOW_US__;
  UPDATE __P__lock_fences SET expires_us = NULL, conn = NULL
   WHERE h = v_h AND token = p_token AND expires_us IS NOT NULL;
  DELETE FROM __P__lock_kept WHERE h = v_h AND token = p_token;
  -- A session lease's hold, named by its session (the survey's token
  -- for it: 16 zeros, 5e55, the connection id in 12 hex digits).
  IF v_conn IS NULL AND LEFT(p_token, 20) = '00000000000000005e55' THEN
    SET v_conn = CONV(SUBSTRING(p_token, 21), 16, 10);
    SET v_found = IS_USED_LOCK(CONCAT('lockguard ', HEX(v_h))) <=> v_conn;
  END IF;
  -- A kept hold that no lease row names (a session lease's, or one kept
  -- across a restart): ended with its row. The session holding the user
  -- lock is the keeper's, unless it is a waiter granted the lock that
  -- waits the kept time out (its wait's row names the key), which the
  -- row's removal lets go on.
  IF v_conn IS NULL AND v_kept > 0 THEN
    SET v_found = 1;
    SET v_conn = IS_USED_LOCK(CONCAT('lockguard ', HEX(v_h)));
    IF EXISTS (SELECT 1 FROM __P__lock_waits w WHERE w.conn = v_conn AND w.h = v_h) THEN
      SET v_conn = NULL;
    END IF;
  END IF;
  IF v_conn IS NOT NULL AND IS_USED_LOCK(CONCAT('lockguard ', HEX(v_h))) <=> v_conn THEN
    KILL CONNECTION v_conn;
  END IF;
  SELECT v_found > 0;
END
