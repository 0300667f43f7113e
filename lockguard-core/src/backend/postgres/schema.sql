-- lockguard's tables and functions, all in one schema (`lockguard` unless
-- configured; `__SCHEMA__` below). Created by lockguard on first connect
-- (or by hand, from this file, with the schema name substituted), under an
-- advisory lock so that clients starting together create it once. Nothing
-- here ever drops a table.
--
-- Every operation is one statement (a function call), so one round trip and
-- one transaction. Operations on one key are serialized by a transaction
-- advisory lock on the key's hash, taken first: like a Redis script, each
-- sees the key as the previous one left it. Time is the database's:
-- clock_timestamp() read after that lock, never a client's clock.

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

CREATE TABLE IF NOT EXISTS __SCHEMA__.meta (
  version integer NOT NULL
);

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

-- The wait queue of each lock or semaphore, first come first served
-- (arrival). A waiter's place is kept until its deadline, which each of its
-- attempts moves on; a release hands the lock to the first live waiter and
-- notifies its client alone (NOTIFY on the waiter's channel).
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

-- Fencing tokens and counter versions: one sequence, so every token is
-- greater than every token drawn before it, for any key. A sequence never
-- goes back, not even across a crash.
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

-- Fenced values: the newest token accepted, exact at any size.
CREATE TABLE IF NOT EXISTS __SCHEMA__.fenced (
  key text PRIMARY KEY,
  fence numeric(20, 0) NOT NULL,
  value bytea NOT NULL
);

-- The database's time in µs.
CREATE OR REPLACE FUNCTION __SCHEMA__.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- Serializes the operations on one key until the end of the transaction.
-- Only under read committed does each statement after it see the commits
-- of the operations it waited for; under repeatable read or serializable
-- the snapshot predates the lock, and two holders could both find the key
-- free. So anything else is refused.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_key(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'lockguard needs read committed isolation; this session runs %',
      current_setting('transaction_isolation') USING ERRCODE = 'feature_not_supported';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 7164));
END
$$;

-- Hands up to p_free free permits (a free lock) to the first live waiters,
-- each notified alone with 'token fence attempt', stopping before p_me (a
-- waiter asking for itself). A lock handed on is reserved for its waiter
-- until its place would have lapsed (a dead waiter costs the queue at most
-- its timeout), never less than 50 ms. Returns the permits left.
CREATE OR REPLACE FUNCTION __SCHEMA__.hand_out(p_key text, p_free integer, p_me text, p_now timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_first __SCHEMA__.waiters%ROWTYPE;
  v_fence bigint;
BEGIN
  WHILE p_free > 0 LOOP
    SELECT * INTO v_first FROM __SCHEMA__.waiters w
      WHERE w.key = p_key ORDER BY w.arrival LIMIT 1;
    EXIT WHEN NOT FOUND;
    IF v_first.deadline <= p_now THEN
      -- Silent past its deadline: dropped when it reaches the head.
      DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = v_first.token;
      CONTINUE;
    END IF;
    EXIT WHEN v_first.token = p_me;
    v_fence := nextval('__SCHEMA__.fences');
    DELETE FROM __SCHEMA__.waiters w WHERE w.key = p_key AND w.token = v_first.token;
    INSERT INTO __SCHEMA__.holders AS h (key, token, expires_at, fence)
      VALUES (p_key, v_first.token, greatest(v_first.deadline, p_now + interval '50 milliseconds'), v_fence)
      ON CONFLICT (key, token) DO UPDATE SET expires_at = EXCLUDED.expires_at, fence = EXCLUDED.fence;
    PERFORM pg_notify(v_first.channel, v_first.token || ' ' || v_fence || ' ' || v_first.attempt);
    p_free := p_free - 1;
  END LOOP;
  RETURN p_free;
END
$$;

-- One attempt to take a lock (p_permits = 1) or a semaphore permit: takes
-- it when free and nobody live queues ahead; claims one a release handed to
-- p_token (with p_lease_ms, keeping the fence announced); otherwise, with a
-- p_wait_ms, joins the queue (or keeps its place) until p_wait_ms from now.
-- Returns (true, fence) when taken, (false, ms until the first lease ends).
CREATE OR REPLACE FUNCTION __SCHEMA__.acquire(
  p_key text, p_token text, p_lease_ms bigint, p_permits integer,
  p_wait_ms bigint, p_channel text, p_attempt bigint,
  OUT acquired boolean, OUT n bigint)
LANGUAGE plpgsql AS $$
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
      VALUES (p_key, p_token, v_now + p_lease_ms * interval '1 millisecond', nextval('__SCHEMA__.fences'))
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
RETURNS boolean LANGUAGE plpgsql AS $$
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
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  UPDATE __SCHEMA__.holders h SET expires_at = v_now + p_lease_ms * interval '1 millisecond'
    WHERE h.key = p_key AND h.token = p_token AND h.expires_at > v_now;
  RETURN FOUND;
END
$$;

-- A lock or semaphore as it is now: live holders, ms left of the lease that
-- ends first (NULL when none), queued waiters, the newest fencing token.
CREATE OR REPLACE FUNCTION __SCHEMA__.inspect(
  p_key text, OUT holders bigint, OUT left_ms bigint, OUT waiting bigint, OUT latest bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
BEGIN
  SELECT count(*), ceil(extract(epoch FROM min(h.expires_at) - v_now) * 1000)::bigint
    INTO holders, left_ms
    FROM __SCHEMA__.holders h WHERE h.key = p_key AND h.expires_at > v_now;
  SELECT count(*) INTO waiting FROM __SCHEMA__.waiters w WHERE w.key = p_key;
  SELECT CASE WHEN s.is_called THEN s.last_value END INTO latest FROM __SCHEMA__.fences s;
END
$$;

-- Adds p_delta to a counter (a counter that expired starts again from 0);
-- an expiry is set on a counter without one. Returns the new value.
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_add(p_key text, p_delta bigint, p_ttl_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_value bigint;
BEGIN
  INSERT INTO __SCHEMA__.counters AS c (key, value, version, expires_at)
    VALUES (p_key, p_delta, nextval('__SCHEMA__.fences'),
            CASE WHEN p_ttl_ms > 0 THEN v_now + p_ttl_ms * interval '1 millisecond' END)
    ON CONFLICT (key) DO UPDATE SET
      value = CASE WHEN c.expires_at <= v_now THEN EXCLUDED.value ELSE c.value + EXCLUDED.value END,
      version = EXCLUDED.version,
      expires_at = CASE WHEN c.expires_at > v_now THEN c.expires_at ELSE EXCLUDED.expires_at END
    RETURNING c.value INTO v_value;
  RETURN v_value;
END
$$;

-- Takes p_n only if at least p_n is there. Returns (true, new value) or
-- (false, current value).
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_take(
  p_key text, p_n bigint, p_ttl_ms bigint, OUT taken boolean, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_value bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  SELECT c.value INTO v_value FROM __SCHEMA__.counters c
    WHERE c.key = p_key AND (c.expires_at IS NULL OR c.expires_at > v_now);
  v_value := coalesce(v_value, 0);
  IF v_value - p_n < 0 THEN
    taken := false;
    n := v_value;
    RETURN;
  END IF;
  taken := true;
  n := __SCHEMA__.counter_add(p_key, -p_n, p_ttl_ms);
END
$$;

-- Sets a counter, only if its version is p_expected (NULL: any). Returns
-- (true, new version) or (false, current version).
CREATE OR REPLACE FUNCTION __SCHEMA__.counter_set(
  p_key text, p_value bigint, p_expected text, p_ttl_ms bigint, OUT done boolean, OUT version bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_version bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  SELECT c.version INTO v_version FROM __SCHEMA__.counters c
    WHERE c.key = p_key AND (c.expires_at IS NULL OR c.expires_at > v_now);
  v_version := coalesce(v_version, 0);
  IF p_expected IS NOT NULL AND p_expected <> v_version::text THEN
    done := false;
    version := v_version;
    RETURN;
  END IF;
  INSERT INTO __SCHEMA__.counters AS c (key, value, version, expires_at)
    VALUES (p_key, p_value, nextval('__SCHEMA__.fences'),
            CASE WHEN p_ttl_ms > 0 THEN v_now + p_ttl_ms * interval '1 millisecond' END)
    ON CONFLICT (key) DO UPDATE SET
      value = EXCLUDED.value,
      version = EXCLUDED.version,
      expires_at = CASE WHEN c.expires_at > v_now THEN c.expires_at ELSE EXCLUDED.expires_at END
    RETURNING c.version INTO version;
  done := true;
END
$$;

-- Marks p_member in a set; true the first time. An expiry is set on a set
-- without one; a set that expired starts empty.
CREATE OR REPLACE FUNCTION __SCHEMA__.mark_once(p_key text, p_member text, p_ttl_ms bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_set __SCHEMA__.mark_sets%ROWTYPE;
  v_expiry timestamptz;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  v_expiry := CASE WHEN p_ttl_ms > 0 THEN v_now + p_ttl_ms * interval '1 millisecond' END;
  SELECT * INTO v_set FROM __SCHEMA__.mark_sets s WHERE s.key = p_key;
  IF NOT FOUND THEN
    v_set.generation := nextval('__SCHEMA__.fences');
    INSERT INTO __SCHEMA__.mark_sets (key, generation, expires_at)
      VALUES (p_key, v_set.generation, v_expiry);
  ELSIF v_set.expires_at <= v_now THEN
    v_set.generation := nextval('__SCHEMA__.fences');
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
LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint;
  v_tat bigint;
  v_new bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := __SCHEMA__.now_us();
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
CREATE OR REPLACE FUNCTION __SCHEMA__.fixed_window(
  p_key text, p_limit bigint, p_window_ms bigint, p_cost bigint, p_peek boolean,
  OUT allowed boolean, OUT used bigint, OUT left_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_row __SCHEMA__.limits%ROWTYPE;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := clock_timestamp();
  SELECT * INTO v_row FROM __SCHEMA__.limits l WHERE l.key = p_key AND l.expires_at > v_now;
  IF NOT FOUND THEN
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
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at;
    RETURN;
  END IF;
  left_ms := floor(extract(epoch FROM v_row.expires_at - v_now) * 1000)::bigint;
  IF v_row.value + p_cost > p_limit THEN
    allowed := false;
    used := v_row.value;
    RETURN;
  END IF;
  IF p_peek THEN
    allowed := true;
    used := v_row.value + p_cost;
    RETURN;
  END IF;
  UPDATE __SCHEMA__.limits l SET value = l.value + p_cost WHERE l.key = p_key
    RETURNING l.value INTO used;
  allowed := true;
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
LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint;
  v_sum bigint;
  v_freed bigint;
  v_need bigint;
  v_entry record;
BEGIN
  PERFORM __SCHEMA__.lock_key(p_key);
  v_now := __SCHEMA__.now_us();
  SELECT l.value INTO v_sum FROM __SCHEMA__.limits l
    WHERE l.key = p_key AND l.expires_at > clock_timestamp();
  IF NOT FOUND THEN
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

-- Removes state that no longer matters: leases and queue places long over,
-- expired counters, limiter state and mark sets, and marks of old
-- generations. Rows are rechecked as they are deleted, so state an
-- operation just renewed stays. Returns the rows removed.
CREATE OR REPLACE FUNCTION __SCHEMA__.sweep() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_total bigint := 0;
  v_n bigint;
BEGIN
  DELETE FROM __SCHEMA__.holders h WHERE h.expires_at < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.waiters w WHERE w.deadline < v_now - interval '1 minute';
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.counters c WHERE c.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.limits l WHERE l.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.limit_log g
    WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.limits l WHERE l.key = g.key);
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.mark_sets s WHERE s.expires_at < v_now;
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  DELETE FROM __SCHEMA__.marks m WHERE NOT EXISTS (
    SELECT 1 FROM __SCHEMA__.mark_sets s WHERE s.key = m.key AND s.generation = m.generation);
  GET DIAGNOSTICS v_n = ROW_COUNT; v_total := v_total + v_n;
  RETURN v_total;
END
$$;
