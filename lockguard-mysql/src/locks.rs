//! Locks as the server's own user locks (`GET_LOCK`, schema versions 9
//! to 12), on core's engine of session locks ([`SessionLocks`]).
//!
//! Each held or awaited lock has a database session of its own, taken
//! from this client's idle sessions or opened for it: a try is one `CALL`
//! (`lock_try` in `locks.sql`), a wait one that blocks in the server
//! (`lock_wait`, in `GET_LOCK`) until the server grants the lock, which it
//! does the moment the holder releases it or its session ends, to its
//! first waiter, with no statement of anyone's. A release (`lock_release`)
//! unlocks on the hold's session, which then serves later holds. Fencing
//! tokens and leases live in a MEMORY table: a lock writes to the disk
//! only the longest lease any lock took, when a session first asks for a
//! longer one (`lock_bound_at_least`).
//!
//! A hold lasts while its session lives and its lease is renewed: the
//! client unlocks when a lease ends unrenewed, and the server ends a
//! session left idle past its hold's lease (`wait_timeout`, in whole
//! seconds: its client paused or cut off). A session that ends (the
//! database restarted, an operator's forced release) takes its hold with
//! it, and its holder learns it at its next renewal. After a restart,
//! which empties the MEMORY table, no lock is taken anew until the
//! longest lease any lock took has passed since the first session
//! started after it (`lock_session_start`, `lock_epoch`).
//!
//! A client of session leases ([`LockLeases::Session`], on MariaDB)
//! records nothing: its try is one statement (`GET_LOCK` and the next
//! value of `lock_fence_seq`, [`SessionSql`]), its wait one round trip,
//! its release the bare `RELEASE_LOCK`, and a session's end hands the
//! lock on at once.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Pool, Row};

use lockguard_core::Result;
use lockguard_core::store::net;
use lockguard_core::store::{
    HoldOf, LockLeases, LockSessions, NamedKeys, SessionLocks, Token, Tried, Waited,
};

use crate::error::{garbage, is_gone, mysql_error, read_row};
use crate::schema::{NOW, clock_us, lock_h};

/// The client's locks: core's engine on this store's sessions.
pub(crate) type Locks = SessionLocks<MySqlSessions>;

/// One session of the client's locks.
pub(crate) struct Session {
    conn: tokio::sync::Mutex<Conn>,
    /// The session's connection id, which a `KILL QUERY` names.
    id: u32,
    /// Set when a statement found the connection gone.
    closed: AtomicBool,
    /// The longest lease the schema has recorded (`lock_bound`), as far
    /// as this session knows: read when it opened, raised as it records
    /// longer ones. A lock asked for on a longer lease records it first
    /// ([`MySqlSessions::record_lease`]).
    bound_ms: AtomicI64,
    /// The session's `wait_timeout` in seconds, as this client last set it
    /// (-1: not known). A client of session leases sets it before a take
    /// only when the lease needs another ([`wait_timeout_for`]).
    wait_timeout_s: AtomicI64,
}

impl Session {
    /// The `wait_timeout` this session is to be given before a hold on a
    /// lease of `lease_ms`, `None` when it has it; noted as not known
    /// until the statement that sets it answers ([`Self::set_up_done`]).
    fn set_up_needed(&self, lease_ms: i64) -> Option<i64> {
        let s = wait_timeout_for(lease_ms);
        (self.wait_timeout_s.swap(-1, Ordering::Relaxed) != s).then_some(s)
    }

    /// Notes this session's `wait_timeout` as the one for `lease_ms`.
    fn set_up_done(&self, lease_ms: i64) {
        self.wait_timeout_s
            .store(wait_timeout_for(lease_ms), Ordering::Relaxed);
    }

    /// `answer`, of a statement run on this session, as the store's
    /// result: an error about `what`, the session marked closed when the
    /// connection was found gone.
    fn answered<T>(
        &self,
        answer: std::result::Result<T, mysql_async::Error>,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<T> {
        answer.map_err(|e| {
            if is_gone(&e) {
                self.closed.store(true, Ordering::Relaxed);
            }
            mysql_error(e, &what())
        })
    }
}

/// The `wait_timeout` (whole seconds) of a session holding a lock on a
/// lease of `lease_ms`: the lease and a slack (a quarter of it, between
/// 50 ms and 5 s), as `locks_session.sql` computes it.
fn wait_timeout_for(lease_ms: i64) -> i64 {
    let lease_ms = lease_ms.clamp(0, 315_360_000_000);
    let slack = (lease_ms / 4).clamp(50, 5_000);
    ((lease_ms + slack + 999) / 1_000).min(31_536_000)
}

/// How far ahead of the clock `lock_fence_seq` stands when a lock is kept
/// past its release somewhere (µs, see `locks.sql`): a session lease's
/// draw further ahead reads its key's kept time before it holds.
const KEPT_AHEAD_US: i64 = 2_000_000;

/// The statements of a client of session leases ([`LockLeases::Session`]):
/// a hold records nothing, the try is one statement and the release the
/// bare `RELEASE_LOCK`.
struct SessionSql {
    /// The table prefix, for the wait's text.
    prefix: String,
    /// `GET_LOCK` of key `?` without waiting, then the next fencing token
    /// (drawn either way: a busy try's, negated, tells whether some lock
    /// is kept): (the token, negative when busy; the clock in µs).
    try_lock: String,
    /// `RELEASE_LOCK` of key `?`: 1 when this session held it.
    release: String,
    /// Whether this session holds key `?`'s user lock.
    held: String,
    /// The sequence lifted above the clock, and a token drawn.
    rebase: String,
    /// The µs left of key `?` kept past a release by another token `?`.
    kept: String,
    /// Key `?` (its row key `?`) named in `lock_names`.
    name: String,
}

impl SessionSql {
    fn new(prefix: &str) -> Self {
        let lock = format!("CONCAT('lockguard ', HEX({}))", lock_h(prefix, "?"));
        let now = clock_us(NOW);
        Self {
            prefix: prefix.to_owned(),
            try_lock: format!(
                "SELECT IF(GET_LOCK({lock}, 0) = 1, NEXTVAL({prefix}lock_fence_seq), \
                           -NEXTVAL({prefix}lock_fence_seq)), {now}"
            ),
            release: format!("SELECT RELEASE_LOCK({lock})"),
            held: format!("SELECT IS_USED_LOCK({lock}) <=> CONNECTION_ID()"),
            rebase: format!("CALL {prefix}lock_fence_rebase()"),
            kept: format!("CALL {prefix}lock_kept_left(?, ?)"),
            name: format!(
                "REPLACE INTO {prefix}lock_names (h, k, seen_us) VALUES ({}, ?, {now})",
                lock_h(prefix, "?")
            ),
        }
    }

    /// The wait for key `key`, in text (sent with the wait's session set
    /// up first, `set_up`, when it needs it): the session noted as the
    /// key's waiter in `lock_waits` (for inspection and surveys, named by
    /// its session as a holder is: see `lock_evict`), then `GET_LOCK`
    /// until the server grants it and the next fencing token, in one
    /// round trip. Answers (fence, the clock in µs, µs waited).
    fn wait(&self, key: &str, set_up: Option<i64>) -> String {
        let p = &self.prefix;
        let k = format!("X'{}'", hex(key.as_bytes()));
        let h = lock_h(p, &k);
        let now = clock_us(NOW);
        let began = clock_us("NOW(6)");
        let set_up = set_up.map_or(String::new(), |s| {
            format!("SET SESSION wait_timeout = {s}; ")
        });
        format!(
            "{set_up}REPLACE INTO {p}lock_waits (conn, h, k, token, since_us) \
               VALUES (CONNECTION_ID(), {h}, {k}, \
                       CONCAT('00000000000000005e55', LPAD(LOWER(HEX(CONNECTION_ID())), 12, '0')), \
                       {now}); \
             SELECT IF(GET_LOCK(CONCAT('lockguard ', HEX({h})), 31536000) = 1, \
                       NEXTVAL({p}lock_fence_seq), NULL), {now}, {now} - {began}"
        )
    }
}

/// `bytes` in hex digits.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// How this client opens the sessions of its locks.
pub(crate) struct MySqlSessions {
    /// The sessions' settings (time zone, isolation: the store's).
    opts: mysql_async::Opts,
    /// Where a wait's cancel is sent from.
    pool: Pool,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The statements, with the table prefix filled in.
    try_sql: String,
    wait_sql: String,
    release_sql: String,
    lease_sql: String,
    forget_sql: String,
    start_sql: String,
    bound_sql: String,
    /// The statements of session leases; `None` with recorded leases.
    session: Option<SessionSql>,
    /// With session leases: the keys this client named in `lock_names`
    /// (swept a day after a key was named).
    named: NamedKeys,
}

impl MySqlSessions {
    /// Sessions opened with `opts`, calling the procedures of tables
    /// named with `prefix`; a wait is cancelled over `pool`. Their holds'
    /// leases are `leases`.
    pub(crate) fn new(
        opts: mysql_async::Opts,
        pool: Pool,
        prefix: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
        leases: LockLeases,
    ) -> Self {
        Self {
            session: (leases == LockLeases::Session).then(|| SessionSql::new(prefix)),
            named: NamedKeys::new(),
            opts,
            pool,
            connect_timeout,
            response_timeout,
            try_sql: format!("CALL {prefix}lock_try(?, ?, ?)"),
            wait_sql: format!("CALL {prefix}lock_wait(?, ?, ?)"),
            release_sql: format!("CALL {prefix}lock_release(?, ?)"),
            lease_sql: format!("CALL {prefix}lock_lease(?, ?, ?, ?, ?)"),
            forget_sql: format!("CALL {prefix}lock_forget(?, ?)"),
            start_sql: format!("CALL {prefix}lock_session_start()"),
            bound_sql: format!("CALL {prefix}lock_bound_at_least(?)"),
        }
    }

    /// Records `lease_ms` as the schema's longest lease, durably, when it
    /// is longer than `session` knows of: the wait after a restart, which
    /// empties the leases' MEMORY table, waits that long (`lock_epoch` in
    /// locks.sql). One call the first time a session asks for a longer
    /// lease than any before; none after, so the try and the wait never
    /// read the bound.
    async fn record_lease(&self, session: &Session, lease_ms: i64, key: &str) -> Result<()> {
        if self.session.is_some() || lease_ms <= session.bound_ms.load(Ordering::Relaxed) {
            return Ok(());
        }
        let what = || format!("recording the lease of {key:?}");
        let mut conn = session.conn.lock().await;
        let recorded = conn.exec_drop(&self.bound_sql, (lease_ms,)).await;
        session.answered(recorded, &what)?;
        session.bound_ms.fetch_max(lease_ms, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `sql` on `session`: its one row. A connection found gone
    /// marks the session closed.
    async fn one(
        &self,
        session: &Session,
        sql: &str,
        params: Params,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Row> {
        let mut conn = session.conn.lock().await;
        let answer = conn.exec_first::<Row, _, _>(sql, params).await;
        session
            .answered(answer, what)?
            .ok_or_else(|| garbage(&what(), "no row"))
    }
}

/// What a session lease's take found after its grant: its fencing token,
/// and whether a lock kept past a release (`at_least`) stays kept so much
/// longer.
enum Settled {
    Fence(i64),
    Kept(Duration, i64),
}

impl MySqlSessions {
    /// Runs `sql` (text: one statement or more) on `session`: the last
    /// row of its last answer. A connection found gone marks the session
    /// closed.
    async fn text(
        &self,
        session: &Session,
        sql: &str,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Row> {
        let mut conn = session.conn.lock().await;
        let read = async {
            let mut answer = conn.query_iter(sql).await?;
            let mut last = None;
            while !answer.is_empty() {
                if let Some(row) = answer.collect::<Row>().await?.pop() {
                    last = Some(row);
                }
            }
            Ok::<_, mysql_async::Error>(last)
        };
        let answer = read.await;
        session
            .answered(answer, what)?
            .ok_or_else(|| garbage(&what(), "no row"))
    }

    /// Gives `session` the `wait_timeout` of a hold on `lease_ms`, unless
    /// it has it: the server ends the session of a client paused or cut
    /// off with the lock, idle past its lease and a slack.
    async fn set_up(
        &self,
        session: &Session,
        lease_ms: i64,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<()> {
        if let Some(s) = session.set_up_needed(lease_ms) {
            let mut conn = session.conn.lock().await;
            let set = conn
                .query_drop(format!("SET SESSION wait_timeout = {s}"))
                .await;
            session.answered(set, what)?;
        }
        session.set_up_done(lease_ms);
        Ok(())
    }

    /// A session lease's take granted with `fence` at `now` (µs): the
    /// sequence lifted when it stood at or behind the clock, and the key's
    /// kept time read when the sequence stands far enough ahead to say
    /// that some lock is kept (`lock_fence_seq` in locks.sql).
    async fn settle(
        &self,
        sql: &SessionSql,
        session: &Session,
        key: &str,
        token: &Token,
        (mut fence, mut now): (i64, i64),
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Settled> {
        if fence <= now {
            let row = self.one(session, &sql.rebase, Params::Empty, what).await?;
            (fence, now) = read_row::<(i64, i64)>(row, what)?;
        }
        if fence - now > KEPT_AHEAD_US
            && let Some(left) = self.kept_left(sql, session, key, token, what).await?
        {
            return Ok(Settled::Kept(left, fence));
        }
        Ok(Settled::Fence(fence))
    }

    /// How long key `key` stays kept past a release of another token than
    /// `token`'s, if it is.
    async fn kept_left(
        &self,
        sql: &SessionSql,
        session: &Session,
        key: &str,
        token: &Token,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Option<Duration>> {
        let params = (key, token.as_str()).into();
        let row = self.one(session, &sql.kept, params, what).await?;
        Ok(read_row::<Option<i64>>(row, what)?
            .map(|us| Duration::from_micros(us.max(1).unsigned_abs())))
    }

    /// Names `key` in `lock_names`, for surveys, unless this client named
    /// it within the hour: one statement at a client's first hold of a
    /// key, and once an hour after.
    async fn name(
        &self,
        sql: &SessionSql,
        session: &Session,
        key: &str,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<()> {
        if !self.named.due(key) {
            return Ok(());
        }
        let mut conn = session.conn.lock().await;
        let named = conn.exec_drop(&sql.name, (key, key)).await;
        session.answered(named, what)?;
        self.named.named(key);
        Ok(())
    }

    /// A try of session leases: `GET_LOCK` and the next token in one
    /// statement; a lock kept past a release is given back.
    async fn try_session(
        &self,
        sql: &SessionSql,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Tried> {
        let what = || format!("acquiring {key:?}");
        self.set_up(session, net::millis(lease), &what).await?;
        let row = self
            .one(session, &sql.try_lock, (key,).into(), &what)
            .await?;
        let (fence, now) = read_row::<(i64, i64)>(row, &what)?;
        if fence < 0 {
            // Busy: a lock kept past its release says for how long.
            let kept = if -fence - now > KEPT_AHEAD_US {
                self.kept_left(sql, session, key, token, &what).await?
            } else {
                None
            };
            return Ok(Tried::Busy(kept));
        }
        match self
            .settle(sql, session, key, token, (fence, now), &what)
            .await?
        {
            Settled::Fence(fence) => {
                self.name(sql, session, key, &what).await?;
                Ok(Tried::Taken(net::fence(Some(fence), &what)?))
            }
            Settled::Kept(left, _) => {
                let row = self
                    .one(session, &sql.release, (key,).into(), &what)
                    .await?;
                read_row::<Option<i64>>(row, &what)?;
                Ok(Tried::Busy(Some(left)))
            }
        }
    }

    /// A wait of session leases: the session noted as the key's waiter,
    /// then `GET_LOCK` until the server grants it and the next token, in
    /// one round trip; a lock kept past a release is waited out, holding
    /// the user lock.
    async fn wait_session(
        &self,
        sql: &SessionSql,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Waited> {
        let what = || format!("waiting for {key:?}");
        let lease_ms = net::millis(lease);
        let set_up = session.set_up_needed(lease_ms);
        let row = self.text(session, &sql.wait(key, set_up), &what).await?;
        session.set_up_done(lease_ms);
        let (fence, now, waited) = read_row::<(Option<i64>, i64, i64)>(row, &what)?;
        let Some(fence) = fence else {
            return Err(garbage(&what(), "no grant"));
        };
        let mut waited = net::micros(Some(waited));
        let fence = match self
            .settle(sql, session, key, token, (fence, now), &what)
            .await?
        {
            Settled::Fence(fence) => fence,
            Settled::Kept(mut left, fence) => loop {
                // Waited out holding the user lock (a forced release of
                // the kept hold, which removes its row, ends it sooner);
                // the lease begins after it.
                let nap = left.min(Duration::from_millis(50));
                tokio::time::sleep(nap).await;
                waited += nap;
                match self.kept_left(sql, session, key, token, &what).await? {
                    Some(more) => left = more,
                    None => break fence,
                }
            },
        };
        self.name(sql, session, key, &what).await?;
        Ok(Waited::new(net::fence(Some(fence), &what)?, waited))
    }
}

impl LockSessions for MySqlSessions {
    type Session = Session;
    type Cancel = u32;

    fn name(&self) -> &'static str {
        "mysql"
    }

    fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    async fn connect(&self) -> Result<Session> {
        const WHAT: &str = "opening a mysql session for a lock";
        let timeout = self.connect_timeout;
        let answer = tokio::time::timeout(timeout, async {
            Conn::new(self.opts.clone())
                .await
                .map_err(|e| mysql_error(e, WHAT))
        })
        .await;
        let mut conn =
            net::within(timeout, "mysql", || WHAT.to_owned(), answer).map_err(net::unreachable)?;
        // The session's start: the first after a restart notes it (the
        // wait after it counts from then, not from the first take of a
        // lock with no record, which may come long after), and the
        // schema's longest lease is read.
        let started = tokio::time::timeout(self.response_timeout, async {
            conn.query_drop(crate::schema::NO_STATEMENT_LIMIT)
                .await
                .map_err(|e| mysql_error(e, WHAT))?;
            conn.query_first::<i64, _>(&self.start_sql)
                .await
                .map_err(|e| mysql_error(e, WHAT))
        })
        .await;
        let bound_ms = net::within(self.response_timeout, "mysql", || WHAT.to_owned(), started)?
            .ok_or_else(|| garbage(WHAT, "no row"))?;
        Ok(Session {
            id: conn.id(),
            conn: tokio::sync::Mutex::new(conn),
            closed: AtomicBool::new(false),
            bound_ms: AtomicI64::new(bound_ms),
            wait_timeout_s: AtomicI64::new(-1),
        })
    }

    fn is_closed(&self, session: &Session) -> bool {
        session.closed.load(Ordering::Relaxed)
    }

    fn cancel_handle(&self, session: &Session) -> u32 {
        session.id
    }

    /// `KILL QUERY` on the waiting session, from a pooled connection.
    async fn cancel(&self, id: u32) {
        let killed = tokio::time::timeout(self.response_timeout, async {
            let mut conn = self.pool.get_conn().await?;
            conn.query_drop(format!("KILL QUERY {id}")).await
        })
        .await;
        match killed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "cancelling a mysql lock wait"),
            Err(_) => tracing::debug!("cancelling a mysql lock wait: no answer in time"),
        }
    }

    async fn try_lock(
        &self,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Tried> {
        if let Some(sql) = &self.session {
            return self.try_session(sql, session, key, token, lease).await;
        }
        let what = || format!("acquiring {key:?}");
        self.record_lease(session, net::millis(lease), key).await?;
        let params = (key, token.as_str(), net::millis(lease)).into();
        let row = self.one(session, &self.try_sql, params, &what).await?;
        match read_row::<(i64, Option<i64>, Option<i64>)>(row, &what)? {
            (1, n, _) => Ok(Tried::Taken(net::fence(n, &what)?)),
            (0, left, _) => Ok(Tried::Busy(
                left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
            )),
            other => Err(garbage(&what(), other)),
        }
    }

    async fn wait(
        &self,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Waited> {
        if let Some(sql) = &self.session {
            return self.wait_session(sql, session, key, token, lease).await;
        }
        let what = || format!("waiting for {key:?}");
        self.record_lease(session, net::millis(lease), key).await?;
        let params = (key, token.as_str(), net::millis(lease)).into();
        let row = self.one(session, &self.wait_sql, params, &what).await?;
        match read_row::<(i64, Option<i64>, Option<i64>)>(row, &what)? {
            (1, n, waited) => Ok(Waited::new(net::fence(n, &what)?, net::micros(waited))),
            other => Err(garbage(&what(), other)),
        }
    }

    async fn unlock(&self, session: &Session, key: &str, token: &Token) -> Result<bool> {
        let what = || format!("releasing {key:?}");
        if let Some(sql) = &self.session {
            // The bare unlock: 1 when this session held it.
            let row = self
                .one(session, &sql.release, (key,).into(), &what)
                .await?;
            return Ok(read_row::<Option<i64>>(row, &what)? == Some(1));
        }
        let params = (key, token.as_str()).into();
        let row = self.one(session, &self.release_sql, params, &what).await?;
        Ok(read_row::<i64>(row, &what)? == 1)
    }

    /// A kept hold's time is recorded in the key's row, which a successor
    /// waits out, the client gone or not, and in an InnoDB row, which
    /// outlives a restart of the server.
    async fn renew(
        &self,
        session: &Session,
        hold: &HoldOf<'_>,
        lease: Duration,
        keep: bool,
    ) -> Result<bool> {
        let what = || format!("extending {:?}", hold.key);
        if let Some(sql) = self.session.as_ref().filter(|_| !keep) {
            // Nothing recorded: the session still holds the user lock, and
            // is ended by the server if idle past this lease.
            self.set_up(session, net::millis(lease), &what).await?;
            let row = self
                .one(session, &sql.held, (hold.key,).into(), &what)
                .await?;
            return Ok(read_row::<i64>(row, &what)? == 1);
        }
        let fence = i64::try_from(hold.fence.get()).unwrap_or(i64::MAX);
        let params = (
            hold.key,
            hold.token.as_str(),
            fence,
            net::millis(lease),
            i8::from(keep),
        )
            .into();
        // (lock_lease sets the session's wait_timeout for the lease.)
        session.wait_timeout_s.store(-1, Ordering::Relaxed);
        let row = self.one(session, &self.lease_sql, params, &what).await?;
        let held = read_row::<i64>(row, &what)? == 1;
        if held {
            session.set_up_done(net::millis(lease));
        }
        Ok(held)
    }

    async fn forget(&self, session: &Session, key: &str, token: &Token) -> Result<()> {
        if self.session.is_some() {
            // A session lease records nothing to end.
            return Ok(());
        }
        let what = || format!("ending an attempt at {key:?}");
        let params = (key, token.as_str()).into();
        self.one(session, &self.forget_sql, params, &what).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session lease's `wait_timeout` is the lease and a quarter of it
    /// (50 ms to 5 s), in whole seconds rounded up, as locks_session.sql
    /// computes it for recorded leases.
    #[test]
    fn a_holders_wait_timeout_is_its_lease_and_a_slack_in_whole_seconds() {
        assert_eq!(wait_timeout_for(100), 1);
        assert_eq!(wait_timeout_for(2_000), 3);
        assert_eq!(wait_timeout_for(4_000), 5);
        assert_eq!(wait_timeout_for(30_000), 35);
        assert_eq!(wait_timeout_for(i64::MAX), 31_536_000);
    }

    /// The wait's text names the key in hex digits alone: no key needs
    /// quoting.
    #[test]
    fn the_wait_names_its_key_in_hex() {
        let sql = SessionSql::new("lg_").wait("a'b\\c", Some(3));
        assert!(sql.starts_with("SET SESSION wait_timeout = 3; REPLACE INTO lg_lock_waits"));
        assert!(sql.contains("X'6127625c63'"), "{sql}");
        assert!(!sql.contains("a'b"), "{sql}");
        assert!(
            !SessionSql::new("lg_")
                .wait("k", None)
                .contains("wait_timeout")
        );
    }
}
