-- lockguard's tables and functions, all in one schema (`lockguard` unless
-- configured; `__SCHEMA__` below). Created by lockguard on first connect
-- (or by hand, from this file, with the schema name substituted), under an
-- advisory lock so that clients starting together create it once. Nothing
-- here ever drops a table.
--
-- Every operation is one statement (a function call), so one round trip and
-- one transaction. Operations on one key are serialized by a transaction
-- advisory lock on the key's hash, taken first: like a Redis script, each
-- sees the key as the previous one left it. And a row whose value decides a
-- write is locked (FOR UPDATE), or checked in the writing statement itself,
-- before it is trusted: no writer that skips the key's lock (the sweep, a
-- counter's increment, which is one upsert ordered by the row's lock
-- alone) can change it between the check and the write. Time is the
-- database's: clock_timestamp() read after those locks, never a client's
-- clock.
--
-- Every function runs with bitmap scans off (version 5). A lock cycle
-- inserts a holder row under a new token and deletes it, so a key's range
-- of an index gains an entry per cycle that stays until a vacuum. A plain
-- index scan marks the entries of dead rows as it passes them, and later
-- scans skip them; a bitmap scan, which the planner picks for a key it
-- expects a few rows of, never does, so every scan of a hot key walked
-- every dead entry since the last vacuum (one key cycled by one client:
-- 1,364 cycles/s in its first 2 s, 576/s in its fourth, against 2,226 to
-- 2,317/s with the scans plain).

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- Never over a newer schema: this file would put back older functions
-- under the clients that need the newer ones. (`__VERSION__` is this
-- file's version; a client that meets LG002 reads the schema's version
-- again and decides whether it may use it.)
DO $$
DECLARE
  v_version integer;
BEGIN
  IF to_regclass('__SCHEMA__.meta') IS NOT NULL THEN
    EXECUTE 'SELECT max(version) FROM __SCHEMA__.meta' INTO v_version;
    IF v_version > __VERSION__ THEN
      RAISE EXCEPTION 'lockguard''s schema __SCHEMA__ is version %, newer than this migration (version __VERSION__); nothing was changed', v_version
        USING ERRCODE = 'LG002';
    END IF;
  END IF;
END
$$;

-- The schema's version (one row), and the oldest version of lockguard's
-- clients that may use it: a newer schema keeps every function an older
-- one had, with its signature and meaning, so clients of any version from
-- compatible_since on keep working on it (NULL, in schemas before version
-- 4, which had no such column: only clients of that very version).
CREATE TABLE IF NOT EXISTS __SCHEMA__.meta (
  version integer NOT NULL
);
ALTER TABLE __SCHEMA__.meta ADD COLUMN IF NOT EXISTS compatible_since integer;

-- Holders of locks and semaphore permits: one row per holder, until its
-- lease ends. A lock is a semaphore of one permit.
CREATE TABLE IF NOT EXISTS __SCHEMA__.holders (
  key text NOT NULL,
  token text NOT NULL,
  expires_at timestamptz NOT NULL,
  fence bigint NOT NULL,
  PRIMARY KEY (key, token)
);
CREATE INDEX IF NOT EXISTS holders_expiry ON __SCHEMA__.holders (expires_at);
-- Version 4: a reader of a read-write lock (which shares it with the other
-- readers) rather than its writer, or a lock's holder or a semaphore's.
-- Added with a default, so the rows of earlier versions mean what they
-- meant.
ALTER TABLE __SCHEMA__.holders ADD COLUMN IF NOT EXISTS reads boolean NOT NULL DEFAULT false;

-- The wait queue of each lock or semaphore, first come first served
-- (arrival). A waiter's place is kept until its deadline, which each of its
-- attempts moves on; a release hands the lock to the first live waiter and
-- rings its client's bell alone (see ring).
CREATE TABLE IF NOT EXISTS __SCHEMA__.waiters (
  key text NOT NULL,
  token text NOT NULL,
  arrival bigint NOT NULL,
  deadline timestamptz NOT NULL,
  attempt bigint NOT NULL,
  channel text NOT NULL,
  PRIMARY KEY (key, token)
);
CREATE INDEX IF NOT EXISTS waiters_order ON __SCHEMA__.waiters (key, arrival);
CREATE INDEX IF NOT EXISTS waiters_deadline ON __SCHEMA__.waiters (deadline);
-- Version 4: a waiter to read a read-write lock (see holders.reads); one
-- queue for readers and writers.
ALTER TABLE __SCHEMA__.waiters ADD COLUMN IF NOT EXISTS reads boolean NOT NULL DEFAULT false;

-- The bell of each client that waits: the backend that waits, in a lock
-- wait, for a handoff to one of the client's waiters (pid, and its start,
-- so that a pid the server gave to another backend since is never
-- signalled), the role it runs as, and when it last said it lives (rows
-- of clients gone are swept after five minutes).
CREATE TABLE IF NOT EXISTS __SCHEMA__.bells (
  channel text PRIMARY KEY,
  pid integer NOT NULL,
  started timestamptz NOT NULL,
  role oid NOT NULL,
  at timestamptz NOT NULL
);

-- Handoffs to a client's waiters not yet read by its bell: the release
-- writes one before it rings the bell; the bell reads and removes them.
CREATE TABLE IF NOT EXISTS __SCHEMA__.mail (
  channel text NOT NULL,
  key text NOT NULL,
  token text NOT NULL,
  fence bigint NOT NULL,
  attempt bigint NOT NULL,
  at timestamptz NOT NULL,
  PRIMARY KEY (channel, key, token)
);

-- Fencing tokens, counter versions and mark generations are drawn as on
-- Redis (sequence.lua): each is greater than the key's last one and than
-- the database's clock in µs (next_after). So they strictly increase per
-- key across a failover to a standby that had not seen the latest ones
-- (sequences and rows went back; the clock did not), and across a step back
-- of the clock (the key's row remembers), though not both at once. The
-- newest token of each lock or semaphore; a row is swept a minute after the
-- clock passed it, when it no longer adds anything to the clock.
CREATE TABLE IF NOT EXISTS __SCHEMA__.latest_fences (
  key text PRIMARY KEY,
  fence bigint NOT NULL
);
-- Version 1 drew tokens from this sequence, which a standby can hold behind
-- the primary (sequences are logged 32 values ahead, and replicated
-- asynchronously); kept, never drawn from.
CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.fences;
CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.arrivals;

-- Counters: value and version (the optimistic lock's version column).
CREATE TABLE IF NOT EXISTS __SCHEMA__.counters (
  key text PRIMARY KEY,
  value bigint NOT NULL,
  version bigint NOT NULL,
  expires_at timestamptz
);
CREATE INDEX IF NOT EXISTS counters_expiry ON __SCHEMA__.counters (expires_at);

-- Once-per-member marks: a set (its generation and expiry) and its members.
-- A member counts when it carries the set's current generation; a set that
-- expired starts a new generation, and the old members are swept later.
CREATE TABLE IF NOT EXISTS __SCHEMA__.mark_sets (
  key text PRIMARY KEY,
  generation bigint NOT NULL,
  expires_at timestamptz
);
CREATE INDEX IF NOT EXISTS mark_sets_expiry ON __SCHEMA__.mark_sets (expires_at);
CREATE TABLE IF NOT EXISTS __SCHEMA__.marks (
  key text NOT NULL,
  member text NOT NULL,
  generation bigint NOT NULL,
  PRIMARY KEY (key, member)
);

-- Rate limiters: GCRA's theoretical arrival time (µs), a fixed window's
-- count, or a sliding log's running sum, until the state no longer matters.
CREATE TABLE IF NOT EXISTS __SCHEMA__.limits (
  key text PRIMARY KEY,
  value bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS limits_expiry ON __SCHEMA__.limits (expires_at);
-- The sliding window's log of admitted requests (time in µs and cost).
CREATE TABLE IF NOT EXISTS __SCHEMA__.limit_log (
  id bigserial PRIMARY KEY,
  key text NOT NULL,
  at bigint NOT NULL,
  cost bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS limit_log_order ON __SCHEMA__.limit_log (key, at, id);

-- Fenced values: the newest token accepted, exact at any size, and the
-- value it wrote; NULL once removed (version 7): the row stays, with the
-- token of the removal, so that older tokens stay refused. Clients before
-- version 7 never remove; one of them that reads a removed value fails
-- rather than taking it for a value.
CREATE TABLE IF NOT EXISTS __SCHEMA__.fenced (
  key text PRIMARY KEY,
  fence numeric(20, 0) NOT NULL,
  value bytea
);
ALTER TABLE __SCHEMA__.fenced ALTER COLUMN value DROP NOT NULL;

-- The database's time in µs.
CREATE OR REPLACE FUNCTION __SCHEMA__.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- The value after p_last (NULL: none) of a key's sequence: greater than it
-- and than the database's clock in µs, as Redis's seq_next does with its
-- clock. (Redis counts whole ms so that Redlock nodes agree; one database
-- needs no agreement, and every µs is headroom: a key would have to draw
-- more than a value per µs, a committed transaction each, to run ahead of
-- the clock.)
CREATE OR REPLACE FUNCTION __SCHEMA__.next_after(p_last bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT greatest(coalesce(p_last, 0), __SCHEMA__.now_us()) + 1
$$;

-- The next fencing token of lock or semaphore p_key, drawn under the row
-- lock of the key's latest token (the clock is read after it).
CREATE OR REPLACE FUNCTION __SCHEMA__.next_fence(p_key text) RETURNS bigint
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_fence bigint;
BEGIN
  INSERT INTO __SCHEMA__.latest_fences AS f (key, fence)
    VALUES (p_key, __SCHEMA__.next_after(NULL))
    ON CONFLICT (key) DO UPDATE SET fence = __SCHEMA__.next_after(f.fence)
    RETURNING f.fence INTO v_fence;
  RETURN v_fence;
END
$$;

-- Serializes the operations on one key until the end of the transaction.
-- Only under read committed does each statement after it see the commits
-- of the operations it waited for; under repeatable read or serializable
-- the snapshot predates the lock, and two holders could both find the key
-- free. So anything else is refused.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_key(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET enable_bitmapscan = off AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'lockguard needs read committed isolation; this session runs %',
      current_setting('transaction_isolation') USING ERRCODE = 'feature_not_supported';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 7164));
END
$$;

-- Tells the client of channel p_channel that p_key was handed to its
-- waiter p_token (with fence p_fence, for its attempt p_attempt): a letter
-- in its mail, and a ring of its bell, a cancel of the bell's wait
-- (pg_cancel_backend), which signals that one backend; NOTIFY would signal
-- every listening backend of the database. The ring comes before this
-- transaction commits: the bell reads its mail under the channel's
-- advisory lock, which waits for this transaction (it holds the lock
-- shared), so it never reads before the letter is there. The letter is
-- written whether or not the client's bell is there (version 6): a bell
-- that starts later, or comes back, reads it first thing (its waiter may
-- have queued before its bell listened). A client without a bell, or a
-- bell another role's backend may not signal, is not rung: its bell reads
-- the letter when it next looks, or the waiter's timed attempt claims the
-- handoff; letters nobody reads are swept after a minute.
CREATE OR REPLACE FUNCTION __SCHEMA__.ring(
  p_channel text, p_key text, p_token text, p_fence bigint, p_attempt bigint)
RETURNS void LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_bell __SCHEMA__.bells%ROWTYPE;
BEGIN
  -- (The channel's lock lives in the two-key space of advisory locks,
  -- apart from the keys' locks.)
  PERFORM pg_advisory_xact_lock_shared(7165, hashtext(p_channel));
  INSERT INTO __SCHEMA__.mail AS m (channel, key, token, fence, attempt, at)
    VALUES (p_channel, p_key, p_token, p_fence, p_attempt, clock_timestamp())
    ON CONFLICT (channel, key, token) DO UPDATE
      SET fence = EXCLUDED.fence, attempt = EXCLUDED.attempt, at = EXCLUDED.at;
  SELECT * INTO v_bell FROM __SCHEMA__.bells b WHERE b.channel = p_channel;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  -- The backend of that pid is the bell only if it started when the bell
  -- did (a pid is given again to a later backend).
  PERFORM FROM pg_stat_get_activity(v_bell.pid) a WHERE a.backend_start = v_bell.started;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF v_bell.role = current_user::regrole::oid THEN
    PERFORM pg_cancel_backend(v_bell.pid);
  ELSE
    -- Another role's backend: signalled if this role may (a member of it,
    -- or of pg_signal_backend); the subtransaction only then.
    BEGIN
      PERFORM pg_cancel_backend(v_bell.pid);
    EXCEPTION WHEN insufficient_privilege THEN
      NULL;
    END;
  END IF;
END
$$;

-- Records (or renews) the calling backend as the bell of channel p_channel.
CREATE OR REPLACE FUNCTION __SCHEMA__.bell_register(p_channel text)
RETURNS void LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
BEGIN
  INSERT INTO __SCHEMA__.bells AS b (channel, pid, started, role, at)
    SELECT p_channel, a.pid, a.backend_start, a.usesysid, clock_timestamp()
      FROM pg_stat_get_activity(pg_backend_pid()) a
    ON CONFLICT (channel) DO UPDATE
      SET pid = EXCLUDED.pid, started = EXCLUDED.started, role = EXCLUDED.role, at = EXCLUDED.at;
END
$$;

-- The statement a bell runs before it waits, in the wait's transaction:
-- waits for the transactions that rang it and have not ended (their
-- advisory lock, taken and given back at once: held, it would hold the
-- ringers back for the whole wait), then raises LG001 when mail is there,
-- so that the bell reads it rather than wait. With the ring's order, no
-- handoff is missed: a ring that comes while the bell is between
-- statements (and does nothing) comes after its letter was written by a
-- transaction this check waits for.
CREATE OR REPLACE FUNCTION __SCHEMA__.bell_check(p_channel text)
RETURNS void LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
BEGIN
  PERFORM pg_advisory_lock(7165, hashtext(p_channel));
  PERFORM pg_advisory_unlock(7165, hashtext(p_channel));
  PERFORM FROM __SCHEMA__.mail m WHERE m.channel = p_channel;
  IF FOUND THEN
    RAISE EXCEPTION 'a handoff waits in the mail of %', p_channel USING ERRCODE = 'LG001';
  END IF;
END
$$;

-- Reads and removes the mail of channel p_channel, once the transactions
-- that rang the bell have ended. First gives back the channel's lock
-- should a ring have cut bell_check off while it held it.
CREATE OR REPLACE FUNCTION __SCHEMA__.bell_drain(
  p_channel text, OUT token text, OUT fence bigint, OUT attempt bigint)
RETURNS SETOF record LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
BEGIN
  PERFORM pg_advisory_unlock_all();
  PERFORM pg_advisory_xact_lock(7165, hashtext(p_channel));
  RETURN QUERY DELETE FROM __SCHEMA__.mail m WHERE m.channel = p_channel
    RETURNING m.token, m.fence, m.attempt;
END
$$;

-- The first live waiter of p_key's queue (a row of NULLs when there is
-- none); waiters silent past their deadline are dropped as they reach the
-- head.
CREATE OR REPLACE FUNCTION __SCHEMA__.queue_head(p_key text, p_now timestamptz)
RETURNS __SCHEMA__.waiters LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_first __SCHEMA__.waiters%ROWTYPE;
BEGIN
  LOOP
    SELECT * INTO v_first FROM __SCHEMA__.waiters w
      WHERE w.key = p_key ORDER BY w.arrival LIMIT 1;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    EXIT WHEN v_first.deadline > p_now;
    -- Silent past its deadline: dropped when it reaches the head.
    DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = v_first.token;
  END LOOP;
  RETURN v_first;
END
$$;

-- Hands the lock, permit or read-write hold (p_waiter.reads) p_waiter
-- waits for to it, with a fencing token of the key's, and tells it alone
-- (ring). A hold handed on is reserved for its waiter until its place
-- would have lapsed (a dead waiter costs the queue at most its timeout),
-- never less than 50 ms.
CREATE OR REPLACE FUNCTION __SCHEMA__.hand_to(p_waiter __SCHEMA__.waiters, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_fence bigint := __SCHEMA__.next_fence(p_waiter.key);
BEGIN
  DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_waiter.key AND w.token = p_waiter.token;
  INSERT INTO __SCHEMA__.holders AS h (key, token, expires_at, fence, reads)
    VALUES (p_waiter.key, p_waiter.token,
            greatest(p_waiter.deadline, p_now + interval '50 milliseconds'), v_fence, p_waiter.reads)
    ON CONFLICT (key, token) DO UPDATE
      SET expires_at = EXCLUDED.expires_at, fence = EXCLUDED.fence, reads = EXCLUDED.reads;
  PERFORM __SCHEMA__.ring(p_waiter.channel, p_waiter.key, p_waiter.token, v_fence, p_waiter.attempt);
END
$$;

-- Hands up to p_free free permits (a free lock) to the first live waiters
-- (hand_to), stopping before p_me (a waiter asking for itself). Returns
-- the permits left.
CREATE OR REPLACE FUNCTION __SCHEMA__.hand_out(p_key text, p_free integer, p_me text, p_now timestamptz)
RETURNS integer LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_first __SCHEMA__.waiters%ROWTYPE;
BEGIN
  WHILE p_free > 0 LOOP
    v_first := __SCHEMA__.queue_head(p_key, p_now);
    EXIT WHEN v_first.token IS NULL OR v_first.token = p_me;
    PERFORM __SCHEMA__.hand_to(v_first, p_now);
    p_free := p_free - 1;
  END LOOP;
  RETURN p_free;
END
$$;

-- One attempt to take a semaphore permit (version 8; a lock, p_permits = 1,
-- before it, when this was `acquire`): takes
-- it when free and nobody live queues ahead; claims one a release handed to
-- p_token (with p_lease_ms, keeping the fence announced); otherwise, with a
-- p_wait_ms, joins the queue (or keeps its place) until p_wait_ms from now.
-- Returns (true, fence) when taken, (false, ms until the first lease ends).
CREATE OR REPLACE FUNCTION __SCHEMA__.permit_acquire(
  p_key text, p_token text, p_lease_ms bigint, p_permits integer,
  p_wait_ms bigint, p_channel text, p_attempt bigint,
  OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_mine __SCHEMA__.holders%ROWTYPE;
  v_free integer;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  SELECT * INTO v_mine FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.token = p_token;
  IF FOUND AND v_mine.expires_at > v_now THEN
    UPDATE __SCHEMA__.holders h SET expires_at = v_now + p_lease_ms * interval '1 millisecond'
      WHERE h.key = p_key AND h.token = p_token;
    acquired := true;
    n := v_mine.fence;
    RETURN;
  END IF;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at <= v_now;
  SELECT p_permits - count(*) INTO v_free FROM __SCHEMA__.holders h WHERE h.key = p_key;
  IF v_free > 0 THEN
    v_free := __SCHEMA__.hand_out(p_key, v_free, p_token, v_now);
  END IF;
  IF v_free > 0 THEN
    DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = p_token;
    INSERT INTO __SCHEMA__.holders (key, token, expires_at, fence)
      VALUES (p_key, p_token, v_now + p_lease_ms * interval '1 millisecond', __SCHEMA__.next_fence(p_key))
      RETURNING fence INTO n;
    acquired := true;
    RETURN;
  END IF;
  IF p_wait_ms IS NOT NULL THEN
    INSERT INTO __SCHEMA__.waiters AS w (key, token, arrival, deadline, attempt, channel)
      VALUES (p_key, p_token, nextval('__SCHEMA__.arrivals'),
              v_now + p_wait_ms * interval '1 millisecond', p_attempt, p_channel)
      ON CONFLICT (key, token) DO UPDATE
        SET deadline = EXCLUDED.deadline, attempt = EXCLUDED.attempt, channel = EXCLUDED.channel;
  END IF;
  acquired := false;
  SELECT ceil(extract(epoch FROM min(h.expires_at) - v_now) * 1000)::bigint INTO n
    FROM __SCHEMA__.holders h WHERE h.key = p_key;
END
$$;

-- Gives p_token's lock or permit up (and its place in the queue), handing
-- the free permits to the first live waiters in the same step. True when
-- it was still held.
CREATE OR REPLACE FUNCTION __SCHEMA__.release(p_key text, p_token text, p_permits integer)
RETURNS boolean LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_ends timestamptz;
  v_free integer;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = p_token;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.token = p_token
    RETURNING h.expires_at INTO v_ends;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at <= v_now;
  SELECT p_permits - count(*) INTO v_free FROM __SCHEMA__.holders h WHERE h.key = p_key;
  IF v_free > 0 THEN
    PERFORM __SCHEMA__.hand_out(p_key, v_free, NULL, v_now);
  END IF;
  RETURN v_ends > v_now;
END
$$;

-- Resets p_token's lease to p_lease_ms from now, if it still holds it.
CREATE OR REPLACE FUNCTION __SCHEMA__.extend(p_key text, p_token text, p_lease_ms bigint)
RETURNS boolean LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  UPDATE __SCHEMA__.holders h SET expires_at = v_now + p_lease_ms * interval '1 millisecond'
    WHERE h.key = p_key AND h.token = p_token AND h.expires_at > v_now;
  RETURN FOUND;
END
$$;

-- A lock or semaphore as it is now: live holders, ms left of the lease that
-- ends first (NULL when none), queued waiters, the key's newest fencing
-- token (a holder's, should its row be gone).
CREATE OR REPLACE FUNCTION __SCHEMA__.inspect(
  p_key text, OUT holders bigint, OUT left_ms bigint, OUT waiting bigint, OUT latest bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  SELECT count(*), ceil(extract(epoch FROM min(h.expires_at) - v_now) * 1000)::bigint
    INTO holders, left_ms
    FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at > v_now;
  SELECT count(*) INTO waiting FROM __SCHEMA__.waiters w WHERE w.key = p_key;
  SELECT greatest(
      (SELECT f.fence FROM __SCHEMA__.latest_fences f WHERE f.key = p_key),
      (SELECT max(h.fence) FROM __SCHEMA__.holders h WHERE h.key = p_key))
    INTO latest;
END
$$;

-- Read-write locks (version 4): many readers or one writer, in the tables
-- of locks (holders.reads, waiters.reads), keyed by the read-write lock's
-- own key. One queue for readers and writers, first come first served: a
-- hold is taken only when it fits beside the holders and nobody live
-- queues ahead, so a reader that arrives while a writer waits queues
-- behind it. Every hold draws its fencing token from the key's one
-- sequence (next_fence), so a write's is greater than every earlier read's
-- and write's.

-- Whether a read (p_reads) or a write fits beside p_key's live holders: a
-- read beside readers, a write beside nobody.
CREATE OR REPLACE FUNCTION __SCHEMA__.rw_fits(p_key text, p_reads boolean, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
BEGIN
  RETURN NOT EXISTS (
    SELECT 1 FROM __SCHEMA__.holders h
      WHERE h.key = p_key AND h.expires_at > p_now AND NOT (h.reads AND p_reads));
END
$$;

-- Hands p_key to the head of its queue for as long as it fits: the whole
-- run of readers there while no writer holds it, or the one writer there
-- when nobody does; each told alone (hand_to). Stops before p_me (a waiter
-- asking for itself). Returns the token of the live waiter it stopped at
-- (NULL when the queue is empty).
CREATE OR REPLACE FUNCTION __SCHEMA__.rw_admit(p_key text, p_me text, p_now timestamptz)
RETURNS text LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_first __SCHEMA__.waiters%ROWTYPE;
BEGIN
  LOOP
    v_first := __SCHEMA__.queue_head(p_key, p_now);
    IF v_first.token IS NULL OR v_first.token = p_me
       OR NOT __SCHEMA__.rw_fits(p_key, v_first.reads, p_now) THEN
      RETURN v_first.token;
    END IF;
    PERFORM __SCHEMA__.hand_to(v_first, p_now);
  END LOOP;
END
$$;

-- One attempt at a read (p_reads) or write hold of read-write lock p_key,
-- as acquire is for a lock: claims a hold handed to p_token (with
-- p_lease_ms, keeping the token announced); takes one that fits when
-- nobody live queues ahead, after handing the lock to the head of the
-- queue as far as it fits (an ended lease frees it here), and then, a
-- read, to the readers queued behind it too; otherwise, with a p_wait_ms,
-- joins the queue (or keeps its place) until p_wait_ms from now. Returns
-- (true, fence) when taken, (false, ms until the writer's lease ends, or
-- the last reader's).
CREATE OR REPLACE FUNCTION __SCHEMA__.rw_acquire(
  p_key text, p_token text, p_lease_ms bigint, p_reads boolean,
  p_wait_ms bigint, p_channel text, p_attempt bigint,
  OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_mine __SCHEMA__.holders%ROWTYPE;
  v_head text;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  SELECT * INTO v_mine FROM __SCHEMA__.holders h
    WHERE h.key = p_key AND h.token = p_token AND h.reads = p_reads;
  IF FOUND AND v_mine.expires_at > v_now THEN
    UPDATE __SCHEMA__.holders h SET expires_at = v_now + p_lease_ms * interval '1 millisecond'
      WHERE h.key = p_key AND h.token = p_token;
    acquired := true;
    n := v_mine.fence;
    RETURN;
  END IF;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at <= v_now;
  v_head := __SCHEMA__.rw_admit(p_key, p_token, v_now);
  IF (v_head IS NULL OR v_head = p_token) AND __SCHEMA__.rw_fits(p_key, p_reads, v_now) THEN
    DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = p_token;
    INSERT INTO __SCHEMA__.holders (key, token, expires_at, fence, reads)
      VALUES (p_key, p_token, v_now + p_lease_ms * interval '1 millisecond',
              __SCHEMA__.next_fence(p_key), p_reads)
      RETURNING fence INTO n;
    acquired := true;
    IF p_reads THEN
      -- The readers queued right behind this one come in with it.
      PERFORM __SCHEMA__.rw_admit(p_key, NULL, v_now);
    END IF;
    RETURN;
  END IF;
  IF p_wait_ms IS NOT NULL THEN
    INSERT INTO __SCHEMA__.waiters AS w (key, token, arrival, deadline, attempt, channel, reads)
      VALUES (p_key, p_token, nextval('__SCHEMA__.arrivals'),
              v_now + p_wait_ms * interval '1 millisecond', p_attempt, p_channel, p_reads)
      ON CONFLICT (key, token) DO UPDATE
        SET deadline = EXCLUDED.deadline, attempt = EXCLUDED.attempt,
            channel = EXCLUDED.channel, reads = EXCLUDED.reads;
  END IF;
  acquired := false;
  SELECT ceil(extract(epoch FROM coalesce(max(h.expires_at) FILTER (WHERE NOT h.reads),
                                          max(h.expires_at)) - v_now) * 1000)::bigint
    INTO n FROM __SCHEMA__.holders h WHERE h.key = p_key;
END
$$;

-- Gives p_token's hold of read-write lock p_key up (and its place in the
-- queue), handing the lock to the head of the queue as far as it fits in
-- the same step: a waiter that leaves the head may free the readers behind
-- it. True when the hold was still held.
CREATE OR REPLACE FUNCTION __SCHEMA__.rw_release(p_key text, p_token text)
RETURNS boolean LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_ends timestamptz;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = p_token;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.token = p_token
    RETURNING h.expires_at INTO v_ends;
  DELETE FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at <= v_now;
  PERFORM __SCHEMA__.rw_admit(p_key, NULL, v_now);
  RETURN coalesce(v_ends > v_now, false);
END
$$;

-- A read-write lock as it is now: live readers, whether a writer holds it,
-- ms left of the lease that ends first (NULL when none), queued waiters of
-- both kinds, the key's newest fencing token (a holder's, should its row
-- be gone).
CREATE OR REPLACE FUNCTION __SCHEMA__.rw_inspect(
  p_key text, OUT readers bigint, OUT writer boolean, OUT left_ms bigint,
  OUT waiting bigint, OUT latest bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  SELECT count(*) FILTER (WHERE h.reads), coalesce(bool_or(NOT h.reads), false),
         ceil(extract(epoch FROM min(h.expires_at) - v_now) * 1000)::bigint
    INTO readers, writer, left_ms
    FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at > v_now;
  SELECT count(*) INTO waiting FROM __SCHEMA__.waiters w WHERE w.key = p_key;
  SELECT greatest(
      (SELECT f.fence FROM __SCHEMA__.latest_fences f WHERE f.key = p_key),
      (SELECT max(h.fence) FROM __SCHEMA__.holders h WHERE h.key = p_key))
    INTO latest;
END
$$;

-- Locks the row of counter p_key (until the end of the transaction: every
-- counter operation checks and writes under it) and reads it as of
-- read_at, the clock read once the row is ours. present: the row exists; value: 0
-- unless live; version: 0 unless live (what a reader sees); last: the
-- stored version even when expired (NULL without a row), which the next
-- version must exceed; expires_at: NULL unless live.
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_lock(
  p_key text, OUT present boolean, OUT value bigint, OUT version bigint,
  OUT last bigint, OUT expires_at timestamptz, OUT read_at timestamptz)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
BEGIN
  SELECT c.value, c.version, c.version, c.expires_at INTO value, version, last, expires_at
    FROM __SCHEMA__.counters c WHERE c.key = p_key FOR UPDATE;
  present := FOUND;
  read_at := clock_timestamp();
  IF NOT present OR expires_at <= read_at THEN
    value := 0;
    version := 0;
    expires_at := NULL;
  END IF;
END
$$;

-- Writes p_value to counter p_key as counter_lock found it (p_present,
-- p_last, p_expires_at, p_now), with a version after p_last; an expiry of
-- p_ttl_ms is set on a counter without one. Returns the new version, or NULL when the counter had no
-- row and one appeared meanwhile (an increment's, which takes no key's
-- lock): the caller locks it and decides again.
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_put(
  p_key text, p_present boolean, p_value bigint, p_last bigint,
  p_expires_at timestamptz, p_ttl_ms bigint, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_version bigint := __SCHEMA__.next_after(p_last);
  v_expiry timestamptz := coalesce(p_expires_at,
    CASE WHEN p_ttl_ms > 0 THEN p_now + p_ttl_ms * interval '1 millisecond' END);
BEGIN
  IF p_present THEN
    UPDATE __SCHEMA__.counters c SET value = p_value, version = v_version, expires_at = v_expiry
      WHERE c.key = p_key;
    RETURN v_version;
  END IF;
  INSERT INTO __SCHEMA__.counters (key, value, version, expires_at)
    VALUES (p_key, p_value, v_version, v_expiry)
    ON CONFLICT (key) DO NOTHING;
  RETURN CASE WHEN FOUND THEN v_version END;
END
$$;

-- Adds p_delta to a counter (a counter that expired starts again from 0);
-- an expiry is set on a counter without one. Returns the new value. One
-- statement, no key's lock: the row's lock, taken by the upsert, orders it
-- with every other write of the counter, and what it writes is computed
-- under that lock (the clock read once, the version drawn after it).
-- (plpgsql, as every function here that runs statements: it keeps their
-- plans for the session, where a non-inlined SQL function plans its
-- statement at every call.)
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_add(p_key text, p_delta bigint, p_ttl_ms bigint)
RETURNS bigint LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_value bigint;
BEGIN
  INSERT INTO __SCHEMA__.counters AS c (key, value, version, expires_at)
    VALUES (p_key, p_delta, __SCHEMA__.next_after(NULL),
            CASE WHEN p_ttl_ms > 0 THEN clock_timestamp() + p_ttl_ms * interval '1 millisecond' END)
    ON CONFLICT (key) DO UPDATE SET (value, version, expires_at) = (
      SELECT CASE WHEN c.expires_at <= t.now THEN 0 ELSE c.value END + p_delta,
             __SCHEMA__.next_after(c.version),
             CASE WHEN c.expires_at > t.now THEN c.expires_at
                  WHEN p_ttl_ms > 0 THEN t.now + p_ttl_ms * interval '1 millisecond' END
        FROM (SELECT clock_timestamp() AS now) t)
    RETURNING c.value INTO v_value;
  RETURN v_value;
END
$$;

-- Takes p_n (positive) only if at least p_n is there. Returns (true, new
-- value) or (false, current value).
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_take(
  p_key text, p_n bigint, p_ttl_ms bigint, OUT taken boolean, OUT n bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_c record;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  LOOP
    SELECT * INTO v_c FROM __SCHEMA__.counter_lock(p_key);
    IF v_c.value < p_n THEN
      taken := false;
      n := v_c.value;
      RETURN;
    END IF;
    taken := true;
    n := v_c.value - p_n;
    EXIT WHEN __SCHEMA__.counter_put(p_key, v_c.present, n, v_c.last, v_c.expires_at, p_ttl_ms,
                                     v_c.read_at) IS NOT NULL;
  END LOOP;
END
$$;

-- Sets a counter, only if its version is p_expected (NULL: any). Returns
-- (true, new version) or (false, current version).
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_set(
  p_key text, p_value bigint, p_expected text, p_ttl_ms bigint, OUT done boolean, OUT version bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_c record;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  LOOP
    SELECT * INTO v_c FROM __SCHEMA__.counter_lock(p_key);
    IF p_expected IS NOT NULL AND p_expected <> v_c.version::text THEN
      done := false;
      version := v_c.version;
      RETURN;
    END IF;
    done := true;
    version := __SCHEMA__.counter_put(p_key, v_c.present, p_value, v_c.last, v_c.expires_at,
                                      p_ttl_ms, v_c.read_at);
    EXIT WHEN version IS NOT NULL;
  END LOOP;
END
$$;

-- Marks p_member in a set; true the first time. An expiry is set on a set
-- without one; a set that expired starts empty.
CREATE OR REPLACE FUNCTION __SCHEMA__.mark_once(p_key text, p_member text, p_ttl_ms bigint)
RETURNS boolean LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_set __SCHEMA__.mark_sets%ROWTYPE;
  v_expiry timestamptz;
  v_found boolean;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  -- Locked: the sweep cannot remove the set between here and the marks;
  -- the clock is read once it is ours.
  SELECT * INTO v_set FROM __SCHEMA__.mark_sets s WHERE s.key = p_key FOR UPDATE;
  v_found := FOUND;
  v_now := clock_timestamp();
  v_expiry := CASE WHEN p_ttl_ms > 0 THEN v_now + p_ttl_ms * interval '1 millisecond' END;
  IF NOT v_found THEN
    v_set.generation := __SCHEMA__.next_after(NULL);
    INSERT INTO __SCHEMA__.mark_sets (key, generation, expires_at)
      VALUES (p_key, v_set.generation, v_expiry);
  ELSIF v_set.expires_at <= v_now THEN
    v_set.generation := __SCHEMA__.next_after(v_set.generation);
    UPDATE __SCHEMA__.mark_sets s SET generation = v_set.generation, expires_at = v_expiry
      WHERE s.key = p_key;
  ELSIF v_set.expires_at IS NULL AND v_expiry IS NOT NULL THEN
    UPDATE __SCHEMA__.mark_sets s SET expires_at = v_expiry WHERE s.key = p_key;
  END IF;
  INSERT INTO __SCHEMA__.marks AS m (key, member, generation)
    VALUES (p_key, p_member, v_set.generation)
    ON CONFLICT (key, member) DO UPDATE SET generation = EXCLUDED.generation
      WHERE m.generation <> EXCLUDED.generation;
  RETURN FOUND;
END
$$;

-- GCRA: p_t the emission interval, p_tau the tolerance (µs). Returns
-- (allowed, used µs = max(TAT, now) - now after the request, retry µs).
-- With p_peek, the decision the request would get, nothing stored (so
-- the rate-limit functions take one argument more than a request needs).
CREATE OR REPLACE FUNCTION __SCHEMA__.gcra(
  p_key text, p_t bigint, p_tau bigint, p_cost bigint, p_peek boolean,
  OUT allowed boolean, OUT used bigint, OUT retry bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now bigint;
  v_tat bigint;
  v_new bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := __SCHEMA__.now_us();
  -- Not locked: the state written below is computed whatever the row holds
  -- now, and a row the sweep removes meanwhile had expired (an expired TAT
  -- counts as now), so it changes nothing; a refusal then writes nothing.
  SELECT l.value INTO v_tat FROM __SCHEMA__.limits l WHERE l.key = p_key;
  v_tat := greatest(coalesce(v_tat, v_now), v_now);
  v_new := v_tat + p_t * p_cost;
  IF v_now < v_new - p_tau THEN
    allowed := false;
    used := v_tat - v_now;
    retry := v_new - p_tau - v_now;
    RETURN;
  END IF;
  allowed := true;
  used := v_new - v_now;
  retry := 0;
  IF p_peek THEN
    RETURN;
  END IF;
  INSERT INTO __SCHEMA__.limits AS l (key, value, expires_at)
    VALUES (p_key, v_new, to_timestamp(v_new / 1000000.0) + interval '1 millisecond')
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at;
END
$$;

-- Fixed window of p_window_ms; refused requests are not counted. Returns
-- (allowed, used, ms left of the window). With p_peek, nothing is stored.
-- A refusal is decided from a read (it writes nothing); a request is
-- counted by one statement that checks again, under the row's lock, that
-- the window is live and has room; a window found over is begun again by
-- an upsert that checks, under the row's lock, that the window it replaces
-- is over. A check that fails there (the window changed between the two
-- statements: the sweep removed it, say) goes round again.
CREATE OR REPLACE FUNCTION __SCHEMA__.fixed_window(
  p_key text, p_limit bigint, p_window_ms bigint, p_cost bigint, p_peek boolean,
  OUT allowed boolean, OUT used bigint, OUT left_ms bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz;
  v_row __SCHEMA__.limits%ROWTYPE;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  LOOP
    v_now := clock_timestamp();
    SELECT * INTO v_row FROM __SCHEMA__.limits l WHERE l.key = p_key AND l.expires_at > v_now;
    IF FOUND THEN
      left_ms := floor(extract(epoch FROM v_row.expires_at - v_now) * 1000)::bigint;
      IF v_row.value + p_cost > p_limit THEN
        allowed := false;
        used := v_row.value;
        RETURN;
      END IF;
      allowed := true;
      IF p_peek THEN
        used := v_row.value + p_cost;
        RETURN;
      END IF;
      -- The clock is read again under the row's lock, which it may have
      -- waited for.
      UPDATE __SCHEMA__.limits l SET value = l.value + p_cost
        WHERE l.key = p_key AND l.expires_at > clock_timestamp() AND l.value + p_cost <= p_limit
        RETURNING l.value, l.expires_at, clock_timestamp() INTO used, v_row.expires_at, v_now;
      IF FOUND THEN
        left_ms := greatest(floor(extract(epoch FROM v_row.expires_at - v_now) * 1000)::bigint, 0);
        RETURN;
      END IF;
      CONTINUE;
    END IF;
    left_ms := p_window_ms;
    IF p_cost > p_limit THEN
      allowed := false;
      used := 0;
      RETURN;
    END IF;
    allowed := true;
    used := p_cost;
    IF p_peek THEN
      RETURN;
    END IF;
    INSERT INTO __SCHEMA__.limits AS l (key, value, expires_at)
      VALUES (p_key, p_cost, v_now + p_window_ms * interval '1 millisecond')
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at
        WHERE l.expires_at <= v_now;
    IF FOUND THEN
      RETURN;
    END IF;
  END LOOP;
END
$$;

-- Sliding window log over p_window_us: an entry counts while
-- now < at + window. Returns (allowed, used, reset µs, retry µs) as the
-- Redis script does: the retry is when the oldest entries holding the
-- excess expire (never, for a cost above the whole limit: a window), the
-- reset when the newest does. With p_peek, nothing is stored or removed.
CREATE OR REPLACE FUNCTION __SCHEMA__.sliding_window(
  p_key text, p_limit bigint, p_window_us bigint, p_cost bigint, p_peek boolean,
  OUT allowed boolean, OUT used bigint, OUT reset bigint, OUT retry bigint)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now bigint;
  v_sum bigint;
  v_freed bigint;
  v_need bigint;
  v_entry record;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  IF p_peek THEN
    SELECT l.value INTO v_sum FROM __SCHEMA__.limits l
      WHERE l.key = p_key AND l.expires_at > clock_timestamp();
  ELSE
    -- Locked: the sweep cannot remove the sum and the log it counts
    -- between here and the write (the sum would then count requests gone).
    SELECT l.value INTO v_sum FROM __SCHEMA__.limits l
      WHERE l.key = p_key AND l.expires_at > clock_timestamp() FOR UPDATE;
  END IF;
  -- The time is read once the row is ours: a request logged at the time it
  -- began waiting would leave the window early.
  v_now := __SCHEMA__.now_us();
  IF v_sum IS NULL THEN
    -- Idle for a whole window: every entry is over (some may be swept
    -- already, so the sum starts again rather than being counted down).
    IF NOT p_peek THEN
      DELETE FROM __SCHEMA__.limit_log g WHERE g.key = p_key;
    END IF;
    v_sum := 0;
  ELSIF p_peek THEN
    SELECT coalesce(sum(g.cost), 0) INTO v_freed FROM __SCHEMA__.limit_log g
      WHERE g.key = p_key AND g.at <= v_now - p_window_us;
    v_sum := greatest(v_sum - v_freed, 0);
  ELSE
    WITH gone AS (
      DELETE FROM __SCHEMA__.limit_log g
        WHERE g.key = p_key AND g.at <= v_now - p_window_us RETURNING g.cost)
    SELECT coalesce(sum(gone.cost), 0) INTO v_freed FROM gone;
    v_sum := greatest(v_sum - v_freed, 0);
  END IF;
  IF v_sum + p_cost > p_limit THEN
    v_need := v_sum + p_cost - p_limit;
    retry := p_window_us;
    reset := 0;
    IF v_need <= v_sum THEN
      v_freed := 0;
      FOR v_entry IN SELECT g.at, g.cost FROM __SCHEMA__.limit_log g
          WHERE g.key = p_key AND g.at > v_now - p_window_us ORDER BY g.at, g.id LOOP
        v_freed := v_freed + v_entry.cost;
        IF v_freed >= v_need THEN
          retry := v_entry.at + p_window_us - v_now;
          EXIT;
        END IF;
      END LOOP;
    END IF;
    SELECT coalesce(max(g.at) + p_window_us - v_now, 0) INTO reset
      FROM __SCHEMA__.limit_log g WHERE g.key = p_key;
    IF NOT p_peek THEN
      UPDATE __SCHEMA__.limits l SET value = v_sum WHERE l.key = p_key;
    END IF;
    allowed := false;
    used := v_sum;
    RETURN;
  END IF;
  IF p_peek THEN
    allowed := true;
    used := v_sum + p_cost;
    reset := p_window_us;
    retry := 0;
    RETURN;
  END IF;
  INSERT INTO __SCHEMA__.limit_log (key, at, cost) VALUES (p_key, v_now, p_cost);
  v_sum := v_sum + p_cost;
  INSERT INTO __SCHEMA__.limits AS l (key, value, expires_at)
    VALUES (p_key, v_sum, clock_timestamp() + p_window_us * interval '1 microsecond')
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at;
  allowed := true;
  used := v_sum;
  reset := p_window_us;
  retry := 0;
END
$$;

-- Locks (version 8): PostgreSQL's own session advisory locks. Each held or
-- awaited lock has a session of its own on its client; a waiter waits in
-- the server (pg_advisory_lock), which grants the lock to its first waiter
-- the moment the holder unlocks or its session ends, with no statement
-- of anyone's. The lock of a key is the advisory lock (hi, lo), the two
-- halves of the hash of the schema's name and the key (two-int form: the
-- per-key transaction locks of the other operations use the bigint form).
--
-- A session's application_name says what it does, for every other
-- client's inspection, survey and forced release: `lg <token>` while it
-- waits, `lg <token> <fence> <lease end>` (hex; the end in ms since the
-- epoch on the database's clock) while it holds. A session of a client of
-- session leases (version 12) names neither, so that a take writes
-- nothing, not even a name: others name its holds and waits by the
-- session, `00000000000000005e55` and its pid in 12 hex digits
-- (lock_session_token), and know no fence or lease of them; it is named
-- only while it keeps a lock past its release (lock_keep). Its
-- idle_session_timeout is its hold's lease: a holder whose client stopped
-- renewing (paused, cut off) loses its session, and its lock, when the
-- lease ends, even when its connection looks alive.
--
-- The newest fencing token and the name of each lock, for the next
-- fencing token, inspection and survey. Unlogged: written at every
-- acquisition without a durable write (a transaction that writes only
-- unlogged rows commits without waiting for the log's flush). A token is
-- drawn as the other keys' are (next_after): above the key's last and the
-- database's clock in µs. After a crash the rows are gone, and every lock
-- with them; the clock is then ahead of every token drawn before (a key
-- draws far fewer than one per µs), as it is after a failover. Swept a
-- day after their lock was last taken or renewed.
CREATE UNLOGGED TABLE IF NOT EXISTS __SCHEMA__.lock_fences (
  hi integer NOT NULL,
  lo integer NOT NULL,
  key text NOT NULL,
  fence bigint NOT NULL,
  at timestamptz NOT NULL,
  -- The latest holder and the end of its lease as last renewed (NULL once
  -- it released): a holder whose session ended unbeknownst to it (a
  -- connection cut) believes it holds until then, so its successor waits
  -- that out.
  token text,
  expires_at timestamptz,
  PRIMARY KEY (hi, lo)
);

-- Every lock's fencing token is drawn from this one sequence (version 11),
-- kept at or above the database's clock in µs (lock_fence_next), and at
-- most a second ahead of it (lock_fence_rebase): so they
-- strictly increase per key whichever mode took the lock, recorded leases
-- (a key's last token also kept in lock_fences) or session leases (no row
-- written: see lockguard-postgres' LockLeases). Unlogged from PostgreSQL
-- 15 on (no write waits for the log; a crash or a failover starts it over,
-- and its first draw finds it below the clock and lifts it above every
-- token drawn before, as the clock is: a key draws far fewer than one per
-- µs); logged on 14, where a standby may hold it behind, as far as the
-- clock is ahead of it.
DO $$
BEGIN
  IF current_setting('server_version_num')::int >= 150000 THEN
    EXECUTE 'CREATE UNLOGGED SEQUENCE IF NOT EXISTS __SCHEMA__.lock_fence_seq';
  ELSE
    EXECUTE 'CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.lock_fence_seq';
  END IF;
END
$$;

-- Lifts lock_fence_seq above the clock in µs when it is not already: its
-- next value, or the clock plus a second (so the draws of the next second
-- need no lift, and take no lock). Serialized by a transaction advisory
-- lock, so a lift never lowers the sequence below a lift before it; a draw
-- made beside it, which takes no lock, gets a value below the lifted one
-- (it would take a million draws within the lift to pass it). Tokens run
-- at most a second ahead of the clock, so after a crash or a failover the
-- first lift (the clock then, plus a second) is above every token drawn
-- before, as long as the clock moved on. Runs as the schema's owner
-- (setval needs UPDATE on the sequence, which the documented grants do not
-- give), with no argument, so no caller can move the sequence anywhere
-- but up to the clock.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_fence_rebase() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
  v_now bigint;
  v_h bigint := hashtextextended('__SCHEMA__ lock_fence_seq', 8);
BEGIN
  PERFORM pg_advisory_xact_lock((v_h >> 32)::integer, ((v_h << 32) >> 32)::integer);
  v := nextval('__SCHEMA__.lock_fence_seq');
  v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  IF v <= v_now THEN
    v := setval('__SCHEMA__.lock_fence_seq', v_now + 1000000);
  END IF;
  RETURN v;
END
$$;

-- A lock's next fencing token, drawn at p_t: lock_fence_seq's next value,
-- lifted above the clock in µs when it fell behind (lock_fence_rebase).
-- The statements in locks/ write the same out (locks/fence.sql).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_fence_next(p_t timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN s.v > s.c THEN s.v ELSE __SCHEMA__.lock_fence_rebase() END
    FROM (SELECT nextval('__SCHEMA__.lock_fence_seq') AS v,
                 (extract(epoch FROM p_t) * 1000000)::bigint AS c) s
$$;

-- The keys of locks taken with session leases (version 11), which record
-- no row per hold: what lock_survey names their advisory locks by. A
-- client names a key before its first hold of it, and again when it named
-- it an hour ago or more (lock_named); swept a day after it was named.
CREATE TABLE IF NOT EXISTS __SCHEMA__.lock_names (
  hi integer NOT NULL,
  lo integer NOT NULL,
  key text NOT NULL,
  at timestamptz NOT NULL,
  PRIMARY KEY (hi, lo)
);

-- A lock released before its at_least passed, kept until `until`: its
-- holder's session keeps the advisory lock until then too, and this row
-- keeps it past that session's end (its client's exit), for whoever takes
-- the lock next to wait out.
CREATE TABLE IF NOT EXISTS __SCHEMA__.kept_locks (
  key text PRIMARY KEY,
  token text NOT NULL,
  fence bigint NOT NULL,
  until timestamptz NOT NULL
);

-- The longest lease any lock of this schema was taken or renewed with, in
-- ms (version 9; one row, logged, so a crash keeps it). Written only when
-- a hold asks for a longer lease than any before (with its commit flushed
-- to the log, whatever synchronous_commit says), so an application that
-- keeps to a few leases writes it a few times in all. See lock_epoch.
CREATE TABLE IF NOT EXISTS __SCHEMA__.lock_lease_bound (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  lease_ms bigint NOT NULL
);
INSERT INTO __SCHEMA__.lock_lease_bound (lease_ms) VALUES (0) ON CONFLICT DO NOTHING;

-- Until when no lock may be taken anew after the locks' unlogged rows were
-- lost (version 9; one row, unlogged). A crash empties lock_fences, and a
-- standby promoted in a failover has its own (empty), while every holder
-- of the server that went down may still count on its lease: its session
-- is gone with the server, but it learns that only at its next renewal,
-- or never (a fixed lease). So an empty lock_epoch, which tells that the
-- unlogged rows are new, is filled with the moment it is found empty plus
-- the longest lease any hold could have had (lock_lease_bound), and until
-- then a key with no row of its own is taken by nobody (Redis's "delayed
-- restart", done by the database itself). It is filled at once here (a
-- new schema's bound is 0), and after a crash by the first session of the
-- client's locks that starts (lock_session), in a transaction of its own.
CREATE UNLOGGED TABLE IF NOT EXISTS __SCHEMA__.lock_epoch (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  until timestamptz NOT NULL
);
INSERT INTO __SCHEMA__.lock_epoch (until)
  SELECT clock_timestamp() + coalesce(max(b.lease_ms), 0) * interval '1 millisecond'
    FROM __SCHEMA__.lock_lease_bound b
  ON CONFLICT DO NOTHING;

-- The ms left of the wait for the locks' rows lost in a crash or a
-- failover (see lock_epoch), filling lock_epoch when it is empty; NULL
-- when there is none to wait.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_epoch_ms() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_until timestamptz;
BEGIN
  SELECT e.until INTO v_until FROM __SCHEMA__.lock_epoch e;
  IF NOT FOUND THEN
    INSERT INTO __SCHEMA__.lock_epoch (until)
      SELECT clock_timestamp() + coalesce(max(b.lease_ms), 0) * interval '1 millisecond'
        FROM __SCHEMA__.lock_lease_bound b
      ON CONFLICT DO NOTHING;
    SELECT e.until INTO v_until FROM __SCHEMA__.lock_epoch e;
  END IF;
  IF v_until > clock_timestamp() THEN
    RETURN ceil(extract(epoch FROM v_until - clock_timestamp()) * 1000)::bigint;
  END IF;
  RETURN NULL;
END
$$;

-- Records a hold's lease of p_lease_ms ms in lock_lease_bound when it is
-- longer than any before, durably: called by a client before it first
-- asks for a lock on a lease longer than its session read there (so the
-- try and the wait themselves never touch it), by a key's first hold
-- (lock_draw) and by every renewal (lock_lease).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_bound(p_lease_ms bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  UPDATE __SCHEMA__.lock_lease_bound b SET lease_ms = p_lease_ms WHERE b.lease_ms < p_lease_ms;
  IF FOUND AND current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'local', true);
  END IF;
END
$$;

-- Clients before version 8 took locks with these two, in the tables above;
-- no client of version 8 uses them, and a client that still does would
-- take locks the others do not see: it is stopped with LG003.
CREATE OR REPLACE FUNCTION __SCHEMA__.acquire(
  p_key text, p_token text, p_lease_ms bigint, p_permits integer,
  p_wait_ms bigint, p_channel text, p_attempt bigint,
  OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'lockguard''s schema is version 8 or newer, whose locks are advisory locks; this lockguard client is older: upgrade it'
    USING ERRCODE = 'LG003';
END
$$;
CREATE OR REPLACE FUNCTION __SCHEMA__.acquire_all(
  p_keys text[], p_tokens text[], p_lease_ms bigint,
  OUT acquired boolean, OUT fences bigint[], OUT busy integer, OUT left_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'lockguard''s schema is version 8 or newer, whose locks are advisory locks; this lockguard client is older: upgrade it'
    USING ERRCODE = 'LG003';
END
$$;

-- The advisory lock of lock p_key: the halves of its hash.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_id(p_key text, OUT hi integer, OUT lo integer)
LANGUAGE sql IMMUTABLE AS $$
  SELECT (h >> 32)::integer, ((h << 32) >> 32)::integer
    FROM (SELECT hashtextextended('__SCHEMA__:' || p_key, 8) AS h) x
$$;

-- Names lock p_key's advisory lock in lock_names: a row written only when
-- there is none, or it is half an hour old or names another key, so that
-- clients naming a key at once (their first holds of it) neither write
-- nor wait for each other's row locks.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_named(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  PERFORM 1 FROM __SCHEMA__.lock_names n
   WHERE n.hi = v_id.hi AND n.lo = v_id.lo AND n.key = p_key
     AND n.at > clock_timestamp() - interval '30 minutes';
  IF FOUND THEN
    RETURN;
  END IF;
  INSERT INTO __SCHEMA__.lock_names AS n (hi, lo, key, at)
    VALUES (v_id.hi, v_id.lo, p_key, clock_timestamp())
    ON CONFLICT (hi, lo) DO UPDATE SET key = EXCLUDED.key, at = EXCLUDED.at;
END
$$;

-- The token by which others name a hold or a wait of session p_pid that
-- its session's name does not name (a client of session leases): 16
-- zeros, 5e55 and the pid in 12 hex digits, a token no client draws (as
-- MySQL's session leases name theirs by the connection id).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_session_token(p_pid integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT '00000000000000005e55' || lpad(to_hex(p_pid), 12, '0')
$$;

-- The sessions of this database with a part in lock p_key, by pid: its
-- holder (granted) and its waiters in their order, each with its name.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_sessions(p_hi integer, p_lo integer)
RETURNS TABLE (pid integer, granted boolean, label text, since timestamptz)
LANGUAGE sql VOLATILE AS $$
  SELECT l.pid, l.granted, a.application_name, l.waitstart
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'advisory' AND l.objsubid = 2
     AND l.classid = p_hi::oid AND l.objid = p_lo::oid
     AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
   ORDER BY l.granted DESC, l.waitstart
$$;

-- The database's clock in ms.
CREATE OR REPLACE FUNCTION __SCHEMA__.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Starts a session of a client's locks: named, with no idle timeout,
-- checking its client's connection every 250 ms while a statement runs (so
-- that a waiter whose client is gone leaves the queue), and running its
-- statements at read committed whatever the role's or database's default
-- (a statement at a stricter level reads from a snapshot older than the
-- lock it waited for: see lock_draw); and, the first after a crash or a
-- failover, filling lock_epoch.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_session() RETURNS void
LANGUAGE sql VOLATILE AS $$
  -- After a crash or a failover, the first session fills lock_epoch.
  SELECT __SCHEMA__.lock_epoch_ms();
  SELECT set_config('default_transaction_isolation', 'read committed', false);
  SELECT set_config('application_name', 'lockguard', false);
  SELECT set_config('idle_session_timeout', '0', false);
  SELECT set_config('client_connection_check_interval', '250', false);
$$;

-- The ms left of lock p_key's kept time, NULL when it is not kept.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_kept_ms(p_key text) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT ceil(extract(epoch FROM k.until - clock_timestamp()) * 1000)::bigint
    FROM __SCHEMA__.kept_locks k WHERE k.key = p_key AND k.until > clock_timestamp()
$$;

-- The ms left of lock p_key's kept time when another token than p_token
-- keeps it; NULL otherwise.
-- (PL/pgSQL since version 11: its plan is kept for the session, and its
-- read takes a snapshot of its own, which wait_session.sql needs.)
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_kept_for_ms(p_key text, p_token text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RETURN (SELECT ceil(extract(epoch FROM k.until - clock_timestamp()) * 1000)::bigint
            FROM __SCHEMA__.kept_locks k
           WHERE k.key = p_key AND k.until > clock_timestamp() AND k.token IS DISTINCT FROM p_token);
END
$$;

-- The draw of locks/draw.sql, for the rare paths (lock_take,
-- lock_wait_out), kept in step with it, and a key's first row.
-- Records this session's hold of p_key (advisory lock hi, lo) by p_token,
-- for p_lease_ms, once the lock is this session's: draws its fencing token
-- and names the hold (with the session's idle timeout). NULL, changing
-- nothing, while another holder's lease runs unreleased in the key's row
-- (its session ended unbeknownst to it: lock_lapse_ms).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_draw(
  p_key text, p_hi integer, p_lo integer, p_token text, p_lease_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_fence bigint;
  v_now timestamptz := clock_timestamp();
BEGIN
  -- Not while the lock is kept past its release by another token
  -- (kept_locks, at_least): a keeper of session leases writes no lease in
  -- the key's row (version 12).
  IF __SCHEMA__.lock_kept_for_ms(p_key, p_token) IS NOT NULL THEN
    RETURN NULL;
  END IF;
  -- The key's row, unless another holder's lease runs there unreleased
  -- (then written back as it was). The row's lock waits for a release of
  -- it still committing, whose unlock granted this lock, and the row is
  -- read as that release left it: a condition in the WHERE clause would
  -- be read from this statement's snapshot, which may be older.
  UPDATE __SCHEMA__.lock_fences f
     SET key = CASE WHEN f.expires_at > v_now AND f.token IS DISTINCT FROM p_token
                    THEN f.key ELSE p_key END,
         fence = CASE WHEN f.expires_at > v_now AND f.token IS DISTINCT FROM p_token
                      THEN f.fence
                      ELSE greatest(f.fence + 1, __SCHEMA__.lock_fence_next(v_now)) END,
         at = CASE WHEN f.expires_at > v_now AND f.token IS DISTINCT FROM p_token
                   THEN f.at ELSE v_now END,
         expires_at = CASE WHEN f.expires_at > v_now AND f.token IS DISTINCT FROM p_token
                           THEN f.expires_at ELSE v_now + p_lease_ms * interval '1 millisecond' END,
         token = CASE WHEN f.expires_at > v_now AND f.token IS DISTINCT FROM p_token
                      THEN f.token ELSE p_token END
   WHERE f.hi = p_hi AND f.lo = p_lo
  RETURNING CASE WHEN f.token = p_token AND f.at = v_now THEN f.fence END INTO v_fence;
  IF FOUND AND v_fence IS NULL THEN
    RETURN NULL;
  END IF;
  IF v_fence IS NULL THEN
    -- The key's first hold here (or since a crash, which empties
    -- lock_fences; a lock kept past its holder's release stays kept, as
    -- kept_locks, a logged table, remembers it, read above): right after
    -- a crash or a failover nobody takes it until every lease granted
    -- before may have ended (lock_epoch).
    IF __SCHEMA__.lock_epoch_ms() IS NOT NULL THEN
      RETURN NULL;
    END IF;
    PERFORM __SCHEMA__.lock_bound(p_lease_ms);
    -- Above what the lease tables remember of it too.
    INSERT INTO __SCHEMA__.lock_fences AS f (hi, lo, key, fence, at, token, expires_at)
      VALUES (p_hi, p_lo, p_key,
              greatest(__SCHEMA__.next_after((SELECT l.fence FROM __SCHEMA__.latest_fences l
                                               WHERE l.key = p_key)),
                       __SCHEMA__.lock_fence_next(v_now)),
              v_now, p_token, v_now + p_lease_ms * interval '1 millisecond')
      ON CONFLICT (hi, lo) DO NOTHING
      RETURNING f.fence INTO v_fence;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
  END IF;
  -- lock_name's, written out: a call of it costs a third of a lock cycle.
  PERFORM set_config('application_name',
                     format('lg %s %s %s', p_token, to_hex(v_fence),
                            to_hex((extract(epoch FROM v_now) * 1000)::bigint + p_lease_ms)), false),
          set_config('idle_session_timeout',
                     least(greatest(p_lease_ms, 1) + least(greatest(p_lease_ms / 4, 50), 5000),
                           2147483647)::text, false);
  RETURN v_fence;
END
$$;

-- Names this session's hold of p_token with p_fence and a lease of
-- p_lease_ms from now, and sets that lease, with a slack for the answer's
-- way to the client (which counts the lease from before its request, or
-- from the answer of a wait), as the session's idle timeout.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_name(p_token text, p_fence bigint, p_lease_ms bigint)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT set_config('application_name',
                    format('lg %s %s %s', p_token, to_hex(p_fence),
                           to_hex(__SCHEMA__.now_ms() + p_lease_ms)), false),
         set_config('idle_session_timeout',
                    least(greatest(p_lease_ms, 1) + least(greatest(p_lease_ms / 4, 50), 5000),
                          2147483647)::text, false)
$$;

-- Sets this session's idle timeout for a hold on a lease of p_lease_ms
-- (lock_name's, without the name): the hold of a client of session
-- leases, which names nothing (version 12).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_idle(p_lease_ms bigint)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT set_config('idle_session_timeout',
                    least(greatest(p_lease_ms, 1) + least(greatest(p_lease_ms / 4, 50), 5000),
                          2147483647)::text, false)
$$;

-- Renews this session's hold of lock p_key by p_token to p_lease_ms from
-- now: in the lock's row, and in the session's name and idle timeout. A
-- row whose lease a release ended (expires_at NULL) stays ended (version
-- 10): a renewal that reaches the session after its release (sent beside
-- it) would otherwise record the lease again, for the next holder to
-- wait out.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_lease(
  p_key text, p_token text, p_fence bigint, p_lease_ms bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  PERFORM __SCHEMA__.lock_bound(p_lease_ms);
  UPDATE __SCHEMA__.lock_fences f
     SET expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond',
         at = clock_timestamp()
   WHERE f.hi = v_id.hi AND f.lo = v_id.lo AND f.token = p_token
     AND f.expires_at IS NOT NULL;
  PERFORM __SCHEMA__.lock_name(p_token, p_fence, p_lease_ms);
  RETURN true;
END
$$;
-- The ms left of the lease of lock (p_hi, p_lo)'s latest holder as last
-- renewed, when that holder is another than p_token and did not release
-- it; for a lock with no row, of the wait after a crash or a failover
-- (lock_epoch); NULL otherwise.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_lapse_ms(p_hi integer, p_lo integer, p_token text)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM __SCHEMA__.lock_fences f
                                WHERE f.hi = p_hi AND f.lo = p_lo)
              THEN __SCHEMA__.lock_epoch_ms()
              ELSE (SELECT ceil(extract(epoch FROM f.expires_at - clock_timestamp()) * 1000)::bigint
                      FROM __SCHEMA__.lock_fences f
                     WHERE f.hi = p_hi AND f.lo = p_lo AND f.expires_at > clock_timestamp()
                       AND f.token IS DISTINCT FROM p_token) END
$$;

-- Refuses a session whose isolation is not read committed: a statement
-- under repeatable read or serializable reads from a snapshot older than
-- the lock it waited for (see lock_key).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_check() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'lockguard needs read committed isolation; this session runs %',
      current_setting('transaction_isolation') USING ERRCODE = 'feature_not_supported';
  END IF;
END
$$;

-- The ms left of the lease of lock (p_hi, p_lo)'s holder, as its
-- session's name says; NULL when it says none.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_held_ms(p_hi integer, p_lo integer) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT max(greatest(('x' || lpad(split_part(s.label, ' ', 4), 16, '0'))::bit(64)::bigint
                      - __SCHEMA__.now_ms(), 0))
    FROM __SCHEMA__.lock_sessions(p_hi, p_lo) s
   WHERE s.granted AND s.label LIKE 'lg % % %'
$$;

-- The rest of a try (locks/try.sql) that took lock p_key's advisory lock
-- but drew no fencing token: the key's first hold here, or another
-- holder's lease runs unreleased in its row. (true, fence) when taken;
-- (false, ms left of that lease), unlocked, otherwise.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_take(
  p_key text, p_token text, p_lease_ms bigint, OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  PERFORM __SCHEMA__.lock_check();
  acquired := false;
  n := __SCHEMA__.lock_draw(p_key, v_id.hi, v_id.lo, p_token, p_lease_ms);
  IF n IS NULL THEN
    -- Its last holder's lease runs, unreleased (see lock_fences), or it
    -- is kept (kept_locks).
    n := coalesce(__SCHEMA__.lock_lapse_ms(v_id.hi, v_id.lo, p_token),
                  __SCHEMA__.lock_kept_for_ms(p_key, p_token));
    PERFORM pg_advisory_unlock(v_id.hi, v_id.lo);
    RETURN;
  END IF;
  acquired := true;
END
$$;

-- The rest of a wait (locks/wait.sql) granted lock p_key's advisory lock
-- but that drew no fencing token: takes it for p_lease_ms once it can,
-- waiting out another holder's lease that runs unreleased in its row (a
-- lock kept past its holder's session, or whose holder's session ended
-- before its lease, a connection cut): its fencing token.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_wait_out(
  p_key text, p_token text, p_lease_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
  v_fence bigint;
BEGIN
  PERFORM __SCHEMA__.lock_check();
  -- lock_epoch filled (by this session's start, but for a session started
  -- on a standby before its promotion) outside the subtransaction below,
  -- which would undo it.
  PERFORM __SCHEMA__.lock_epoch_ms();
  LOOP
    -- In a subtransaction, undone when another's lease runs (so that the
    -- row's lock is not kept while this sleeps).
    BEGIN
      v_fence := __SCHEMA__.lock_draw(p_key, v_id.hi, v_id.lo, p_token, p_lease_ms);
      IF v_fence IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LG004';
      END IF;
    EXCEPTION WHEN SQLSTATE 'LG004' THEN
      NULL;
    END;
    EXIT WHEN v_fence IS NOT NULL;
    -- Rare (a holder cut off, a kept lock's client gone, a crash's wait):
    -- looked at again
    -- every 100 ms, so that a forced release or the lapse's end is seen
    -- soon.
    PERFORM pg_sleep(least(coalesce(__SCHEMA__.lock_lapse_ms(v_id.hi, v_id.lo, p_token),
                                    __SCHEMA__.lock_kept_for_ms(p_key, p_token), 1), 100)
                     / 1000.0);
  END LOOP;
  RETURN v_fence;
END
$$;

-- The rest of a try of session leases (locks/try_session.sql) that took
-- lock p_key's advisory lock but found it kept past a holder's release
-- (kept_locks): (true, fence) when the kept time is over by now;
-- (false, ms left of it), unlocked, otherwise.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_take_session(
  p_key text, p_token text, p_lease_ms bigint, OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  PERFORM __SCHEMA__.lock_check();
  n := __SCHEMA__.lock_kept_for_ms(p_key, p_token);
  IF n IS NOT NULL THEN
    acquired := false;
    PERFORM pg_advisory_unlock(v_id.hi, v_id.lo);
    RETURN;
  END IF;
  acquired := true;
  n := __SCHEMA__.lock_fence_next(clock_timestamp());
  PERFORM __SCHEMA__.lock_idle(p_lease_ms);
END
$$;

-- The rest of a wait of session leases (locks/wait_session.sql) granted
-- lock p_key's advisory lock but that found it kept past a holder's
-- release (kept_locks): waits the kept time out, then takes it for
-- p_lease_ms: its fencing token.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_wait_out_session(
  p_key text, p_token text, p_lease_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_left bigint;
  v_fence bigint;
BEGIN
  PERFORM __SCHEMA__.lock_check();
  LOOP
    v_left := __SCHEMA__.lock_kept_for_ms(p_key, p_token);
    EXIT WHEN v_left IS NULL;
    -- Looked at again every 100 ms, so that a forced release is seen soon.
    PERFORM pg_sleep(least(v_left, 100) / 1000.0);
  END LOOP;
  v_fence := __SCHEMA__.lock_fence_next(clock_timestamp());
  PERFORM __SCHEMA__.lock_idle(p_lease_ms);
  RETURN v_fence;
END
$$;

-- Renews this session's hold of lock p_key by p_token to p_lease_ms from
-- now, for a client of session leases: in the session's idle timeout
-- alone (nothing records the hold). The session lives, so it holds the
-- advisory lock it took.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_lease_session(
  p_key text, p_token text, p_fence bigint, p_lease_ms bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM __SCHEMA__.lock_idle(p_lease_ms);
  RETURN true;
END
$$;

-- Ends the lease p_token's attempt at lock p_key may have left in its row:
-- the attempt failed, or was given up, so its client never uses the lock
-- (its session's end frees the lock itself).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_forget(p_key text, p_token text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  UPDATE __SCHEMA__.lock_fences f SET expires_at = NULL
   WHERE f.hi = v_id.hi AND f.lo = v_id.lo AND f.token = p_token AND f.expires_at IS NOT NULL;
  RETURN FOUND;
END
$$;

-- Keeps this session's lock p_key, held by p_token with p_fence, until
-- p_keep_ms from now, past the session's end: the release of a lock
-- taken with at_least. Names the session for the kept hold, with either
-- mode of leases (a client of session leases names it back to
-- `lockguard` with the unlock at the kept time's end), so that a forced
-- release by the kept hold's token ends the session keeping it.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_keep(
  p_key text, p_token text, p_fence bigint, p_keep_ms bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO __SCHEMA__.kept_locks AS k (key, token, fence, until)
    VALUES (p_key, p_token, p_fence, clock_timestamp() + p_keep_ms * interval '1 millisecond')
    ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, fence = EXCLUDED.fence, until = EXCLUDED.until;
  -- lock_lease's but for lock_bound (a kept time outlives a crash in
  -- kept_locks, so it need not lengthen the wait after every crash), and
  -- whoever took the key's row last (version 12): a keeper of session
  -- leases, which writes no row per hold, writes its kept time into the
  -- key's row when there is one, so that a take of recorded leases, which
  -- reads the row and not kept_locks, waits it out as a lease (a key with
  -- no row is taken through lock_draw, which reads kept_locks). The
  -- keeper holds the advisory lock, so no take draws meanwhile.
  UPDATE __SCHEMA__.lock_fences f
     SET expires_at = clock_timestamp() + p_keep_ms * interval '1 millisecond',
         at = clock_timestamp(),
         token = p_token,
         fence = greatest(f.fence, p_fence)
   WHERE (f.hi, f.lo) = (SELECT i.hi, i.lo FROM __SCHEMA__.lock_id(p_key) i);
  PERFORM __SCHEMA__.lock_name(p_token, p_fence, p_keep_ms);
  RETURN true;
END
$$;

-- What lock p_key's sessions say of it: its holders (one, or none),
-- the ms left of the holder's lease (or of its kept time, or of a lease
-- or a crash's wait its next holder waits out: see lock_lapse_ms), its
-- waiters, its newest fencing token.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_inspect(p_key text,
  OUT holders integer, OUT left_ms bigint, OUT waiters bigint, OUT latest bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
BEGIN
  SELECT count(*) FILTER (WHERE s.granted)::integer, count(*) FILTER (WHERE NOT s.granted)
    INTO holders, waiters FROM __SCHEMA__.lock_sessions(v_id.hi, v_id.lo) s;
  left_ms := coalesce(__SCHEMA__.lock_held_ms(v_id.hi, v_id.lo), __SCHEMA__.lock_kept_ms(p_key),
                      __SCHEMA__.lock_lapse_ms(v_id.hi, v_id.lo, NULL));
  IF holders = 0 AND left_ms IS NOT NULL THEN
    holders := 1;
  END IF;
  SELECT f.fence INTO latest FROM __SCHEMA__.lock_fences f WHERE f.hi = v_id.hi AND f.lo = v_id.lo;
  -- A hold named by its session (a client of version 11's session
  -- leases, or a kept one) says its fence; one that names nothing (version
  -- 12's session leases) drew its fence from the sequence, whose newest
  -- draw is then the newest the key may have had.
  latest := greatest(latest,
                     (SELECT max(CASE WHEN s.label LIKE 'lg % % %'
                                      THEN ('x' || lpad(split_part(s.label, ' ', 3), 16, '0'))::bit(64)::bigint
                                      WHEN s.label NOT LIKE 'lg %'
                                      THEN pg_sequence_last_value('__SCHEMA__.lock_fence_seq'::regclass) END)
                        FROM __SCHEMA__.lock_sessions(v_id.hi, v_id.lo) s
                       WHERE s.granted));
END
$$;

-- Ends p_token's hold of lock p_key from any session (an operator's
-- forced release): its session is ended, which hands the lock to the
-- first waiter, and its lease and kept time in the rows end (a waiter
-- waiting them out sees it within 100 ms). True when p_token held it. A
-- hold its session's name does not name is p_token's when p_token is the
-- session's (lock_session_token).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_evict(p_key text, p_token text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_id record := __SCHEMA__.lock_id(p_key);
  v_s record;
  v_found boolean := false;
BEGIN
  -- A waiter granted the lock by what follows reads the row after this
  -- commits (see lock_draw).
  PERFORM 1 FROM __SCHEMA__.lock_fences f WHERE f.hi = v_id.hi AND f.lo = v_id.lo FOR UPDATE;
  FOR v_s IN SELECT * FROM __SCHEMA__.lock_sessions(v_id.hi, v_id.lo) s
              WHERE s.granted
                AND (split_part(s.label, ' ', 2) = p_token
                     OR (s.label NOT LIKE 'lg %' AND __SCHEMA__.lock_session_token(s.pid) = p_token)) LOOP
    PERFORM pg_terminate_backend(v_s.pid, 5000);
    v_found := true;
  END LOOP;
  UPDATE __SCHEMA__.lock_fences f SET expires_at = NULL
   WHERE f.hi = v_id.hi AND f.lo = v_id.lo AND f.token = p_token AND f.expires_at IS NOT NULL;
  DELETE FROM __SCHEMA__.kept_locks k WHERE k.key = p_key AND k.token = p_token;
  RETURN v_found OR FOUND;
END
$$;

-- The holders and waiters of every lock whose key p_like matches (a LIKE
-- pattern), a row each: its key, whether it waits, its token, its fence
-- (a holder's; 0 when it is not known) and the ms left of its lease (a
-- holder's, when known), the lock's newest fence; holders first, then
-- waiters in their order. A session its name does not name (a client of
-- session leases, version 12) is listed by its session's token
-- (lock_session_token), with neither fence nor lease, and the lock's
-- newest fence is then the sequence's newest draw. A kept lock whose
-- holder's session is gone is listed with the kept hold (and so is one
-- whose unnamed holder waits its kept time out).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_survey(p_like text)
RETURNS TABLE (key text, waits boolean, token text, fence bigint, left_ms bigint, latest bigint, since timestamptz)
LANGUAGE sql VOLATILE AS $$
  WITH s AS (
    SELECT n.key, NOT l.granted AS waits, a.application_name LIKE 'lg %' AS named,
           CASE WHEN a.application_name LIKE 'lg %' THEN split_part(a.application_name, ' ', 2)
                ELSE __SCHEMA__.lock_session_token(l.pid) END AS token,
           nullif(split_part(a.application_name, ' ', 3), '') AS fence_hex,
           nullif(split_part(a.application_name, ' ', 4), '') AS end_hex,
           n.fence AS latest, l.waitstart
      FROM pg_locks l
      -- A key's row, or for a key held with session leases alone, its name.
      JOIN (SELECT f.hi, f.lo, f.key, f.fence FROM __SCHEMA__.lock_fences f
            UNION ALL
            SELECT m.hi, m.lo, m.key, NULL FROM __SCHEMA__.lock_names m
             WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.lock_fences f
                                WHERE f.hi = m.hi AND f.lo = m.lo)) n
        ON l.classid = n.hi::oid AND l.objid = n.lo::oid
      JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.objsubid = 2
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND n.key LIKE p_like
  ), h AS (
    SELECT s.key, s.waits, s.token,
           CASE WHEN s.waits THEN NULL
                WHEN NOT s.named THEN 0
                ELSE ('x' || lpad(s.fence_hex, 16, '0'))::bit(64)::bigint END AS fence,
           CASE WHEN s.waits OR NOT s.named THEN NULL
                ELSE greatest(('x' || lpad(s.end_hex, 16, '0'))::bit(64)::bigint - __SCHEMA__.now_ms(), 0) END AS left_ms,
           CASE WHEN NOT s.waits AND NOT s.named
                THEN greatest(s.latest, pg_sequence_last_value('__SCHEMA__.lock_fence_seq'::regclass))
                ELSE s.latest END AS latest,
           s.waitstart
      FROM s
     WHERE s.waits
        OR (s.named AND s.fence_hex IS NOT NULL AND s.end_hex IS NOT NULL)
        -- A named session granted the lock but not yet named for the hold
        -- is not listed until it is; an unnamed one granted the lock while
        -- it is kept waits the kept time out, and the kept hold is listed.
        OR (NOT s.named AND NOT EXISTS (SELECT 1 FROM __SCHEMA__.kept_locks k
                                         WHERE k.key = s.key AND k.until > clock_timestamp()))
  )
  -- The newest fence: the row's, or its holder's, the greatest.
  SELECT h.key, h.waits, h.token, h.fence, h.left_ms,
         greatest(max(h.latest) OVER (PARTITION BY h.key), max(h.fence) OVER (PARTITION BY h.key)),
         h.waitstart
    FROM h
  UNION ALL
  SELECT k.key, false, k.token, k.fence, __SCHEMA__.lock_kept_ms(k.key), k.fence, NULL
    FROM __SCHEMA__.kept_locks k
   WHERE k.key LIKE p_like AND k.until > clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM h WHERE h.key = k.key AND NOT h.waits)
$$;

-- Removes state that no longer matters: leases and queue places long over,
-- tokens the clock passed long ago, expired counters, limiter state and
-- mark sets, and marks of old generations. It takes no key's lock: rows are
-- rechecked as they are deleted, so state an operation just renewed stays,
-- and a row an operation locked to check and write is deleted only after
-- that operation, if it is still over. Returns the rows removed.
CREATE OR REPLACE FUNCTION __SCHEMA__.sweep() RETURNS bigint
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_total bigint := 0;
  v_n bigint;
BEGIN
  DELETE FROM __SCHEMA__.holders h WHERE h.expires_at < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.waiters w WHERE w.deadline < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  -- Mail is read within moments by a live bell; a bell renews its row
  -- every minute.
  DELETE FROM __SCHEMA__.mail m WHERE m.at < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.bells b WHERE b.at < v_now - interval '5 minutes';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  -- A token a minute behind the clock adds nothing: the next is drawn
  -- above the clock anyway (next_after).
  DELETE FROM __SCHEMA__.latest_fences f
    WHERE f.fence < (extract(epoch FROM v_now - interval '1 minute') * 1000000)::bigint;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.counters c WHERE c.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.limits l WHERE l.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.limit_log g
    WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.limits l WHERE l.key = g.key);
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.kept_locks k WHERE k.until < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.lock_fences n WHERE n.at < v_now - interval '1 day';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.lock_names n WHERE n.at < v_now - interval '1 day';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.mark_sets s WHERE s.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.marks m WHERE NOT EXISTS (
    SELECT 1 FROM __SCHEMA__.mark_sets s WHERE s.key = m.key AND s.generation = m.generation);
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  RETURN v_total;
END
$$;
