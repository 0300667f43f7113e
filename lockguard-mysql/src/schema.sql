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
-- that lock, never a client's clock. Connections run in UTC (time_zone
-- '+00:00', so UNIX_TIMESTAMP reads no daylight-saving shift) and READ
-- COMMITTED, set by lockguard when it opens them.
--
-- Handoffs are written to a mailbox (__P__handoffs) in the transaction that
-- makes them; after it commits, the releaser rings the waiter's client:
-- `KILL QUERY` on the client's bell connection, which sleeps in a query
-- that names it (see bell.rs). A bell that cannot be rung leaves the waiter
-- to its timed refresh, which claims the lock as well.

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
-- Each client's bell: the connection to ring (KILL QUERY) when a lock was
-- handed to one of its waiters, and whether it was rung since it last read
-- its mailbox. Renewed by the bell every minute.
CREATE TABLE IF NOT EXISTS __P__bells (
  channel VARBINARY(2900) NOT NULL PRIMARY KEY,
  conn BIGINT UNSIGNED NOT NULL,
  at_us BIGINT NOT NULL,
  rung TINYINT NOT NULL DEFAULT 0,
  KEY __P__bells_age (at_us)
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
    SELECT GREATEST(fence, CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)) + 1
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
-- p_first..p_last address: KILL QUERY on each bell connection, checked
-- first to be that client's bell, asleep in the query naming its channel
-- (connection ids start again after a server restart: a stale row must not
-- interrupt someone else's statement). Runs after the handoffs committed,
-- so a woken bell finds them. A bell that cannot be rung (gone, or another
-- user's connection, invisible and unkillable without the PROCESS and
-- CONNECTION ADMIN privileges) is skipped: its waiter's refresh claims the
-- lock instead. Rows of other handoffs in the range only ring their bells
-- once more.
--
-- A bell rung and not yet read is not rung again (`rung`, reset by the bell
-- as it reads its mailbox): it will read the handoffs made meanwhile
-- anyway. And MariaDB's KILL of a thread in SLEEP() can stall for up to a
-- second when another KILL of the same thread races it (the killer retries
-- a mutex the woken sleeper holds), so two must not overlap.
CREATE PROCEDURE __P__ring(IN p_first BIGINT, IN p_last BIGINT)
BEGIN
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_channel VARBINARY(2900);
  DECLARE v_conn BIGINT UNSIGNED;
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
    SET v_conn = IF(ROW_COUNT() = 0, NULL, (
      SELECT b.conn FROM __P__bells b
        JOIN information_schema.PROCESSLIST p ON p.ID = b.conn
        WHERE b.channel = v_channel
          AND LOCATE(CONCAT('lockguard bell ', HEX(v_channel)), p.INFO) > 0
        LIMIT 1));
    IF v_conn IS NOT NULL THEN
      KILL QUERY v_conn;
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
  SET v_now = CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);
  SELECT h.expires_us, h.fence INTO v_exp, v_n
    FROM __P__holders h WHERE h.k = p_k AND h.token = p_token;
  IF v_exp IS NOT NULL AND v_exp > v_now THEN
    UPDATE __P__holders SET expires_us = v_now + p_lease_ms * 1000
      WHERE k = p_k AND token = p_token;
    COMMIT;
    SELECT 1, v_n;
    LEAVE proc;
  END IF;
  DELETE FROM __P__holders WHERE k = p_k AND expires_us <= v_now;
  SET v_free = p_permits - (SELECT COUNT(*) FROM __P__holders WHERE k = p_k);
  IF v_free > 0 THEN
    CALL __P__hand_out(p_k, p_token, v_now, v_free, v_first, v_last);
  END IF;
  IF v_free > 0 THEN
    DELETE FROM __P__waiters WHERE k = p_k AND token = p_token;
    SELECT GREATEST(fence, CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)) + 1
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
  SET v_now = CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);
  DELETE FROM __P__waiters WHERE k = p_k AND token = p_token;
  SET v_ends = (SELECT expires_us FROM __P__holders WHERE k = p_k AND token = p_token);
  IF v_ends IS NULL THEN
    COMMIT;
    SELECT 0;
    LEAVE proc;
  END IF;
  DELETE FROM __P__holders WHERE k = p_k AND token = p_token;
  DELETE FROM __P__holders WHERE k = p_k AND expires_us <= v_now;
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
-- marks the bell ready to be rung again: what a bell does when rung. Both
-- reads lock what they read, so they see only
-- committed handoffs (the bell's session reads uncommitted rows
-- otherwise: see bell.rs) and wait for one being committed.
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
DROP PROCEDURE IF EXISTS __P__extend
-- ;;
-- Resets p_token's lease to p_lease_ms from now, if it still holds it.
-- One statement (autocommit), under the holder row's lock alone.
CREATE PROCEDURE __P__extend(IN p_k VARBINARY(2900), IN p_token VARBINARY(64), IN p_lease_ms BIGINT)
BEGIN
  DECLARE v_now BIGINT;
  SET v_now = CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);
  UPDATE __P__holders SET expires_us = v_now + p_lease_ms * 1000
    WHERE k = p_k AND token = p_token AND expires_us > v_now;
  SELECT ROW_COUNT() > 0;
END
-- ;;
DROP PROCEDURE IF EXISTS __P__sweep
-- ;;
-- Removes state that no longer matters: leases and queue places a minute
-- over, mailbox rows nobody read within a minute, bells not renewed within
-- five, and key rows whose token the clock passed a minute ago (the next
-- token is drawn above the clock anyway) with nobody holding or waiting.
-- Each statement on its own (autocommit): rows are rechecked as they are
-- deleted, so state an operation just renewed stays.
CREATE PROCEDURE __P__sweep()
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_total BIGINT DEFAULT 0;
  SET v_now = CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);
  DELETE FROM __P__holders WHERE expires_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__waiters WHERE deadline_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__handoffs WHERE at_us < v_now - 60000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__bells WHERE at_us < v_now - 300000000;
  SET v_total = v_total + ROW_COUNT();
  DELETE FROM __P__keys WHERE fence < v_now - 60000000
    AND NOT EXISTS (SELECT 1 FROM __P__holders h WHERE h.k = __P__keys.k)
    AND NOT EXISTS (SELECT 1 FROM __P__waiters w WHERE w.k = __P__keys.k);
  SET v_total = v_total + ROW_COUNT();
  SELECT v_total;
END
