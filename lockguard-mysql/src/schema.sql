-- lockguard's tables and procedures, every name starting with the table
-- prefix (`lockguard_` unless configured; `__P__` below). Created by
-- lockguard on connect (or by hand: `lockguard_mysql::migration_sql`
-- prints them with the prefix filled in and client delimiters), under the named
-- lock `lockguard schema DATABASE.PREFIX`, so that clients starting
-- together create it once. Nothing here ever drops a table.
--
-- Every lock operation is one statement (a CALL), so one round trip and one
-- transaction. Operations on one lock are serialized by the exclusive lock
-- on the key's row in __P__keys, taken first (an upsert on its primary key:
-- never a scan); every row they then read or write belongs to that key.
-- Time is the database's: SYSDATE(6), the clock read when called, after
-- that lock, never a client's clock, in µs since 1970 (__NOW_US__:
-- TIMESTAMPDIFF from the epoch, which holds past 2038 where UNIX_TIMESTAMP
-- is NULL on MariaDB before 11.5). Connections run in UTC (time_zone
-- '+00:00', so SYSDATE reads no daylight-saving shift) and READ COMMITTED,
-- set by lockguard when it opens them.
--
-- Handoffs are written to a mailbox (__P__handoffs) in the transaction that
-- makes them; after it commits, the releaser rings the waiter's client:
-- `KILL QUERY` on the client's bell connection, which sleeps in a query
-- and holds a user lock named for the client's channel, by which the ring
-- finds it (see bell.rs). A bell that cannot be rung leaves the waiter to
-- its timed refresh, which claims the lock as well.

CREATE TABLE IF NOT EXISTS __P__meta (
  id TINYINT NOT NULL PRIMARY KEY,
  version INT NOT NULL
) ENGINE=InnoDB
-- ;;
-- One row per lock or semaphore: its row lock serializes the operations on
-- it; `fence` is its newest fencing token, `arrivals` the last place handed
-- out in its queue. Fencing tokens are greater than the key's last one and
-- than the database's clock in µs, so they strictly increase across the
-- row's removal (the sweep removes a row only a minute after the clock
-- passed its token) and across a restart.
CREATE TABLE IF NOT EXISTS __P__keys (
  k VARBINARY(2900) NOT NULL PRIMARY KEY,
  fence BIGINT NOT NULL,
  arrivals BIGINT NOT NULL
) ENGINE=InnoDB
-- ;;
-- Holders of locks and semaphore permits: one row per holder, until its
-- lease (µs on the database's clock) ends. A lock is a semaphore of one
-- permit.
CREATE TABLE IF NOT EXISTS __P__holders (
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  expires_us BIGINT NOT NULL,
  fence BIGINT NOT NULL,
  PRIMARY KEY (k, token),
  KEY __P__holders_expiry (expires_us)
) ENGINE=InnoDB
-- ;;
-- The wait queue of each lock or semaphore, first come first served
-- (arrival). A waiter's place is kept until its deadline, which each of its
-- attempts moves on.
CREATE TABLE IF NOT EXISTS __P__waiters (
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  arrival BIGINT NOT NULL,
  deadline_us BIGINT NOT NULL,
  attempt BIGINT NOT NULL,
  channel VARBINARY(2900) NOT NULL,
  PRIMARY KEY (k, token),
  KEY __P__waiters_order (k, arrival),
  KEY __P__waiters_deadline (deadline_us)
) ENGINE=InnoDB
-- ;;
-- The mailbox: handoffs made, until the waiter's client has read them.
CREATE TABLE IF NOT EXISTS __P__handoffs (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  channel VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  fence BIGINT NOT NULL,
  attempt BIGINT NOT NULL,
  at_us BIGINT NOT NULL,
  KEY __P__handoffs_channel (channel),
  KEY __P__handoffs_age (at_us)
) ENGINE=InnoDB
-- ;;
-- Each client's bell: whether it was rung (KILL QUERY) since it last read
-- its mailbox, and its connection id (for an operator: a ring finds the
-- connection by the user lock it holds). Renewed by the bell every minute
-- (put back if it was removed); a ring puts back a row it finds missing.
CREATE TABLE IF NOT EXISTS __P__bells (
  channel VARBINARY(2900) NOT NULL PRIMARY KEY,
  conn BIGINT UNSIGNED NOT NULL,
  at_us BIGINT NOT NULL,
  rung TINYINT NOT NULL DEFAULT 0,
  KEY __P__bells_age (at_us)
) ENGINE=InnoDB
-- ;;
-- Counters: value and version (the optimistic lock's version column),
-- until their expiry (µs on the database's clock), if any.
CREATE TABLE IF NOT EXISTS __P__counters (
  k VARBINARY(2900) NOT NULL PRIMARY KEY,
  value BIGINT NOT NULL,
  version BIGINT NOT NULL,
  expires_us BIGINT NULL,
  KEY __P__counters_expiry (expires_us)
) ENGINE=InnoDB
-- ;;
-- Once-per-member marks: a set (its generation and expiry) and its members
-- (by the SHA-256 of the member, so any member fits the key). A member
-- counts when it carries the set's current generation; a set that expired
-- starts a new generation, and the old members are swept later.
CREATE TABLE IF NOT EXISTS __P__mark_sets (
  k VARBINARY(2900) NOT NULL PRIMARY KEY,
  generation BIGINT NOT NULL,
  expires_us BIGINT NULL,
  KEY __P__mark_sets_expiry (expires_us)
) ENGINE=InnoDB
-- ;;
CREATE TABLE IF NOT EXISTS __P__marks (
  k VARBINARY(2900) NOT NULL,
  member BINARY(32) NOT NULL,
  generation BIGINT NOT NULL,
  PRIMARY KEY (k, member)
) ENGINE=InnoDB
-- ;;
-- Fenced values: the newest token accepted and the value it wrote; NULL
-- once removed (version 6): the row stays, with the token of the removal,
-- so that older tokens stay refused.
CREATE TABLE IF NOT EXISTS __P__fenced (
  k VARBINARY(2900) NOT NULL PRIMARY KEY,
  fence BIGINT UNSIGNED NOT NULL,
  value LONGBLOB NULL
) ENGINE=InnoDB
-- ;;
-- A table of version 5 or older: its value becomes nullable (the same
-- definition again for a newer one).
ALTER TABLE __P__fenced MODIFY value LONGBLOB NULL
-- ;;
-- Rate limiters: GCRA's theoretical arrival time (µs), a fixed window's
-- count, or a sliding log's running sum, until the state no longer matters
-- (µs on the database's clock).
CREATE TABLE IF NOT EXISTS __P__limits (
  k VARBINARY(2900) NOT NULL PRIMARY KEY,
  value BIGINT NOT NULL,
  expires_us BIGINT NOT NULL,
  KEY __P__limits_expiry (expires_us)
) ENGINE=InnoDB
-- ;;
-- The sliding window's log of admitted requests (time in µs and cost).
CREATE TABLE IF NOT EXISTS __P__limit_log (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  k VARBINARY(2900) NOT NULL,
  at_us BIGINT NOT NULL,
  cost BIGINT NOT NULL,
  KEY __P__limit_log_order (k, at_us)
) ENGINE=InnoDB
-- ;;
DROP PROCEDURE IF EXISTS __P__hand_out
-- ;;
-- Hands up to p_free free permits (a free lock) to the first live waiters,
-- stopping before p_me (a waiter asking for itself), and writes each
-- handoff to the mailbox; the ids written are p_first..p_last. A lock
-- handed on is reserved for its waiter until its place would have lapsed
-- (a dead waiter costs the queue at most its timeout), never less than
-- 50 ms. Runs in the caller's transaction, which holds the key's row.
CREATE PROCEDURE __P__hand_out(
  IN p_k VARBINARY(2900), IN p_me VARBINARY(64), IN p_now BIGINT,
  INOUT p_free INT, INOUT p_first BIGINT, INOUT p_last BIGINT)
BEGIN
  DECLARE v_token VARBINARY(64);
  DECLARE v_deadline BIGINT;
  DECLARE v_attempt BIGINT;
  DECLARE v_channel VARBINARY(2900);
  DECLARE v_fence BIGINT;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_token = NULL;
  hand: WHILE p_free > 0 DO
    SET v_token = NULL;
    SELECT w.token, w.deadline_us, w.attempt, w.channel
      INTO v_token, v_deadline, v_attempt, v_channel
      FROM __P__waiters w WHERE w.k = p_k ORDER BY w.arrival LIMIT 1;
    IF v_token IS NULL THEN
      LEAVE hand;
    END IF;
    IF v_deadline <= p_now THEN
      -- Silent past its deadline: dropped when it reaches the head.
      DELETE FROM __P__waiters WHERE k = p_k AND token = v_token;
      ITERATE hand;
    END IF;
    IF v_token = p_me THEN
      LEAVE hand;
    END IF;
    SELECT GREATEST(fence, __NOW_US__) + 1
      INTO v_fence FROM __P__keys WHERE k = p_k;
    UPDATE __P__keys SET fence = v_fence WHERE k = p_k;
    DELETE FROM __P__waiters WHERE k = p_k AND token = v_token;
    INSERT INTO __P__holders (k, token, expires_us, fence)
      VALUES (p_k, v_token, GREATEST(v_deadline, p_now + 50000), v_fence)
      ON DUPLICATE KEY UPDATE expires_us = VALUES(expires_us), fence = VALUES(fence);
    INSERT INTO __P__handoffs (channel, token, fence, attempt, at_us)
      VALUES (v_channel, v_token, v_fence, v_attempt, p_now);
    SET p_last = LAST_INSERT_ID();
    IF p_first IS NULL THEN
      SET p_first = p_last;
    END IF;
    SET p_free = p_free - 1;
  END WHILE;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__ring
-- ;;
-- Rings the bells of the clients whose waiters the mailbox rows
-- p_first..p_last address: KILL QUERY on each bell's connection. A bell
-- is found by the user lock its connection holds, `lockguard ring ` and
-- the channel's last 40 bytes (which end with the client's random token):
-- IS_USED_LOCK names the connection holding it in this server's run, so a
-- bell gone (or a server restarted since it registered) is never taken for
-- a connection that now has its id, and no process list is read. Runs
-- after the handoffs committed, so a woken bell finds them. A bell that
-- cannot be rung (none holds the lock, or it is another user's
-- connection, unkillable without CONNECTION ADMIN) is skipped: its
-- waiter's refresh claims the lock instead. Rows of other handoffs in the
-- range only ring their bells once more.
--
-- A bell rung and not yet read is not rung again (`rung`, reset by the bell
-- as it reads its mailbox): it will read the handoffs made meanwhile
-- anyway, and its wait returns at once while the flag is set (see
-- bell.rs). And MariaDB's KILL of a thread can stall when another KILL of
-- the same thread races it, so two must not overlap.
--
-- The kill may land on any statement of the bell's connection, not only
-- its wait: a ring queued behind the bell's read of its mailbox (which
-- holds the bell's row) kills just as that read ends. The bell treats an
-- interrupted statement as a ring, and reads and removes its mail in two
-- statements, so that an interrupted read (even one interrupted after it
-- committed) removes nothing.
CREATE PROCEDURE __P__ring(IN p_first BIGINT, IN p_last BIGINT)
BEGIN
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_channel VARBINARY(2900);
  DECLARE v_conn BIGINT UNSIGNED;
  DECLARE v_rung INT;
  DECLARE c CURSOR FOR
    SELECT DISTINCT h.channel FROM __P__handoffs h WHERE h.id BETWEEN p_first AND p_last;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
  OPEN c;
  bells: LOOP
    FETCH c INTO v_channel;
    IF v_done = 1 THEN
      LEAVE bells;
    END IF;
    UPDATE __P__bells SET rung = 1 WHERE channel = v_channel AND rung = 0;
    SET v_rung = ROW_COUNT() > 0;
    IF NOT v_rung AND NOT EXISTS (SELECT 1 FROM __P__bells b WHERE b.channel = v_channel) THEN
      -- A bell without a row (the sweep removes rows not renewed within
      -- five minutes: a clock step, a client paused that long) is rung all
      -- the same, and its row put back, rung. A ring for a bell that is
      -- gone only leaves a row for the sweep.
      INSERT IGNORE INTO __P__bells (channel, conn, at_us, rung) VALUES (v_channel,
        COALESCE(IS_USED_LOCK(CONCAT('lockguard ring ', RIGHT(v_channel, 40))), 0), __NOW_US__, 1);
      SET v_rung = ROW_COUNT() > 0;
    END IF;
    IF v_rung THEN
      SET v_conn = IS_USED_LOCK(CONCAT('lockguard ring ', RIGHT(v_channel, 40)));
      IF v_conn IS NOT NULL THEN
        KILL QUERY v_conn;
      END IF;
    END IF;
  END LOOP;
  CLOSE c;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__acquire
-- ;;
-- One attempt to take a lock (p_permits = 1) or a semaphore permit: takes
-- it when free and nobody live queues ahead; claims one a release handed to
-- p_token (with p_lease_ms, keeping the fence announced); otherwise, with a
-- p_wait_ms, joins the queue (or keeps its place, refreshed) until
-- p_wait_ms from now. Answers (1, fence) when taken, (0, ms until the
-- first lease ends) when not.
CREATE PROCEDURE __P__acquire(
  IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_lease_ms BIGINT, IN p_permits INT,
  IN p_wait_ms BIGINT, IN p_channel VARBINARY(2900), IN p_attempt BIGINT)
proc: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_exp BIGINT;
  DECLARE v_fence BIGINT;
  DECLARE v_free INT;
  DECLARE v_first BIGINT DEFAULT NULL;
  DECLARE v_last BIGINT DEFAULT NULL;
  DECLARE v_n BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_exp = NULL;
  START TRANSACTION;
  INSERT INTO __P__keys (k, fence, arrivals) VALUES (p_k, 0, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SET v_now = __NOW_US__;
  SELECT h.expires_us, h.fence INTO v_exp, v_n
    FROM __P__holders h WHERE h.k = p_k AND h.token = p_token;
  IF v_exp IS NOT NULL AND v_exp > v_now THEN
    UPDATE __P__holders SET expires_us = v_now + p_lease_ms * 1000
      WHERE k = p_k AND token = p_token;
    COMMIT;
    SELECT 1, v_n;
    LEAVE proc;
  END IF;
  -- `+ 0` keeps the expiry index out: estimating few expired rows, the
  -- optimizer would scan it past other keys' rows and lock them (a
  -- deadlock with their own releases), not this key's rows by primary key.
  DELETE FROM __P__holders WHERE k = p_k AND expires_us + 0 <= v_now;
  SET v_free = p_permits - (SELECT COUNT(*) FROM __P__holders WHERE k = p_k);
  IF v_free > 0 THEN
    CALL __P__hand_out(p_k, p_token, v_now, v_free, v_first, v_last);
  END IF;
  IF v_free > 0 THEN
    DELETE FROM __P__waiters WHERE k = p_k AND token = p_token;
    SELECT GREATEST(fence, __NOW_US__) + 1
      INTO v_fence FROM __P__keys WHERE k = p_k;
    UPDATE __P__keys SET fence = v_fence WHERE k = p_k;
    INSERT INTO __P__holders (k, token, expires_us, fence)
      VALUES (p_k, p_token, v_now + p_lease_ms * 1000, v_fence)
      ON DUPLICATE KEY UPDATE expires_us = VALUES(expires_us), fence = VALUES(fence);
    COMMIT;
    IF v_first IS NOT NULL THEN
      CALL __P__ring(v_first, v_last);
    END IF;
    SELECT 1, v_fence;
    LEAVE proc;
  END IF;
  IF p_wait_ms IS NOT NULL THEN
    UPDATE __P__keys SET arrivals = arrivals + 1 WHERE k = p_k;
    INSERT INTO __P__waiters (k, token, arrival, deadline_us, attempt, channel)
      SELECT p_k, p_token, arrivals, v_now + p_wait_ms * 1000, p_attempt, p_channel
        FROM __P__keys WHERE k = p_k
      ON DUPLICATE KEY UPDATE deadline_us = VALUES(deadline_us), attempt = VALUES(attempt),
        channel = VALUES(channel);
  END IF;
  SET v_n = (SELECT CEIL((MIN(expires_us) - v_now) / 1000) FROM __P__holders WHERE k = p_k);
  COMMIT;
  IF v_first IS NOT NULL THEN
    CALL __P__ring(v_first, v_last);
  END IF;
  SELECT 0, v_n;
END
-- ;;
-- Version 8's multi-lock in one statement: a lock is a user lock now
-- (locks.sql), and a multi-lock takes its keys one by one.
DROP PROCEDURE IF EXISTS __P__acquire_all
-- ;;
DROP PROCEDURE IF EXISTS __P__release
-- ;;
-- Gives p_token's lock or permit up (and its place in the queue), handing
-- the free permits to the first live waiters in the same transaction, and
-- rings their bells once it committed. Answers 1 when it was still held.
CREATE PROCEDURE __P__release(IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_permits INT)
proc: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_ends BIGINT;
  DECLARE v_free INT;
  DECLARE v_first BIGINT DEFAULT NULL;
  DECLARE v_last BIGINT DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  INSERT INTO __P__keys (k, fence, arrivals) VALUES (p_k, 0, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SET v_now = __NOW_US__;
  DELETE FROM __P__waiters WHERE k = p_k AND token = p_token;
  SET v_ends = (SELECT expires_us FROM __P__holders WHERE k = p_k AND token = p_token);
  IF v_ends IS NULL THEN
    COMMIT;
    SELECT 0;
    LEAVE proc;
  END IF;
  DELETE FROM __P__holders WHERE k = p_k AND token = p_token;
  -- `+ 0` keeps the expiry index out: estimating few expired rows, the
  -- optimizer would scan it past other keys' rows and lock them (a
  -- deadlock with their own releases), not this key's rows by primary key.
  DELETE FROM __P__holders WHERE k = p_k AND expires_us + 0 <= v_now;
  SET v_free = p_permits - (SELECT COUNT(*) FROM __P__holders WHERE k = p_k);
  IF v_free > 0 THEN
    CALL __P__hand_out(p_k, NULL, v_now, v_free, v_first, v_last);
  END IF;
  COMMIT;
  IF v_first IS NOT NULL THEN
    CALL __P__ring(v_first, v_last);
  END IF;
  SELECT v_ends > v_now;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__drain
-- ;;
-- Reads and removes the handoffs addressed to p_channel's waiters, and
-- marks the bell ready to be rung again, in one statement: what a bell of
-- schema version 3 does when rung. Kept for such clients still running
-- beside this version (they are no longer rung: their waiters' refreshes
-- claim what is handed to them).
CREATE PROCEDURE __P__drain(IN p_channel VARBINARY(2900))
BEGIN
  DECLARE v_max BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  UPDATE __P__bells SET rung = 0 WHERE channel = p_channel;
  SELECT MAX(h.id) INTO v_max FROM __P__handoffs h WHERE h.channel = p_channel FOR UPDATE;
  SELECT h.token, h.fence, h.attempt FROM __P__handoffs h
    WHERE h.channel = p_channel AND h.id <= v_max ORDER BY h.id FOR UPDATE;
  DELETE FROM __P__handoffs WHERE channel = p_channel AND id <= v_max;
  COMMIT;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__read_mail
-- ;;
-- Reads the handoffs addressed to p_channel's waiters, and marks the bell
-- ready to be rung again: what a bell does when rung. It removes nothing:
-- the bell removes the rows it read (by id) once it has them, so a read
-- that a ring interrupts, even after it committed, loses no handoff. The
-- read locks what it reads, so it sees only committed handoffs (the bell's
-- session reads uncommitted rows otherwise: see bell.rs) and waits for one
-- being committed.
CREATE PROCEDURE __P__read_mail(IN p_channel VARBINARY(2900))
BEGIN
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  UPDATE __P__bells SET rung = 0 WHERE channel = p_channel;
  SELECT h.id, h.token, h.fence, h.attempt FROM __P__handoffs h
    WHERE h.channel = p_channel ORDER BY h.id FOR UPDATE;
  COMMIT;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__extend
-- ;;
-- Resets p_token's lease to p_lease_ms from now, if it still holds it.
-- One statement (autocommit), under the holder row's lock alone.
CREATE PROCEDURE __P__extend(IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_lease_ms BIGINT)
BEGIN
  DECLARE v_now BIGINT;
  SET v_now = __NOW_US__;
  UPDATE __P__holders SET expires_us = v_now + p_lease_ms * 1000
    WHERE k = p_k AND token = p_token AND expires_us > v_now;
  SELECT ROW_COUNT() > 0;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__counter_lock
-- ;;
-- Locks the row of counter p_k (creating an empty one, version 0, when
-- missing; every counter operation checks and writes under this lock) and
-- reads it as of p_now, the clock read once the row is ours: p_value and
-- p_expires as live (0 and NULL for an expired counter), p_last the stored
-- version even when expired, which the next version must exceed. Runs in
-- the caller's transaction.
CREATE PROCEDURE __P__counter_lock(
  IN p_k VARBINARY(2900), OUT p_value BIGINT, OUT p_version BIGINT, OUT p_last BIGINT,
  OUT p_expires BIGINT, OUT p_now BIGINT)
BEGIN
  INSERT INTO __P__counters (k, value, version, expires_us) VALUES (p_k, 0, 0, NULL)
    ON DUPLICATE KEY UPDATE version = version;
  SELECT c.value, c.version, c.version, c.expires_us INTO p_value, p_version, p_last, p_expires
    FROM __P__counters c WHERE c.k = p_k FOR UPDATE;
  SET p_now = __NOW_US__;
  IF p_expires IS NOT NULL AND p_expires <= p_now THEN
    SET p_value = 0, p_version = 0, p_expires = NULL;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__counter_put
-- ;;
-- Writes p_value to counter p_k as counter_lock found it, with a version
-- after p_last (greater than it and than the clock in µs); an expiry of
-- p_ttl_ms is set on a counter without one. p_version: the new version.
CREATE PROCEDURE __P__counter_put(
  IN p_k VARBINARY(2900), IN p_value BIGINT, IN p_last BIGINT, IN p_expires BIGINT,
  IN p_ttl_ms BIGINT, IN p_now BIGINT, OUT p_version BIGINT)
BEGIN
  SET p_version = GREATEST(p_last, __NOW_US__) + 1;
  UPDATE __P__counters SET value = p_value, version = p_version,
    expires_us = COALESCE(p_expires, IF(p_ttl_ms > 0, p_now + p_ttl_ms * 1000, NULL))
    WHERE k = p_k;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__counter_add
-- ;;
-- Adds p_delta to a counter (a counter that expired starts again from 0);
-- answers the new value. Overflow is an error (out of range).
CREATE PROCEDURE __P__counter_add(IN p_k VARBINARY(2900), IN p_delta BIGINT, IN p_ttl_ms BIGINT)
BEGIN
  DECLARE v_value, v_version, v_last, v_expires, v_now, v_new BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__counter_lock(p_k, v_value, v_version, v_last, v_expires, v_now);
  SET v_value = v_value + p_delta;
  CALL __P__counter_put(p_k, v_value, v_last, v_expires, p_ttl_ms, v_now, v_new);
  COMMIT;
  SELECT v_value;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__counter_take
-- ;;
-- Takes p_n (positive) only if at least p_n is there. Answers (1, new
-- value) or (0, current value).
CREATE PROCEDURE __P__counter_take(IN p_k VARBINARY(2900), IN p_n BIGINT, IN p_ttl_ms BIGINT)
BEGIN
  DECLARE v_value, v_version, v_last, v_expires, v_now, v_new BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__counter_lock(p_k, v_value, v_version, v_last, v_expires, v_now);
  IF v_value < p_n THEN
    -- Nothing written: an empty row this made goes again.
    DELETE FROM __P__counters WHERE k = p_k AND version = 0;
    COMMIT;
    SELECT 0, v_value;
  ELSE
    SET v_value = v_value - p_n;
    CALL __P__counter_put(p_k, v_value, v_last, v_expires, p_ttl_ms, v_now, v_new);
    COMMIT;
    SELECT 1, v_value;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__counter_set
-- ;;
-- Sets a counter, only if its version is p_expected (NULL: any). Answers
-- (1, new version) or (0, current version).
CREATE PROCEDURE __P__counter_set(
  IN p_k VARBINARY(2900), IN p_value BIGINT, IN p_expected BIGINT UNSIGNED, IN p_ttl_ms BIGINT)
BEGIN
  DECLARE v_value, v_version, v_last, v_expires, v_now, v_new BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__counter_lock(p_k, v_value, v_version, v_last, v_expires, v_now);
  IF p_expected IS NOT NULL AND p_expected <> v_version THEN
    DELETE FROM __P__counters WHERE k = p_k AND version = 0;
    COMMIT;
    SELECT 0, v_version;
  ELSE
    CALL __P__counter_put(p_k, p_value, v_last, v_expires, p_ttl_ms, v_now, v_new);
    COMMIT;
    SELECT 1, v_new;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__mark_once
-- ;;
-- Marks p_member in a set; answers 1 the first time. An expiry is set on a
-- set without one; a set that expired starts empty.
CREATE PROCEDURE __P__mark_once(IN p_k VARBINARY(2900), IN p_member BLOB, IN p_ttl_ms BIGINT)
BEGIN
  DECLARE v_gen, v_expires, v_now, v_expiry, v_mine BIGINT;
  DECLARE v_hash BINARY(32) DEFAULT UNHEX(SHA2(p_member, 256));
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_mine = NULL;
  START TRANSACTION;
  INSERT INTO __P__mark_sets (k, generation, expires_us) VALUES (p_k, 0, NULL)
    ON DUPLICATE KEY UPDATE generation = generation;
  SELECT s.generation, s.expires_us INTO v_gen, v_expires
    FROM __P__mark_sets s WHERE s.k = p_k FOR UPDATE;
  SET v_now = __NOW_US__;
  SET v_expiry = IF(p_ttl_ms > 0, v_now + p_ttl_ms * 1000, NULL);
  IF v_gen = 0 OR (v_expires IS NOT NULL AND v_expires <= v_now) THEN
    SET v_gen = GREATEST(v_gen, v_now) + 1;
    UPDATE __P__mark_sets SET generation = v_gen, expires_us = v_expiry WHERE k = p_k;
  ELSEIF v_expires IS NULL AND v_expiry IS NOT NULL THEN
    UPDATE __P__mark_sets SET expires_us = v_expiry WHERE k = p_k;
  END IF;
  SET v_mine = NULL;
  SELECT m.generation INTO v_mine FROM __P__marks m
    WHERE m.k = p_k AND m.member = v_hash FOR UPDATE;
  IF v_mine IS NULL THEN
    INSERT INTO __P__marks (k, member, generation) VALUES (p_k, v_hash, v_gen);
  ELSEIF v_mine <> v_gen THEN
    UPDATE __P__marks SET generation = v_gen WHERE k = p_k AND member = v_hash;
  END IF;
  COMMIT;
  SELECT v_mine IS NULL OR v_mine <> v_gen;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__fenced_write
-- ;;
-- Stores p_value if p_fence is at least the newest token accepted for
-- p_k; answers 1 when it was stored.
CREATE PROCEDURE __P__fenced_write(
  IN p_k VARBINARY(2900), IN p_fence BIGINT UNSIGNED, IN p_value LONGBLOB)
BEGIN
  DECLARE v_fence BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  INSERT INTO __P__fenced (k, fence, value) VALUES (p_k, p_fence, p_value)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT f.fence INTO v_fence FROM __P__fenced f WHERE f.k = p_k FOR UPDATE;
  IF v_fence <= p_fence THEN
    UPDATE __P__fenced SET fence = p_fence, value = p_value WHERE k = p_k;
  END IF;
  COMMIT;
  SELECT v_fence <= p_fence;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__fenced_remove
-- ;;
-- Removes p_k's value if p_fence is at least the newest token accepted for
-- p_k, and keeps p_fence as the newest (a row with no value: a removal of
-- a value never written records its token); answers 1 when it did.
CREATE PROCEDURE __P__fenced_remove(IN p_k VARBINARY(2900), IN p_fence BIGINT UNSIGNED)
BEGIN
  DECLARE v_fence BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  INSERT INTO __P__fenced (k, fence, value) VALUES (p_k, p_fence, NULL)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT f.fence INTO v_fence FROM __P__fenced f WHERE f.k = p_k FOR UPDATE;
  IF v_fence <= p_fence THEN
    UPDATE __P__fenced SET fence = p_fence, value = NULL WHERE k = p_k;
  END IF;
  COMMIT;
  SELECT v_fence <= p_fence;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__limit_lock
-- ;;
-- Locks the state row of limiter p_k (creating an empty one, expired at 0,
-- when missing: every limiter operation decides and writes under this
-- lock) and reads it as of p_now, the clock read once the row is ours;
-- p_expires is 0 for a row that is not live. Runs in the caller's
-- transaction.
CREATE PROCEDURE __P__limit_lock(
  IN p_k VARBINARY(2900), OUT p_value BIGINT, OUT p_expires BIGINT, OUT p_now BIGINT)
BEGIN
  INSERT INTO __P__limits (k, value, expires_us) VALUES (p_k, 0, 0)
    ON DUPLICATE KEY UPDATE expires_us = expires_us;
  SELECT l.value, l.expires_us INTO p_value, p_expires
    FROM __P__limits l WHERE l.k = p_k FOR UPDATE;
  SET p_now = __NOW_US__;
  IF p_expires <= p_now THEN
    SET p_expires = 0;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__gcra
-- ;;
-- GCRA: p_t the emission interval, p_tau the tolerance (µs). Answers
-- (allowed, used µs = max(TAT, now) - now after the request, retry µs).
-- With p_peek, the decision the request would get, nothing stored.
CREATE PROCEDURE __P__gcra(
  IN p_k VARBINARY(2900), IN p_t BIGINT, IN p_tau BIGINT, IN p_cost BIGINT, IN p_peek TINYINT)
BEGIN
  DECLARE v_tat, v_expires, v_now, v_new BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__limit_lock(p_k, v_tat, v_expires, v_now);
  IF v_expires = 0 THEN
    SET v_tat = v_now;
  END IF;
  SET v_tat = GREATEST(v_tat, v_now);
  SET v_new = v_tat + p_t * p_cost;
  IF v_now < v_new - p_tau OR p_peek THEN
    -- Nothing written: an empty row this made goes again.
    DELETE FROM __P__limits WHERE k = p_k AND expires_us = 0;
    COMMIT;
    IF v_now < v_new - p_tau THEN
      SELECT 0, v_tat - v_now, v_new - p_tau - v_now;
    ELSE
      SELECT 1, v_new - v_now, 0;
    END IF;
  ELSE
    UPDATE __P__limits SET value = v_new, expires_us = v_new + 1000 WHERE k = p_k;
    COMMIT;
    SELECT 1, v_new - v_now, 0;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__fixed_window
-- ;;
-- Fixed window of p_window_ms; refused requests are not counted. Answers
-- (allowed, used, ms left of the window). With p_peek, nothing is stored.
CREATE PROCEDURE __P__fixed_window(
  IN p_k VARBINARY(2900), IN p_limit BIGINT, IN p_window_ms BIGINT, IN p_cost BIGINT,
  IN p_peek TINYINT)
BEGIN
  DECLARE v_used, v_expires, v_now, v_left BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__limit_lock(p_k, v_used, v_expires, v_now);
  IF v_expires = 0 THEN
    SET v_used = 0, v_expires = v_now + p_window_ms * 1000, v_left = p_window_ms;
  ELSE
    SET v_left = FLOOR((v_expires - v_now) / 1000);
  END IF;
  IF v_used + p_cost > p_limit OR p_peek THEN
    DELETE FROM __P__limits WHERE k = p_k AND expires_us = 0;
    COMMIT;
    IF v_used + p_cost > p_limit THEN
      SELECT 0, v_used, v_left;
    ELSE
      SELECT 1, v_used + p_cost, v_left;
    END IF;
  ELSE
    UPDATE __P__limits SET value = v_used + p_cost, expires_us = v_expires WHERE k = p_k;
    COMMIT;
    SELECT 1, v_used + p_cost, v_left;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__sliding_window
-- ;;
-- Sliding window log over p_window_us: an entry counts while
-- now < at + window. Answers (allowed, used, reset µs, retry µs) as the
-- Redis script does: the retry is when the oldest entries holding the
-- excess expire (never, for a cost above the whole limit: a window), the
-- reset when the newest does. With p_peek, nothing is stored or removed.
CREATE PROCEDURE __P__sliding_window(
  IN p_k VARBINARY(2900), IN p_limit BIGINT, IN p_window_us BIGINT, IN p_cost BIGINT,
  IN p_peek TINYINT)
BEGIN
  DECLARE v_sum, v_expires, v_now, v_freed, v_need, v_retry, v_reset, v_at, v_c BIGINT;
  DECLARE v_done INT DEFAULT 0;
  DECLARE c CURSOR FOR
    SELECT g.at_us, g.cost FROM __P__limit_log g
      WHERE g.k = p_k AND g.at_us > v_now - p_window_us ORDER BY g.at_us, g.id;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  CALL __P__limit_lock(p_k, v_sum, v_expires, v_now);
  IF v_expires = 0 THEN
    -- Idle for a whole window: every entry is over.
    IF NOT p_peek THEN
      DELETE FROM __P__limit_log WHERE k = p_k;
    END IF;
    SET v_sum = 0;
  ELSE
    SELECT COALESCE(SUM(g.cost), 0) INTO v_freed FROM __P__limit_log g
      WHERE g.k = p_k AND g.at_us <= v_now - p_window_us;
    IF NOT p_peek THEN
      DELETE FROM __P__limit_log WHERE k = p_k AND at_us <= v_now - p_window_us;
    END IF;
    SET v_sum = GREATEST(v_sum - v_freed, 0);
  END IF;
  IF v_sum + p_cost > p_limit THEN
    SET v_need = v_sum + p_cost - p_limit, v_retry = p_window_us, v_freed = 0;
    IF v_need <= v_sum THEN
      OPEN c;
      entries: LOOP
        FETCH c INTO v_at, v_c;
        IF v_done = 1 THEN
          LEAVE entries;
        END IF;
        SET v_freed = v_freed + v_c;
        IF v_freed >= v_need THEN
          SET v_retry = v_at + p_window_us - v_now;
          LEAVE entries;
        END IF;
      END LOOP;
      CLOSE c;
    END IF;
    SET v_reset = (SELECT COALESCE(MAX(g.at_us) + p_window_us - v_now, 0)
      FROM __P__limit_log g WHERE g.k = p_k);
    IF p_peek THEN
      DELETE FROM __P__limits WHERE k = p_k AND expires_us = 0;
    ELSE
      UPDATE __P__limits SET value = v_sum WHERE k = p_k;
      DELETE FROM __P__limits WHERE k = p_k AND expires_us = 0;
    END IF;
    COMMIT;
    SELECT 0, v_sum, v_reset, v_retry;
  ELSEIF p_peek THEN
    DELETE FROM __P__limits WHERE k = p_k AND expires_us = 0;
    COMMIT;
    SELECT 1, v_sum + p_cost, p_window_us, 0;
  ELSE
    INSERT INTO __P__limit_log (k, at_us, cost) VALUES (p_k, v_now, p_cost);
    UPDATE __P__limits SET value = v_sum + p_cost,
      expires_us = __NOW_US__ + p_window_us
      WHERE k = p_k;
    COMMIT;
    SELECT 1, v_sum + p_cost, p_window_us, 0;
  END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__rw_hand_out
-- ;;
-- Read-write locks (version 8): many readers or one writer, in tables of
-- their own beside the locks', keyed by the read-write lock's own key (its
-- row in __P__keys serializes them as a lock's does, and draws every
-- hold's fence from one sequence, so a write's is greater than every
-- earlier read's and write's). One queue for readers and writers, first
-- come first served: a hold is taken only when it fits beside the live
-- holders (a read beside readers, a write beside nobody) and nobody live
-- queues ahead, so a reader that arrives while a writer waits queues
-- behind it.
CREATE TABLE IF NOT EXISTS __P__rw_holders (
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  expires_us BIGINT NOT NULL,
  fence BIGINT NOT NULL,
  is_read TINYINT NOT NULL,
  PRIMARY KEY (k, token),
  KEY __P__rw_holders_expiry (expires_us)
) ENGINE=InnoDB
-- ;;
CREATE TABLE IF NOT EXISTS __P__rw_waiters (
  k VARBINARY(2900) NOT NULL,
  token VARBINARY(64) NOT NULL,
  arrival BIGINT NOT NULL,
  deadline_us BIGINT NOT NULL,
  attempt BIGINT NOT NULL,
  channel VARBINARY(2900) NOT NULL,
  is_read TINYINT NOT NULL,
  PRIMARY KEY (k, token),
  KEY __P__rw_waiters_order (k, arrival),
  KEY __P__rw_waiters_deadline (deadline_us)
) ENGINE=InnoDB
-- ;;
-- Hands read-write lock p_k to the head of its queue for as long as it
-- fits: the whole run of readers there while no writer holds it, or the
-- one writer there when nobody does; each handoff written to the mailbox
-- (ids p_first..p_last), as hand_out does for a lock. Stops before p_me (a
-- waiter asking for itself). Runs in the caller's transaction, which holds
-- the key's row, after expired holders were removed.
CREATE PROCEDURE __P__rw_hand_out(
  IN p_k VARBINARY(2900), IN p_me VARBINARY(64), IN p_now BIGINT,
  INOUT p_first BIGINT, INOUT p_last BIGINT)
BEGIN
  DECLARE v_token VARBINARY(64);
  DECLARE v_deadline BIGINT;
  DECLARE v_attempt BIGINT;
  DECLARE v_channel VARBINARY(2900);
  DECLARE v_reads TINYINT;
  DECLARE v_fence BIGINT;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_token = NULL;
  hand: LOOP
    SET v_token = NULL;
    SELECT w.token, w.deadline_us, w.attempt, w.channel, w.is_read
      INTO v_token, v_deadline, v_attempt, v_channel, v_reads
      FROM __P__rw_waiters w WHERE w.k = p_k ORDER BY w.arrival LIMIT 1;
    IF v_token IS NULL THEN
      LEAVE hand;
    END IF;
    IF v_deadline <= p_now THEN
      DELETE FROM __P__rw_waiters WHERE k = p_k AND token = v_token;
      ITERATE hand;
    END IF;
    IF v_token = p_me OR EXISTS (
        SELECT 1 FROM __P__rw_holders h
          WHERE h.k = p_k AND NOT (h.is_read = 1 AND v_reads = 1)) THEN
      LEAVE hand;
    END IF;
    SELECT GREATEST(fence, __NOW_US__) + 1
      INTO v_fence FROM __P__keys WHERE k = p_k;
    UPDATE __P__keys SET fence = v_fence WHERE k = p_k;
    DELETE FROM __P__rw_waiters WHERE k = p_k AND token = v_token;
    INSERT INTO __P__rw_holders (k, token, expires_us, fence, is_read)
      VALUES (p_k, v_token, GREATEST(v_deadline, p_now + 50000), v_fence, v_reads)
      ON DUPLICATE KEY UPDATE expires_us = VALUES(expires_us), fence = VALUES(fence),
        is_read = VALUES(is_read);
    INSERT INTO __P__handoffs (channel, token, fence, attempt, at_us)
      VALUES (v_channel, v_token, v_fence, v_attempt, p_now);
    SET p_last = LAST_INSERT_ID();
    IF p_first IS NULL THEN
      SET p_first = p_last;
    END IF;
  END LOOP;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__rw_acquire
-- ;;
-- One attempt at a read (p_reads = 1) or write hold of read-write lock
-- p_k, as acquire is for a lock: claims a hold handed to p_token (with
-- p_lease_ms, keeping the fence announced); takes one that fits when
-- nobody live queues ahead, after handing the lock to the head of the
-- queue as far as it fits (an ended lease frees it here), and then, a
-- read, to the readers queued behind it too; otherwise, with a p_wait_ms,
-- joins the queue (or keeps its place) until p_wait_ms from now. Answers
-- (1, fence) when taken, (0, ms until the writer's lease ends, or the
-- first reader's) when not.
CREATE PROCEDURE __P__rw_acquire(
  IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_lease_ms BIGINT, IN p_reads TINYINT,
  IN p_wait_ms BIGINT, IN p_channel VARBINARY(2900), IN p_attempt BIGINT)
proc: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_exp BIGINT;
  DECLARE v_fence BIGINT;
  DECLARE v_head VARBINARY(64);
  DECLARE v_first BIGINT DEFAULT NULL;
  DECLARE v_last BIGINT DEFAULT NULL;
  DECLARE v_n BIGINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_exp = NULL;
  START TRANSACTION;
  INSERT INTO __P__keys (k, fence, arrivals) VALUES (p_k, 0, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SET v_now = __NOW_US__;
  SELECT h.expires_us, h.fence INTO v_exp, v_n
    FROM __P__rw_holders h WHERE h.k = p_k AND h.token = p_token AND h.is_read = p_reads;
  IF v_exp IS NOT NULL AND v_exp > v_now THEN
    UPDATE __P__rw_holders SET expires_us = v_now + p_lease_ms * 1000
      WHERE k = p_k AND token = p_token;
    COMMIT;
    SELECT 1, v_n;
    LEAVE proc;
  END IF;
  -- `+ 0` keeps the expiry index out (see acquire).
  DELETE FROM __P__rw_holders WHERE k = p_k AND expires_us + 0 <= v_now;
  CALL __P__rw_hand_out(p_k, p_token, v_now, v_first, v_last);
  SET v_head = (SELECT w.token FROM __P__rw_waiters w
                  WHERE w.k = p_k AND w.deadline_us > v_now ORDER BY w.arrival LIMIT 1);
  IF (v_head IS NULL OR v_head = p_token) AND NOT EXISTS (
      SELECT 1 FROM __P__rw_holders h
        WHERE h.k = p_k AND NOT (h.is_read = 1 AND p_reads = 1)) THEN
    DELETE FROM __P__rw_waiters WHERE k = p_k AND token = p_token;
    SELECT GREATEST(fence, __NOW_US__) + 1
      INTO v_fence FROM __P__keys WHERE k = p_k;
    UPDATE __P__keys SET fence = v_fence WHERE k = p_k;
    INSERT INTO __P__rw_holders (k, token, expires_us, fence, is_read)
      VALUES (p_k, p_token, v_now + p_lease_ms * 1000, v_fence, p_reads)
      ON DUPLICATE KEY UPDATE expires_us = VALUES(expires_us), fence = VALUES(fence),
        is_read = VALUES(is_read);
    IF p_reads = 1 THEN
      -- The readers queued right behind this one come in with it.
      CALL __P__rw_hand_out(p_k, NULL, v_now, v_first, v_last);
    END IF;
    COMMIT;
    IF v_first IS NOT NULL THEN
      CALL __P__ring(v_first, v_last);
    END IF;
    SELECT 1, v_fence;
    LEAVE proc;
  END IF;
  IF p_wait_ms IS NOT NULL THEN
    UPDATE __P__keys SET arrivals = arrivals + 1 WHERE k = p_k;
    INSERT INTO __P__rw_waiters (k, token, arrival, deadline_us, attempt, channel, is_read)
      SELECT p_k, p_token, arrivals, v_now + p_wait_ms * 1000, p_attempt, p_channel, p_reads
        FROM __P__keys WHERE k = p_k
      ON DUPLICATE KEY UPDATE deadline_us = VALUES(deadline_us), attempt = VALUES(attempt),
        channel = VALUES(channel), is_read = VALUES(is_read);
  END IF;
  SET v_n = (SELECT CEIL((COALESCE(MAX(IF(h.is_read = 0, h.expires_us, NULL)),
                                   MIN(h.expires_us)) - v_now) / 1000)
               FROM __P__rw_holders h WHERE h.k = p_k);
  COMMIT;
  IF v_first IS NOT NULL THEN
    CALL __P__ring(v_first, v_last);
  END IF;
  SELECT 0, v_n;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__rw_release
-- ;;
-- Gives p_token's hold of read-write lock p_k up (and its place in the
-- queue), handing the lock to the head of the queue as far as it fits in
-- the same transaction (a waiter that leaves the head may free the
-- readers behind it), and rings their bells once it committed. Answers 1
-- when the hold was still held.
CREATE PROCEDURE __P__rw_release(IN p_k VARBINARY(2900), IN p_token VARBINARY(64))
proc: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_ends BIGINT;
  DECLARE v_first BIGINT DEFAULT NULL;
  DECLARE v_last BIGINT DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  INSERT INTO __P__keys (k, fence, arrivals) VALUES (p_k, 0, 0)
    ON DUPLICATE KEY UPDATE fence = fence;
  SET v_now = __NOW_US__;
  DELETE FROM __P__rw_waiters WHERE k = p_k AND token = p_token;
  SET v_ends = (SELECT expires_us FROM __P__rw_holders WHERE k = p_k AND token = p_token);
  DELETE FROM __P__rw_holders WHERE k = p_k AND token = p_token;
  DELETE FROM __P__rw_holders WHERE k = p_k AND expires_us + 0 <= v_now;
  CALL __P__rw_hand_out(p_k, NULL, v_now, v_first, v_last);
  COMMIT;
  IF v_first IS NOT NULL THEN
    CALL __P__ring(v_first, v_last);
  END IF;
  SELECT COALESCE(v_ends > v_now, 0);
END
-- ;;
DROP PROCEDURE IF EXISTS __P__rw_extend
-- ;;
-- Resets p_token's read-write hold to p_lease_ms from now, if it still
-- holds it. One statement (autocommit), under the holder row's lock alone.
CREATE PROCEDURE __P__rw_extend(IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_lease_ms BIGINT)
BEGIN
  DECLARE v_now BIGINT;
  SET v_now = __NOW_US__;
  UPDATE __P__rw_holders SET expires_us = v_now + p_lease_ms * 1000
    WHERE k = p_k AND token = p_token AND expires_us > v_now;
  SELECT ROW_COUNT() > 0;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__sweep
-- ;;
-- Removes state that no longer matters: leases and queue places (of locks
-- and read-write locks) a minute over, mailbox rows nobody read within a minute, bells not renewed within
-- five, expired counters, limiter state and mark sets, marks of old
-- generations, and key
-- rows whose token the clock passed a minute ago (the next
-- token is drawn above the clock anyway) with nobody holding or waiting.
-- Each statement on its own (autocommit): rows are rechecked as they are
-- deleted, so state an operation just renewed stays.
CREATE PROCEDURE __P__sweep()
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_total BIGINT DEFAULT 0;
  SET v_now = __NOW_US__;
  DELETE FROM __P__holders WHERE expires_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__waiters WHERE deadline_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__handoffs WHERE at_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__bells WHERE at_us < v_now - 300000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__limits WHERE expires_us < v_now;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__limit_log WHERE NOT EXISTS (
    SELECT 1 FROM __P__limits l WHERE l.k = __P__limit_log.k);
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__counters WHERE expires_us < v_now;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__mark_sets WHERE expires_us < v_now;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__marks WHERE NOT EXISTS (
    SELECT 1 FROM __P__mark_sets s WHERE s.k = __P__marks.k AND s.generation = __P__marks.generation);
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__rw_holders WHERE expires_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__rw_waiters WHERE deadline_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  -- Lock keys (locks.sql) neither held nor leased for a minute: the clock
  -- is past their fencing token, so a new row's tokens stay greater.
  DELETE FROM __P__lock_fences
   WHERE at_us < v_now - 60000000 AND COALESCE(expires_us, 0) < v_now - 60000000
     AND IS_FREE_LOCK(CONCAT('lockguard ', HEX(h))) = 1;
  SET v_total = v_total + ROW_COUNT();
  -- Kept locks a minute past their kept time.
  DELETE FROM __P__lock_kept WHERE until_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  -- Names of keys a session lease held, a day after.
  DELETE FROM __P__lock_names WHERE seen_us < v_now - 86400000000;
  SET v_total = v_total + ROW_COUNT();
  -- Waits whose sessions ended.
  DELETE FROM __P__lock_waits
   WHERE since_us < v_now - 1000000
     AND conn NOT IN (SELECT p.ID FROM information_schema.PROCESSLIST p);
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__keys WHERE fence < v_now - 60000000
    AND NOT EXISTS (SELECT 1 FROM __P__holders h WHERE h.k = __P__keys.k)
    AND NOT EXISTS (SELECT 1 FROM __P__waiters w WHERE w.k = __P__keys.k)
    AND NOT EXISTS (SELECT 1 FROM __P__rw_holders h WHERE h.k = __P__keys.k)
    AND NOT EXISTS (SELECT 1 FROM __P__rw_waiters w WHERE w.k = __P__keys.k);
  SET v_total = v_total + ROW_COUNT();
  SELECT v_total;
END
