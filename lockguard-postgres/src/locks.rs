//! Locks as PostgreSQL's own session advisory locks (schema versions 8
//! and 9).
//!
//! Each held or awaited lock has a database session of its own, taken
//! from this client's idle sessions or opened for it: a try is one plain
//! statement (`locks/try.sql`), a wait one that blocks in the server
//! (`locks/wait.sql`, in `pg_advisory_lock`) until the server grants the
//! lock, which it does the moment the holder unlocks or its session ends,
//! to its first waiter, with no statement of anyone's. A release
//! (`locks/release.sql`) unlocks on the hold's session, which then serves
//! later holds. The rare paths (a key's first hold, a lease to wait out)
//! are schema.sql's functions, as are what other clients read of a
//! session. Plain statements, prepared once per session, cost the server
//! somewhat less than calls of PL/pgSQL functions (BENCHMARKS.md).
//!
//! A hold lasts while its session lives and its lease is renewed: the
//! client unlocks when a lease ends unrenewed ([`LeaseEnds`]), and the
//! server ends a session left idle past its hold's lease (its client
//! paused or cut off). A session that ends (the database restarted, an
//! operator's forced release) takes its hold with it, and its holder
//! learns it at its next renewal; its successor waits out the lease the
//! key's row records, and after a crash, which empties those rows, the
//! longest lease any lock took (schema.sql's `lock_epoch`; a session
//! records a lease longer than any it knows of before it asks for a lock
//! on it). A statement whose answer is lost, or a wait given up, never
//! hands its session on: the session is dropped, and its end frees
//! whatever it took.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Row, Statement};

use lockguard_core::store::net;
use lockguard_core::store::{HoldOf, LockSessions, NamedKeys, SessionLocks, Token, Tried, Waited};
use lockguard_core::{Error, ErrorKind, Result};

use crate::error::pg_error;
use crate::options::{LockLeases, PgOptions};
use crate::tls::{Connector, Note};

/// A try (`locks/try.sql`), with `__SCHEMA__` for the schema's name and
/// `__DRAW__` for the draw it shares with a wait.
const TRY_SQL: &str = include_str!("locks/try.sql");
/// A wait (`locks/wait.sql`), as a try.
const WAIT_SQL: &str = include_str!("locks/wait.sql");
/// The draw of a fencing token and a lease (`locks/draw.sql`).
const DRAW_SQL: &str = include_str!("locks/draw.sql");
/// A release (`locks/release.sql`).
const RELEASE_SQL: &str = include_str!("locks/release.sql");
/// A try of session leases (`locks/try_session.sql`).
const TRY_SESSION_SQL: &str = include_str!("locks/try_session.sql");
/// A wait of session leases (`locks/wait_session.sql`).
const WAIT_SESSION_SQL: &str = include_str!("locks/wait_session.sql");
/// A release of session leases (`locks/release_session.sql`).
const RELEASE_SESSION_SQL: &str = include_str!("locks/release_session.sql");
/// The draw of a fencing token at the grant, `__FENCE__` in the others
/// (`locks/fence.sql`).
const FENCE_SQL: &str = include_str!("locks/fence.sql");
/// The idle timeout of a hold of session leases, `__IDLE__` in their try
/// and wait (`locks/idle_session.sql`).
const IDLE_SESSION_SQL: &str = include_str!("locks/idle_session.sql");

/// `sql` (one of the statements above) for the schema `schema`.
fn statement(sql: &str, schema: &str) -> String {
    sql.replace("__DRAW__", DRAW_SQL)
        .replace("__FENCE__", FENCE_SQL)
        .replace("__IDLE__", IDLE_SESSION_SQL)
        .replace("__SCHEMA__", schema)
}

/// The lock statements lockguard sends for the schema `schema` with
/// recorded leases: try, wait and release, as prepared on each lock
/// session (for a benchmark's yardstick that sends the same).
#[doc(hidden)]
pub fn lock_statements(schema: &str) -> [String; 3] {
    lock_statements_of(schema, LockLeases::Recorded)
}

/// The lock statements lockguard sends for the schema `schema` with
/// `leases`: try, wait and release, as prepared on each lock session.
#[doc(hidden)]
pub fn lock_statements_of(schema: &str, leases: LockLeases) -> [String; 3] {
    let [try_sql, wait_sql, release_sql] = match leases {
        LockLeases::Session => [TRY_SESSION_SQL, WAIT_SESSION_SQL, RELEASE_SESSION_SQL],
        _ => [TRY_SQL, WAIT_SQL, RELEASE_SQL],
    };
    [
        statement(try_sql, schema),
        statement(wait_sql, schema),
        statement(release_sql, schema),
    ]
}

/// The client's locks: core's engine on this store's sessions.
pub(crate) type Locks = SessionLocks<PgSessions>;

/// One session of the client's locks, with its statements prepared.
pub(crate) struct Session {
    client: tokio_postgres::Client,
    /// Kept so that the driving task does not end.
    _notes: mpsc::UnboundedReceiver<Note>,
    driver: JoinHandle<()>,
    try_lock: Statement,
    take: Statement,
    wait: Statement,
    wait_out: Statement,
    release: Statement,
    /// With session leases, the release of a hold its session was named
    /// for (a kept one, `lock_keep`): the unlock, and the session named
    /// back to `lockguard`.
    release_named: Statement,
    lease: Statement,
    keep: Statement,
    forget: Statement,
    bound: Statement,
    named: Statement,
    /// Whether the session's holds are of session leases: no lease bound
    /// to record, nothing in a row to forget.
    session_leases: bool,
    /// With session leases, whether the session is named for its hold (a
    /// kept one): its release names it back, so that its next hold, which
    /// names nothing, is read by the session.
    named_hold: AtomicBool,
    /// With session leases, the session's idle timeout as last set (ms;
    /// 0 for none, -1 when unknown): a hold whose lease needs the same
    /// sets none, and a release leaves it.
    idle_ms: AtomicI64,
    /// The longest lease the schema has recorded (`lock_lease_bound`), as
    /// far as this session knows: read when it opened, raised as it
    /// records longer ones. A lock asked for on a longer lease records it
    /// first (see [`Session::record_lease`]).
    bound_ms: AtomicI64,
}

impl Session {
    /// Records `lease_ms` as the schema's longest lease, durably, when it
    /// is longer than this session knows of: the wait after a crash, which
    /// loses the leases' records, waits that long (schema.sql's
    /// `lock_epoch`). One statement the first time a session asks for a
    /// longer lease than any before; none after.
    async fn record_lease(&self, lease_ms: i64, key: &str) -> Result<()> {
        // A hold of session leases is overlapped at a crash (see
        // LockLeases::Session): no wait after one counts on it.
        if self.session_leases || lease_ms <= self.bound_ms.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.client
            .query_one(&self.bound, &[&lease_ms])
            .await
            .map_err(|e| pg_error(e, &format!("recording the lease of {key:?}")))?;
        self.bound_ms.fetch_max(lease_ms, Ordering::Relaxed);
        Ok(())
    }
}

/// The idle timeout of a session holding a lock on a lease of `lease_ms`
/// (schema.sql's `lock_name`): the lease and a quarter, the quarter
/// between 50 ms and 5 s, so a paused or cut-off holder's session ends
/// after its lease.
fn idle_for(lease_ms: i64) -> i32 {
    let idle = lease_ms.max(1) + (lease_ms / 4).clamp(50, 5000);
    i32::try_from(idle).unwrap_or(i32::MAX)
}

impl Session {
    /// With session leases, the idle timeout a hold of `lease_ms` needs
    /// when this session does not have it yet (what schema.sql's
    /// `lock_name` sets: the lease and a quarter, the quarter between
    /// 50 ms and 5 s); `None` when it has it. The statement that takes
    /// the lock sets it, and the caller then notes it ([`Session::idle_set`]).
    fn idle_to_set(&self, lease_ms: i64) -> Option<i32> {
        let idle = idle_for(lease_ms);
        (self.idle_ms.load(Ordering::Relaxed) != i64::from(idle)).then_some(idle)
    }

    /// The session's idle timeout is what schema.sql's `lock_name` sets
    /// for a lease of `lease_ms` (a renewal, a rare path's take).
    fn idle_set(&self, lease_ms: i64) {
        self.idle_ms
            .store(i64::from(idle_for(lease_ms)), Ordering::Relaxed);
    }

    /// The session's idle timeout is not known (a statement that would
    /// have set it failed).
    fn idle_unknown(&self) {
        self.idle_ms.store(-1, Ordering::Relaxed);
    }

    /// Runs `statement`, one that takes a lock (and may set the idle
    /// timeout): on an error, the idle timeout is not known.
    async fn taking(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Row> {
        self.client.query_one(statement, params).await.map_err(|e| {
            self.idle_unknown();
            pg_error(e, &what())
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The connection closes, and the server ends the session: what it
        // held is free.
        self.driver.abort();
    }
}

/// How this client opens the sessions of its locks.
pub(crate) struct PgSessions {
    config: tokio_postgres::Config,
    connector: Connector,
    opts: PgOptions,
    schema: String,
    /// With session leases: the keys this client named in `lock_names`
    /// (schema.sql's, swept a day after a key was named).
    named: NamedKeys,
}

impl PgSessions {
    /// Sessions that connect with `config`, in the schema `schema`.
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        opts: PgOptions,
        schema: String,
    ) -> Self {
        Self {
            config,
            connector,
            opts,
            schema,
            named: NamedKeys::new(),
        }
    }
}

impl PgSessions {
    /// Whether this client's locks are of session leases.
    fn session_leases(&self) -> bool {
        self.opts.leases == LockLeases::Session
    }

    /// With session leases, names `key` in `lock_names` (what `lockguard
    /// locks` lists a lock by: no row records its holds) when this client
    /// has not named it within the hour: one statement before a client's
    /// first hold of a key, none after.
    async fn name(&self, session: &Session, key: &str) -> Result<()> {
        if !session.session_leases {
            return Ok(());
        }
        if !self.named.due(key) {
            return Ok(());
        }
        session
            .client
            .query_one(&session.named, &[&key])
            .await
            .map_err(|e| pg_error(e, &format!("naming {key:?}")))?;
        self.named.named(key);
        Ok(())
    }
}

impl LockSessions for PgSessions {
    type Session = Session;
    type Cancel = CancelToken;

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn response_timeout(&self) -> Duration {
        self.opts.response_timeout
    }

    /// Opens a session and prepares its statements.
    async fn connect(&self) -> Result<Session> {
        const WHAT: &str = "opening a postgres session for a lock";
        let s = &self.schema;
        let opening = async {
            let (client, notes, driver) = self
                .connector
                .connect_listening(&self.config)
                .await
                .map_err(|e| pg_error(e, WHAT))?;
            let prepared = async {
                // No statement or lock timeout of the role's or the
                // database's: a wait lasts as long as its caller's, which
                // the client bounds (a wait cut off by the server would
                // leave the queue, and its session with it).
                let start = format!(
                    "SELECT {s}.lock_session(); SET statement_timeout = 0; SET lock_timeout = 0"
                );
                let [try_sql, wait_sql, release_sql] = lock_statements_of(s, self.opts.leases);
                let session = if self.session_leases() {
                    "_session"
                } else {
                    ""
                };
                let take_sql =
                    format!("SELECT acquired, n FROM {s}.lock_take{session}($1, $2, $3)");
                let wait_out_sql = format!("SELECT {s}.lock_wait_out{session}($1, $2, $3)");
                let lease_sql = format!("SELECT {s}.lock_lease{session}($1, $2, $3, $4)");
                let keep_sql = format!("SELECT {s}.lock_keep($1, $2, $3, $4)");
                let forget_sql = format!("SELECT {s}.lock_forget($1, $2)");
                let bound_sql = format!("SELECT {s}.lock_bound($1)");
                let named_sql = format!("SELECT {s}.lock_named($1)");
                let release_named_sql = format!(
                    "SELECT pg_advisory_unlock(i.hi, i.lo), \
                            set_config('application_name', 'lockguard', false) IS NULL \
                       FROM {s}.lock_id($1) i"
                );
                let read_bound_sql =
                    format!("SELECT coalesce(max(b.lease_ms), 0) FROM {s}.lock_lease_bound b");
                // The statements prepared at once (one round trip), beside
                // the session's start and the read of the lease bound.
                let (started, statements, read_bound) = tokio::join!(
                    client.batch_execute(&start),
                    async {
                        tokio::try_join!(
                            client.prepare(&try_sql),
                            client.prepare(&take_sql),
                            client.prepare(&wait_sql),
                            client.prepare(&wait_out_sql),
                            client.prepare(&release_sql),
                            client.prepare(&lease_sql),
                            client.prepare(&keep_sql),
                            client.prepare(&forget_sql),
                            client.prepare(&bound_sql),
                            client.prepare(&named_sql),
                            client.prepare(&release_named_sql),
                        )
                    },
                    client.query_one(&read_bound_sql, &[]),
                );
                started?;
                let bound_ms: i64 = read_bound?.try_get(0)?;
                Ok::<_, tokio_postgres::Error>((statements?, bound_ms))
            }
            .await;
            match prepared {
                Ok((
                    (
                        try_lock,
                        take,
                        wait,
                        wait_out,
                        release,
                        lease,
                        keep,
                        forget,
                        bound,
                        named,
                        release_named,
                    ),
                    bound_ms,
                )) => Ok(Session {
                    client,
                    _notes: notes,
                    driver,
                    try_lock,
                    take,
                    wait,
                    wait_out,
                    release,
                    release_named,
                    lease,
                    keep,
                    forget,
                    bound,
                    named,
                    session_leases: self.session_leases(),
                    named_hold: AtomicBool::new(false),
                    idle_ms: AtomicI64::new(0),
                    bound_ms: AtomicI64::new(bound_ms),
                }),
                Err(e) => {
                    driver.abort();
                    Err(pg_error(e, WHAT))
                }
            }
        };
        let timeout = self.opts.connect_timeout;
        let answer = tokio::time::timeout(timeout, opening).await;
        net::within(timeout, "postgres", || WHAT.to_owned(), answer).map_err(net::unreachable)
    }

    fn is_closed(&self, session: &Session) -> bool {
        session.client.is_closed()
    }

    fn cancel_handle(&self, session: &Session) -> CancelToken {
        session.client.cancel_token()
    }

    async fn cancel(&self, cancel: CancelToken) {
        if let Err(e) = self.connector.cancel(&cancel).await {
            tracing::debug!(error = %e, "cancelling a postgres lock wait");
        }
    }

    /// The try; taken with no fencing token drawn (a key's first hold, a
    /// lapse, a kept lock), finished (or undone) by `lock_take` (or
    /// `lock_take_session`) on the same session.
    async fn try_lock(
        &self,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Tried> {
        let what = || format!("acquiring {key:?}");
        let lease_ms = net::millis(lease);
        session.record_lease(lease_ms, key).await?;
        self.name(session, key).await?;
        let taken = |n: Option<i64>| Ok(Tried::Taken(net::fence(n, &what)?));
        // The rare path, on the same session: (acquired, n).
        let take = || async {
            let row = session
                .taking(&session.take, &[&key, &token.as_str(), &lease_ms], &what)
                .await?;
            let acquired: bool = get(&row, 0, &what)?;
            let n: Option<i64> = get(&row, 1, &what)?;
            if acquired {
                // Its function sets the idle timeout the lease needs.
                session.idle_set(lease_ms);
                return taken(n);
            }
            let left = n.and_then(|n| u64::try_from(n).ok());
            Ok(Tried::Busy(left.map(Duration::from_millis)))
        };
        if session.session_leases {
            // One column: the fence; NULL for the rare path; when busy, 0,
            // or -1 - the ms left of the key's kept time.
            let idle = session.idle_to_set(lease_ms);
            let row = session
                .taking(&session.try_lock, &[&key, &idle, &token.as_str()], &what)
                .await?;
            return match get::<Option<i64>>(&row, 0, &what)? {
                None => take().await,
                Some(n) if n > 0 => {
                    if idle.is_some() {
                        session.idle_set(lease_ms);
                    }
                    taken(Some(n))
                }
                Some(n) => Ok(Tried::Busy(
                    u64::try_from(-1 - n).ok().map(Duration::from_millis),
                )),
            };
        }
        let row = session
            .taking(
                &session.try_lock,
                &[&key, &token.as_str(), &lease_ms],
                &what,
            )
            .await?;
        let acquired: bool = get(&row, 0, &what)?;
        let n: Option<i64> = get(&row, 1, &what)?;
        match (acquired, n) {
            (true, None) => take().await,
            (true, n) => taken(n),
            (false, left) => {
                let left = left.and_then(|n| u64::try_from(n).ok());
                Ok(Tried::Busy(left.map(Duration::from_millis)))
            }
        }
    }

    /// The wait; granted with no fencing token drawn, finished by
    /// `lock_wait_out` (or `lock_wait_out_session`) on the session that
    /// holds the lock.
    async fn wait(
        &self,
        session: &Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> Result<Waited> {
        let what = || format!("waiting for {key:?}");
        let lease_ms = net::millis(lease);
        session.record_lease(lease_ms, key).await?;
        self.name(session, key).await?;
        let idle = session
            .session_leases
            .then(|| session.idle_to_set(lease_ms))
            .flatten();
        let row = if session.session_leases {
            session
                .taking(&session.wait, &[&key, &idle, &token.as_str()], &what)
                .await?
        } else {
            session
                .taking(&session.wait, &[&key, &token.as_str(), &lease_ms], &what)
                .await?
        };
        let mut n: Option<i64> = get(&row, 0, &what)?;
        // Granted and taken: the wait's statement set the idle timeout
        // when asked to (the rare path's function below sets it always).
        if idle.is_some() && n.is_some() {
            session.idle_set(lease_ms);
        }
        // The wait's own: `lock_wait_out` records the lease later still.
        let waited: Option<i64> = get(&row, 1, &what)?;
        let waited = net::micros(waited);
        if n.is_none() {
            let row = session
                .taking(
                    &session.wait_out,
                    &[&key, &token.as_str(), &lease_ms],
                    &what,
                )
                .await?;
            session.idle_set(lease_ms);
            n = get(&row, 0, &what)?;
        }
        Ok(Waited::new(net::fence(n, &what)?, waited))
    }

    async fn unlock(&self, session: &Session, key: &str, token: &Token) -> Result<bool> {
        let what = || format!("releasing {key:?}");
        let params: [&(dyn ToSql + Sync); 2] = [&key, &token.as_str()];
        // A release of session leases is the bare unlock, of the key alone;
        // of a hold its session was named for, the unlock and the name.
        let named = session.session_leases && session.named_hold.load(Ordering::Relaxed);
        let (statement, count) = match (session.session_leases, named) {
            (false, _) => (&session.release, 2),
            (true, false) => (&session.release, 1),
            (true, true) => (&session.release_named, 1),
        };
        let row = session
            .client
            .query_one(statement, &params[..count])
            .await
            .map_err(|e| pg_error(e, &what()))?;
        if named {
            session.named_hold.store(false, Ordering::Relaxed);
        }
        get(&row, 0, &what)
    }

    async fn renew(
        &self,
        session: &Session,
        hold: &HoldOf<'_>,
        lease: Duration,
        keep: bool,
    ) -> Result<bool> {
        let what = || format!("extending {:?}", hold.key);
        let fence = i64::try_from(hold.fence.get()).unwrap_or(i64::MAX);
        let statement = if keep { &session.keep } else { &session.lease };
        session
            .client
            .query_one(
                statement,
                &[&hold.key, &hold.token.as_str(), &fence, &net::millis(lease)],
            )
            .await
            .map_err(|e| pg_error(e, &what()))?;
        // The renewal set the idle timeout its lease needs; a keep named
        // the session for the kept hold.
        session.idle_set(net::millis(lease));
        if keep && session.session_leases {
            session.named_hold.store(true, Ordering::Relaxed);
        }
        // A live session holds its advisory lock until its release, and the
        // engine sends a renewal only for a hold it still has. One that
        // reaches the session after the release (sent beside it) changes
        // nothing (`lock_lease` leaves an ended lease ended), and the
        // engine answers it as not held, its entry being gone.
        Ok(true)
    }

    async fn forget(&self, session: &Session, key: &str, token: &Token) -> Result<()> {
        if session.session_leases {
            // No row records a hold of session leases: the session's end
            // frees what the attempt took.
            return Ok(());
        }
        let what = || format!("ending an attempt at {key:?}");
        session
            .client
            .query_one(&session.forget, &[&key, &token.as_str()])
            .await
            .map_err(|e| pg_error(e, &what()))?;
        Ok(())
    }
}

/// Column `i` of `row`.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    i: usize,
    what: &dyn Fn() -> String,
) -> Result<T> {
    row.try_get(i).map_err(|e| {
        Error::new(ErrorKind::Protocol, format!("{}: unexpected reply", what())).with_source(e)
    })
}
