//! The store: locks as the server's own user locks on sessions of their
//! own (`locks.rs`); semaphores and read-write locks as rows with leases
//! on the database's clock, one `CALL` of a procedure in lockguard's
//! schema per operation (`schema.sql`), so one round trip and one
//! transaction. Statements are prepared once per pooled connection.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use lockguard_core::store;
use lockguard_core::store::{
    AllOrNone, CounterKeys, DataStore, Holding, Inbox, LimitKeys, LimitOp, LimitReply, LockKeys,
    LockLeases, LockSet, LockStore, Occupancy, OnDemand, Outcome, Place, Resource, RwMode, Store,
    Stored, Token, Waiting, net,
};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};
use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params, Pool, Row};

use crate::bell::Bell;
use crate::error::{garbage, mysql_error, read_row};
use crate::locks::{Locks, MySqlSessions};
use crate::options::Config;
use crate::schema;
use lockguard_core::store::Flights;
use lockguard_core::store::net::InFlight;

/// The longest row key: the primary keys holding it stay within InnoDB's
/// 3072 bytes.
pub(crate) const MAX_ROW_KEY: usize = 2900;

/// The statements, with the table prefix filled in.
#[derive(Debug)]
struct Statements {
    acquire: String,
    release: String,
    extend: String,
    inspect: String,
    rw_acquire: String,
    rw_release: String,
    rw_extend: String,
    rw_inspect: String,
    lock_inspect: String,
    lock_evict: String,
    survey: String,
    /// The wait after a restart, into a session variable read after it.
    crash_wait: String,
    counter_add: String,
    counter_take: String,
    counter_get: String,
    counter_set: String,
    mark_once: String,
    fenced_write: String,
    fenced_read: String,
    fenced_remove: String,
    gcra: String,
    fixed_window: String,
    sliding_window: String,
    sweep: String,
}

impl Statements {
    fn new(p: &str) -> Self {
        let now = schema::clock_us(schema::NOW);
        let lock_h = schema::lock_h(p, "e.k");
        Self {
            acquire: format!("CALL {p}acquire(?, ?, ?, ?, ?, ?, ?)"),
            release: format!("CALL {p}release(?, ?, ?)"),
            extend: format!("CALL {p}extend(?, ?, ?)"),
            inspect: format!(
                "SELECT \
                   (SELECT COUNT(*) FROM {p}holders h WHERE h.k = ? AND h.expires_us > t.now), \
                   (SELECT CAST(CEIL((MIN(h.expires_us) - t.now) / 1000) AS SIGNED) \
                      FROM {p}holders h WHERE h.k = ? AND h.expires_us > t.now), \
                   (SELECT COUNT(*) FROM {p}waiters w WHERE w.k = ?), \
                   CAST(GREATEST(COALESCE((SELECT f.fence FROM {p}keys f WHERE f.k = ?), 0), \
                     COALESCE((SELECT MAX(h.fence) FROM {p}holders h WHERE h.k = ?), 0)) AS SIGNED) \
                 FROM (SELECT {now} AS now) t"
            ),
            rw_acquire: format!("CALL {p}rw_acquire(?, ?, ?, ?, ?, ?, ?)"),
            rw_release: format!("CALL {p}rw_release(?, ?)"),
            rw_extend: format!("CALL {p}rw_extend(?, ?, ?)"),
            rw_inspect: format!(
                "SELECT \
                   (SELECT COUNT(*) FROM {p}rw_holders h \
                      WHERE h.k = ? AND h.expires_us > t.now AND h.is_read = 1), \
                   (SELECT COUNT(*) FROM {p}rw_holders h \
                      WHERE h.k = ? AND h.expires_us > t.now AND h.is_read = 0), \
                   (SELECT CAST(CEIL((MIN(h.expires_us) - t.now) / 1000) AS SIGNED) \
                      FROM {p}rw_holders h WHERE h.k = ? AND h.expires_us > t.now), \
                   (SELECT COUNT(*) FROM {p}rw_waiters w WHERE w.k = ?), \
                   CAST(GREATEST(COALESCE((SELECT f.fence FROM {p}keys f WHERE f.k = ?), 0), \
                     COALESCE((SELECT MAX(h.fence) FROM {p}rw_holders h WHERE h.k = ?), 0)) AS SIGNED) \
                 FROM (SELECT {now} AS now) t"
            ),
            lock_inspect: format!("CALL {p}lock_inspect(?)"),
            lock_evict: format!("CALL {p}lock_evict(?, ?)"),
            // Every live holder and live waiter, of locks, of semaphores
            // and of read-write locks, whose key lies in [?, ?) (see
            // `prefix_range`), a row each: holders by fence, then waiters
            // in their queue's order (`n` is a holder's fence, a waiter's
            // arrival). The newest token is what `inspect`, `rw_inspect`
            // and `lock_inspect` report. A lock's holder is its lease
            // running (locks.sql; a release ends it first), or its kept time
            // (`at_least`) after a restart emptied the MEMORY table, or,
            // for a client of session leases, which records no hold, the
            // session holding its user lock (the key named in `lock_names`;
            // its token, which the survey alone uses, names the session:
            // see `lock_evict`; its fence not known, n = 0, and the key's
            // newest token the sequence's); its waiters the sessions
            // waiting in GET_LOCK.
            survey: format!(
                "SELECT e.k, e.rw, e.waits, e.token, e.is_read, e.n, e.left_ms, \
                   CAST(GREATEST(COALESCE((SELECT f.fence FROM {p}keys f WHERE f.k = e.k), 0), \
                     COALESCE((SELECT f.fence FROM {p}lock_fences f WHERE f.h = {lock_h}), 0), \
                     COALESCE(IF(e.rw = 1, \
                       (SELECT MAX(h.fence) FROM {p}rw_holders h WHERE h.k = e.k), \
                       (SELECT MAX(h.fence) FROM {p}holders h WHERE h.k = e.k)), 0) \
                     /*M! , IF(e.waits = 0 AND e.n = 0, \
                       (SELECT s.next_not_cached_value - 1 FROM {p}lock_fence_seq s), 0) */) AS SIGNED) \
                 FROM ( \
                   SELECT h.k, 0 AS rw, 0 AS waits, h.token, 0 AS is_read, h.fence AS n, \
                     CAST(CEIL((h.expires_us - t.now) / 1000) AS SIGNED) AS left_ms \
                     FROM {p}holders h, (SELECT {now} AS now) t \
                     WHERE h.k >= ? AND h.k < ? AND h.expires_us > t.now \
                   UNION ALL \
                   SELECT f.k, 0, 0, f.token, 0, f.fence, \
                     CAST(CEIL((f.expires_us - t.now) / 1000) AS SIGNED) \
                     FROM {p}lock_fences f, (SELECT {now} AS now) t \
                     WHERE f.k >= ? AND f.k < ? AND f.expires_us > t.now \
                   UNION ALL \
                   SELECT k.k, 0, 0, k.token, 0, k.fence, \
                     CAST(CEIL((k.until_us - t.now) / 1000) AS SIGNED) \
                     FROM {p}lock_kept k, (SELECT {now} AS now) t \
                     WHERE k.k >= ? AND k.k < ? AND k.until_us > t.now \
                       AND NOT EXISTS (SELECT 1 FROM {p}lock_fences f \
                                        WHERE f.h = k.h AND f.expires_us > t.now) \
                   UNION ALL \
                   SELECT u.k, 0, 0, CONCAT('00000000000000005e55', LPAD(LOWER(HEX(u.c)), 12, '0')), \
                     0, 0, NULL \
                     FROM (SELECT n.h, n.k, IS_USED_LOCK(CONCAT('lockguard ', HEX(n.h))) AS c \
                             FROM {p}lock_names n WHERE n.k >= ? AND n.k < ?) u, \
                          (SELECT {now} AS now) t \
                     WHERE u.c IS NOT NULL \
                       AND NOT EXISTS (SELECT 1 FROM {p}lock_fences f \
                                        WHERE f.h = u.h AND f.expires_us > t.now) \
                       AND NOT EXISTS (SELECT 1 FROM {p}lock_kept k \
                                        WHERE k.h = u.h AND k.until_us > t.now) \
                   UNION ALL \
                   SELECT h.k, 1, 0, h.token, h.is_read, h.fence, \
                     CAST(CEIL((h.expires_us - t.now) / 1000) AS SIGNED) \
                     FROM {p}rw_holders h, (SELECT {now} AS now) t \
                     WHERE h.k >= ? AND h.k < ? AND h.expires_us > t.now \
                   UNION ALL \
                   SELECT w.k, 0, 1, w.token, 0, w.arrival, NULL \
                     FROM {p}waiters w, (SELECT {now} AS now) t \
                     WHERE w.k >= ? AND w.k < ? AND w.deadline_us > t.now \
                   UNION ALL \
                   SELECT w.k, 0, 1, w.token, 0, w.since_us, NULL \
                     FROM {p}lock_waits w \
                     WHERE w.k >= ? AND w.k < ? \
                       AND w.conn IN (SELECT p.ID FROM information_schema.PROCESSLIST p \
                                       WHERE p.STATE = 'User lock') \
                   UNION ALL \
                   SELECT w.k, 1, 1, w.token, w.is_read, w.arrival, NULL \
                     FROM {p}rw_waiters w, (SELECT {now} AS now) t \
                     WHERE w.k >= ? AND w.k < ? AND w.deadline_us > t.now) e \
                 ORDER BY e.k, e.waits, e.n"
            ),
            crash_wait: format!("CALL {p}lock_epoch_left(@lockguard_crash_wait)"),
            counter_add: format!("CALL {p}counter_add(?, ?, ?)"),
            counter_take: format!("CALL {p}counter_take(?, ?, ?)"),
            counter_get: format!(
                "SELECT value, version FROM {p}counters WHERE k = ? AND version > 0 \
                 AND (expires_us IS NULL OR expires_us > {now})"
            ),
            counter_set: format!("CALL {p}counter_set(?, ?, ?, ?)"),
            mark_once: format!("CALL {p}mark_once(?, ?, ?)"),
            fenced_write: format!("CALL {p}fenced_write(?, ?, ?)"),
            fenced_read: format!("SELECT fence, value FROM {p}fenced WHERE k = ?"),
            fenced_remove: format!("CALL {p}fenced_remove(?, ?)"),
            gcra: format!("CALL {p}gcra(?, ?, ?, ?, ?)"),
            fixed_window: format!("CALL {p}fixed_window(?, ?, ?, ?, ?)"),
            sliding_window: format!("CALL {p}sliding_window(?, ?, ?, ?, ?)"),
            sweep: format!("CALL {p}sweep()"),
        }
    }
}

/// The MySQL/MariaDB store.
pub(crate) struct MySqlStore {
    pool: Pool,
    cfg: Arc<Config>,
    sql: Statements,
    /// Acquisitions whose statement may still be running, by token.
    flights: Arc<Flights>,
    /// The periodic sweep of expired state, stopped with the store.
    sweeper: Option<net::Sweeper>,
    /// Locks, on sessions of their own.
    locks: Locks,
    /// The bells of the waiters for permits and read-write holds.
    bell: Arc<OnDemand<Bell>>,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("prefix", &self.cfg.prefix)
            .finish_non_exhaustive()
    }
}

/// Connects a store over `pool`, creating lockguard's tables when missing
/// (or older than this version), and a bell opening its own connection
/// with `bell_opts` at the first wait.
pub(crate) async fn connect(
    pool: Pool,
    bell_opts: mysql_async::Opts,
    cfg: Config,
) -> Result<Store> {
    let cfg = Arc::new(cfg);
    let locks = Locks::new(MySqlSessions::new(
        bell_opts.clone(),
        pool.clone(),
        &cfg.prefix,
        cfg.connect_timeout,
        cfg.response_timeout,
        cfg.leases,
    ));
    let bell = Arc::new(OnDemand::new(Bell::new(bell_opts.clone(), cfg.clone())));
    let mut store = MySqlStore {
        bell: bell.clone(),
        sql: Statements::new(&cfg.prefix),
        pool,
        cfg: cfg.clone(),
        flights: Arc::default(),
        sweeper: None,
        locks,
    };
    let at = match bell_opts.socket() {
        Some(socket) => socket.to_owned(),
        None => format!("{}:{}", bell_opts.ip_or_hostname(), bell_opts.tcp_port()),
    };
    let what = format!("connecting to mysql at {at}");
    let what = what.as_str();
    let mut conn = net::within(
        cfg.connect_timeout,
        "mysql",
        || what.to_owned(),
        tokio::time::timeout(cfg.connect_timeout, async {
            store
                .pool
                .get_conn()
                .await
                .map_err(|e| mysql_error(e, what))
        })
        .await,
    )
    .map_err(net::unreachable)?;
    net::within(
        cfg.connect_timeout.max(Duration::from_secs(30)),
        "mysql",
        || format!("creating lockguard's tables {}*", cfg.prefix),
        tokio::time::timeout(
            cfg.connect_timeout.max(Duration::from_secs(30)),
            schema::ensure(&mut conn, &cfg.prefix),
        )
        .await,
    )?;
    if cfg.leases == LockLeases::Session {
        // Session leases draw their tokens from a sequence: MariaDB's.
        let version: Option<String> = conn
            .query_first("SELECT VERSION()")
            .await
            .map_err(|e| mysql_error(e, what))?;
        let version = version.unwrap_or_default();
        if !version.contains("MariaDB") {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{what}: session leases (LockLeases::Session) need MariaDB 10.3 or later, \
                     whose sequences draw their fencing tokens; this server is {version:?}: \
                     use recorded leases, the default"
                ),
            ));
        }
    }
    drop(conn);
    store.sweeper = Some(spawn_sweeper(&store));
    Ok(Store::new(Arc::new(store), vec![bell]).at(&at))
}

/// Removes expired state every `sweep_interval` (core's sweeper).
fn spawn_sweeper(store: &MySqlStore) -> net::Sweeper {
    let pool = store.pool.clone();
    let sql = store.sql.sweep.clone();
    let timeout = store.cfg.response_timeout.max(Duration::from_secs(30));
    net::spawn_sweeper(store.cfg.sweep_interval, timeout, move || {
        let (pool, sql) = (pool.clone(), sql.clone());
        async move {
            let mut conn = pool.get_conn().await.ok()?;
            let row: Row = conn.exec_first(&sql, ()).await.ok()??;
            mysql_async::from_row_opt::<i64>(row).ok()
        }
    })
}

/// The key's row key, or an error for one longer than a row key may be.
fn row_key<'k>(keys: &'k LockKeys, what: &impl Fn() -> String) -> Result<&'k str> {
    checked_key(keys.id(), what)
}

/// `id` as a row key, or an error for one longer than a row key may be.
fn checked_key<'k>(id: &'k str, what: &impl Fn() -> String) -> Result<&'k str> {
    if id.len() > MAX_ROW_KEY {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{}: the key with its prefix is {} bytes long; the mysql store keeps keys of \
                 up to {MAX_ROW_KEY} bytes",
                what(),
                id.len()
            ),
        ));
    }
    Ok(id)
}

/// Whether `keys` are a lock's (a user lock on a session of its own), not
/// a semaphore's or a read-write lock's.
fn is_lock(keys: &LockKeys) -> bool {
    keys.resource() == Resource::Lock && keys.rw_mode().is_none()
}

/// A pooled connection whose request may be cut off (a timeout, a dropped
/// future): unless it answered, it is disconnected when dropped rather
/// than handed back to the pool, where the driver could read the cut-off
/// request's answer as the next request's.
struct Checked(Option<Conn>);

impl Checked {
    fn conn(&mut self) -> &mut Conn {
        self.0.as_mut().expect("present until dropped")
    }

    /// The request answered: the connection goes back to the pool.
    fn answered(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        if let (Some(conn), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.disconnect()).await;
            });
        }
    }
}

/// How many times a statement is sent in all when InnoDB rolls it back to
/// break a deadlock.
const DEADLOCK_ATTEMPTS: usize = 3;

/// Runs one `CALL` answering at most one row, sent again when InnoDB rolled
/// its transaction back to break a deadlock (nothing of it happened; the
/// procedures' own transactions cover all they do), as InnoDB asks of its
/// clients. Statements on one key never deadlock each other (they queue on
/// the key's row lock); this covers the rest of what InnoDB may lock (the
/// sweep's scans, say).
async fn run_again_after_deadlock(
    conn: &mut Conn,
    sql: &str,
    params: Params,
) -> std::result::Result<Option<Row>, mysql_async::Error> {
    let mut tries = 1;
    loop {
        match conn.exec_first(sql, params.clone()).await {
            Err(e) if crate::error::is_deadlock(&e) && tries < DEADLOCK_ATTEMPTS => {
                tracing::debug!(error = %e, "a deadlock rolled the statement back; sending it again");
                tries += 1;
            }
            answer => return answer,
        }
    }
}

impl MySqlStore {
    /// A pooled connection; `what` names the operation in an error (and is
    /// made only then).
    async fn conn(&self, what: impl FnOnce() -> String) -> Result<Conn> {
        match self.pool.get_conn().await {
            Ok(conn) => Ok(conn),
            Err(e) => Err(mysql_error(e, &what())),
        }
    }

    /// Runs one statement answering one row on a pooled connection.
    async fn exec_one<T>(
        &self,
        sql: &str,
        params: impl Into<Params> + Send,
        what: impl Fn() -> String,
    ) -> Result<T>
    where
        T: FromRow + Send + 'static,
    {
        self.exec_opt(sql, params, &what)
            .await?
            .ok_or_else(|| garbage(&what(), "no row"))
    }

    /// Runs one statement answering at most one row on a pooled connection.
    async fn exec_opt<T>(
        &self,
        sql: &str,
        params: impl Into<Params> + Send,
        what: impl Fn() -> String,
    ) -> Result<Option<T>>
    where
        T: FromRow + Send + 'static,
    {
        net::within(
            self.cfg.response_timeout,
            "mysql",
            &what,
            tokio::time::timeout(self.cfg.response_timeout, async {
                let mut conn = Checked(Some(self.conn(&what).await?));
                let row = run_again_after_deadlock(conn.conn(), sql, params.into())
                    .await
                    .map_err(|e| mysql_error(e, &what()))?;
                conn.answered();
                row.map(|r| read_row(r, &what)).transpose()
            })
            .await,
        )
    }
}

impl MySqlStore {
    /// Runs one statement answering any number of rows on a pooled
    /// connection (a read: nothing to send again).
    async fn exec_all<T>(
        &self,
        sql: &str,
        params: impl Into<Params> + Send,
        what: impl Fn() -> String,
    ) -> Result<Vec<T>>
    where
        T: FromRow + Send + 'static,
    {
        net::within(
            self.cfg.response_timeout,
            "mysql",
            &what,
            tokio::time::timeout(self.cfg.response_timeout, async {
                let mut conn = Checked(Some(self.conn(&what).await?));
                let rows: Vec<Row> = conn
                    .conn()
                    .exec(sql, params.into())
                    .await
                    .map_err(|e| mysql_error(e, &what()))?;
                conn.answered();
                rows.into_iter().map(|r| read_row(r, &what)).collect()
            })
            .await,
        )
    }
}

/// The keys under `prefix`, as the range `[start, end)` of their bytes:
/// `end` is `prefix` with its last byte one greater. Keys are UTF-8, in
/// which no byte is 0xFF (nor is a last byte of `prefix` one below it):
/// for an empty prefix, `[0xFF]` is above every key.
fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let start = prefix.as_bytes().to_vec();
    let mut end = start.clone();
    match end.pop() {
        Some(last) => end.push(last.saturating_add(1)),
        None => end.push(0xFF),
    }
    (start, end)
}

/// One row of the survey statement: the key, whether of a read-write lock,
/// whether a waiter, the token, whether it reads, the holder's fence or the
/// waiter's arrival, the holder's ms left, the key's newest token.
type SurveyRow = (Vec<u8>, i64, i64, Vec<u8>, i64, i64, Option<i64>, i64);

/// The rows of the survey statement, a holder or a waiter each, sorted by
/// key, as the holdings of their locks.
fn holdings(rows: Vec<SurveyRow>, what: &dyn Fn() -> String) -> Result<Vec<Holding>> {
    let mut read = Vec::with_capacity(rows.len());
    for (k, rw, waits, token, reads, n, left, latest) in rows {
        let id = String::from_utf8(k).map_err(|e| garbage(&what(), e.into_bytes()))?;
        let mode = (rw == 1).then_some(if reads == 1 {
            RwMode::Read
        } else {
            RwMode::Write
        });
        read.push(store::SurveyRow {
            id,
            token,
            mode,
            hold: (waits != 1).then_some((n, left)),
            latest: Some(latest),
        });
    }
    store::holdings_from_rows(read).map_err(|detail| garbage(&what(), detail))
}

/// A connection whose caller stopped waiting for the acquisition it sent
/// (core's `InFlight`): answered once it has run it, and then not reused
/// (the driver may not know an answer was left unread, and would hand it
/// to the next request), but disconnected.
fn drain(mut conn: Conn) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let _ = conn.query_drop("DO 0").await;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), conn.disconnect()).await;
        });
    })
}

impl LockStore for MySqlStore {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    fn read_write(&self) -> bool {
        true
    }

    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        let what = || format!("acquiring {:?}", keys.name());
        let key = row_key(keys, &what)?;
        if is_lock(keys) {
            return self
                .locks
                .acquire(keys, token, lease, place.map(|p| p.timeout))
                .await;
        }
        // A waiter for a permit or a read-write hold is told of a handoff
        // by its client's bell.
        if let Some(p) = place.as_ref() {
            self.bell.needed(p.channel);
        }
        let (wait, channel, attempt) = match place {
            Some(p) => (
                Some(net::millis(p.timeout)),
                Some(p.channel.to_owned()),
                Some(i64::from(p.attempt)),
            ),
            None => (None, None, None),
        };
        // A release of the token waits until this statement has run (see
        // `release`), so that the two, sent on different connections of the
        // pool, reach the database in the order they were made; a caller
        // that stops waiting (a dropped acquire, a timeout) leaves the
        // flight to end when the connection has run it (`InFlight`).
        let row: Option<Row> = net::within(
            self.cfg.response_timeout,
            "mysql",
            what,
            tokio::time::timeout(self.cfg.response_timeout, async {
                let flight = self.flights.depart(token);
                let conn = self.conn(&what).await?;
                let mut sent = InFlight::new(conn, vec![flight], drain);
                // A read-write hold's statement takes whether it reads
                // where a lock's takes its permits.
                let (sql, fourth) = match keys.rw_mode() {
                    Some(mode) => (&self.sql.rw_acquire, i64::from(mode == RwMode::Read)),
                    None => (&self.sql.acquire, i64::from(net::permits(keys.resource()))),
                };
                let params: Params = (
                    key,
                    token.as_str(),
                    net::millis(lease),
                    fourth,
                    wait,
                    channel,
                    attempt,
                )
                    .into();
                let row = run_again_after_deadlock(sent.conn(), sql, params)
                    .await
                    .map_err(|e| mysql_error(e, &what()));
                sent.landed();
                row
            })
            .await,
        )?;
        let row: (i64, Option<i64>) =
            read_row(row.ok_or_else(|| garbage(&what(), "no row"))?, &what)?;
        match Some(row) {
            Some((1, Some(fence))) if fence > 0 => Ok(Outcome::Acquired {
                fence: FencingToken::new(fence.unsigned_abs()),
                keys: keys.clone(),
            }),
            Some((0, Some(left))) => Ok(Outcome::Busy(Some(Duration::from_millis(
                left.max(0).unsigned_abs(),
            )))),
            Some((0, None)) => Ok(Outcome::Busy(None)),
            other => Err(garbage(&what(), other)),
        }
    }

    fn attach(&self, inbox: Weak<dyn Inbox>) {
        self.locks.attach(inbox);
    }

    /// Each lock is a user lock on a session of its own: a multi-lock
    /// takes its keys one by one, in order.
    async fn acquire_all(&self, _set: LockSet<'_>, _lease: Duration) -> Result<Option<AllOrNone>> {
        Ok(None)
    }

    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        let what = || format!("releasing {:?}", keys.name());
        let key = row_key(keys, &what)?;
        if is_lock(keys) {
            return self.locks.release(keys, token).await;
        }
        // An acquisition of this token still running is let finish first;
        // waiting longer than a request may take is pointless (its lease
        // then frees what it took).
        self.flights.landed(token, self.cfg.response_timeout).await;
        let held: i64 = if keys.rw_mode().is_some() {
            self.exec_one(&self.sql.rw_release, (key, token.as_str()), what)
                .await?
        } else {
            self.exec_one(
                &self.sql.release,
                (key, token.as_str(), net::permits(keys.resource())),
                what,
            )
            .await?
        };
        Ok(held == 1)
    }

    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        if is_lock(keys) {
            return self.locks.extend(token, lease).await;
        }
        let what = || format!("extending {:?}", keys.name());
        let key = row_key(keys, &what)?;
        let sql = match keys.rw_mode() {
            Some(_) => &self.sql.rw_extend,
            None => &self.sql.extend,
        };
        let held: i64 = self
            .exec_one(sql, (key, token.as_str(), net::millis(lease)), what)
            .await?;
        Ok(held == 1)
    }

    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        let what = || format!("inspecting {:?}", keys.name());
        let key = row_key(keys, &what)?;
        if is_lock(keys) {
            let (holders, left, waiters, latest): (i64, Option<i64>, i64, i64) =
                self.exec_one(&self.sql.lock_inspect, (key,), what).await?;
            return Ok(Occupancy::new(
                u32::try_from(holders).map_err(|_| garbage(&what(), holders))?,
                1,
                left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
                u64::try_from(waiters).map_err(|_| garbage(&what(), waiters))?,
                u64::try_from(latest)
                    .ok()
                    .filter(|f| *f > 0)
                    .map(FencingToken::new),
            ));
        }
        if keys.rw_mode().is_some() {
            let (readers, writers, left, waiters, latest): (i64, i64, Option<i64>, i64, i64) = self
                .exec_one(&self.sql.rw_inspect, (key, key, key, key, key, key), what)
                .await?;
            let readers = u32::try_from(readers).map_err(|_| garbage(&what(), readers))?;
            let waiters = u64::try_from(waiters).map_err(|_| garbage(&what(), waiters))?;
            let latest = u64::try_from(latest)
                .ok()
                .filter(|f| *f > 0)
                .map(FencingToken::new);
            return Ok(Occupancy::read_write(
                readers,
                writers > 0,
                left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
                waiters,
                latest,
            ));
        }
        let (holders, left, waiters, latest): (i64, Option<i64>, i64, i64) = self
            .exec_one(&self.sql.inspect, (key, key, key, key, key), what)
            .await?;
        let holders = u32::try_from(holders).map_err(|_| garbage(&what(), holders))?;
        let waiters = u64::try_from(waiters).map_err(|_| garbage(&what(), waiters))?;
        let latest = u64::try_from(latest)
            .ok()
            .filter(|f| *f > 0)
            .map(FencingToken::new);
        Ok(Occupancy::new(
            holders,
            keys.resource().permits(),
            left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
            waiters,
            latest,
        ))
    }

    /// Ends `token`'s hold from any client. A lock's: its lease ends and
    /// its session is ended (`lock_evict`), which hands the lock to its
    /// first waiter. A semaphore's permit or a read-write lock's hold is
    /// the holder's own release: `release` and `rw_release` need only the
    /// token, and hand it on as a release does.
    async fn evict(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        if !is_lock(keys) {
            return self.release(keys, token).await;
        }
        let what = || format!("forcing {:?} free", keys.name());
        let key = row_key(keys, &what)?;
        let found: i64 = self
            .exec_one(&self.sql.lock_evict, (key, token.as_str()), what)
            .await?;
        Ok(found == 1)
    }

    async fn release_later(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> Result<bool> {
        if is_lock(keys) {
            return self.locks.release_later(token, keep).await;
        }
        self.extend(keys, token, keep).await
    }

    /// One statement over the tables of locks, semaphores and read-write
    /// locks: every live holder and live waiter of the keys under
    /// `prefix`.
    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        let what = || format!("listing the locks under {prefix:?}");
        let (start, end) = prefix_range(prefix);
        let (s, e) = (start.as_slice(), end.as_slice());
        let params: Vec<mysql_async::Value> = [s, e, s, e, s, e, s, e, s, e, s, e, s, e, s, e]
            .into_iter()
            .map(|b| mysql_async::Value::Bytes(b.to_vec()))
            .collect();
        let rows: Vec<SurveyRow> = self
            .exec_all(&self.sql.survey, Params::Positional(params), what)
            .await?;
        holdings(rows, &what)
    }

    /// The wait after a restart (`lock_epoch` in locks.sql): noted now,
    /// when no session of lockguard's locks noted it yet, as the first
    /// lock session after the restart would.
    async fn crash_wait(&self) -> Result<Option<Duration>> {
        let what = || "reading the wait after a restart".to_owned();
        let left: Option<Option<i64>> = net::within(
            self.cfg.response_timeout,
            "mysql",
            what,
            tokio::time::timeout(self.cfg.response_timeout, async {
                let mut conn = Checked(Some(self.conn(&what).await?));
                conn.conn()
                    .query_drop(&self.sql.crash_wait)
                    .await
                    .map_err(|e| mysql_error(e, &what()))?;
                let left = conn
                    .conn()
                    .query_first("SELECT @lockguard_crash_wait")
                    .await
                    .map_err(|e| mysql_error(e, &what()))?;
                conn.answered();
                Ok(left)
            })
            .await,
        )?;
        Ok(left
            .flatten()
            .and_then(|us| u64::try_from(us).ok())
            .map(Duration::from_micros))
    }
}

impl DataStore for MySqlStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let what = || format!("adding to counter {:?}", keys.name());
        let key = checked_key(keys.id(), &what)?;
        self.exec_one(
            &self.sql.counter_add,
            (key, delta, net::ttl_millis(ttl)),
            what,
        )
        .await
        .map_err(net::overflow_is_invalid(key))
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let what = || format!("taking from counter {:?}", keys.name());
        let key = checked_key(keys.id(), &what)?;
        let (taken, value): (i64, i64) = self
            .exec_one(&self.sql.counter_take, (key, n, net::ttl_millis(ttl)), what)
            .await
            .map_err(net::overflow_is_invalid(key))?;
        Ok(if taken == 1 { Ok(value) } else { Err(value) })
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        let what = || format!("reading counter {:?}", keys.name());
        let key = checked_key(keys.id(), &what)?;
        let row: Option<(i64, i64)> = self.exec_opt(&self.sql.counter_get, (key,), what).await?;
        Ok(row.map_or((0, 0), |(v, version)| (v, version.max(0).unsigned_abs())))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        let what = || format!("setting counter {:?}", keys.name());
        let key = checked_key(keys.id(), &what)?;
        let (done, version): (i64, i64) = self
            .exec_one(
                &self.sql.counter_set,
                (key, value, expected, net::ttl_millis(ttl)),
                what,
            )
            .await?;
        let version = version.max(0).unsigned_abs();
        Ok(if done == 1 { Ok(version) } else { Err(version) })
    }

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        let what = || format!("marking {member:?} in {:?}", keys.name());
        let key = checked_key(keys.id(), &what)?;
        let first: i64 = self
            .exec_one(
                &self.sql.mark_once,
                (key, member, net::ttl_millis(ttl)),
                what,
            )
            .await?;
        Ok(first == 1)
    }

    /// One rate-limit decision: the algorithm's arithmetic runs in the
    /// database under the limiter row's lock, on its clock (one round
    /// trip); the core's `decide` turns its numbers into the decision, as
    /// on PostgreSQL and Redis.
    async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        let what = || format!("rate limiting {:?}", keys.id());
        let key = checked_key(keys.id(), &what)?;
        let cost = i64::try_from(cost).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{}: cost {cost} is too large", what()),
            )
        })?;
        let peek = i8::from(peek);
        match op {
            LimitOp::Gcra(p) => {
                let (allowed, used, retry): (i64, i64, i64) = self
                    .exec_one(&self.sql.gcra, (key, p.t, p.tau, cost, peek), what)
                    .await?;
                Ok(LimitReply::gcra(allowed == 1, used, retry))
            }
            LimitOp::Fixed { limit, .. } => {
                let window_ms = i64::try_from(op.period_ms()).unwrap_or(i64::MAX);
                let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
                let (allowed, used, left_ms): (i64, i64, i64) = self
                    .exec_one(
                        &self.sql.fixed_window,
                        (key, limit_i, window_ms, cost, peek),
                        what,
                    )
                    .await?;
                Ok(LimitReply::fixed_ms(
                    allowed == 1,
                    used.max(0).unsigned_abs(),
                    left_ms,
                ))
            }
            LimitOp::Sliding { limit, period_us } => {
                let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
                let (allowed, used, reset, retry): (i64, i64, i64, i64) = self
                    .exec_one(
                        &self.sql.sliding_window,
                        (key, limit_i, period_us, cost, peek),
                        what,
                    )
                    .await?;
                Ok(LimitReply::window(
                    allowed == 1,
                    used.max(0).unsigned_abs(),
                    reset,
                    retry,
                ))
            }
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                format!("{}: an algorithm the mysql store does not know", what()),
            )),
        }
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        let what = || format!("writing fenced {key:?}");
        let key = checked_key(key, &what)?;
        let stored: i64 = self
            .exec_one(&self.sql.fenced_write, (key, token, value), what)
            .await?;
        Ok(stored == 1)
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        let what = || format!("reading fenced {key:?}");
        let key = checked_key(key, &what)?;
        let stored: Option<(u64, Option<Vec<u8>>)> =
            self.exec_opt(&self.sql.fenced_read, (key,), what).await?;
        // A row without a value: a removed value, whose token stays.
        Ok(stored.and_then(|(fence, value)| value.map(|v| (fence, v))))
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        let what = || format!("removing fenced {key:?}");
        let key = checked_key(key, &what)?;
        let removed: i64 = self
            .exec_one(&self.sql.fenced_remove, (key, token), what)
            .await?;
        Ok(removed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock's acquire, release and renewal futures stay small: each is
    /// copied whole into the store boundary's box at every call. (Opening
    /// a session, 13 KB on PostgreSQL, is boxed where it is awaited, not
    /// carried inline by every operation that may open one.)
    #[test]
    fn lock_futures_stay_small() {
        lockguard_testing::assert_lock_futures_within::<MySqlStore>(4096);
    }

    #[test]
    fn leases_round_up_to_whole_milliseconds() {
        assert_eq!(net::millis(Duration::from_millis(30)), 30);
        assert_eq!(net::millis(Duration::from_micros(30_001)), 31);
        assert_eq!(net::millis(Duration::MAX), i64::MAX);
    }

    /// The range of a prefix holds the keys that start with it and no
    /// others, whatever bytes the prefix holds.
    #[test]
    fn survey_ranges_hold_their_prefix_alone() {
        let under = |prefix: &str, key: &str| {
            let (start, end) = prefix_range(prefix);
            key.as_bytes() >= start.as_slice() && key.as_bytes() < end.as_slice()
        };
        for key in ["a_%\\:lock:{n}", "a_%\\:", "a_%\\:\u{10FFFF}"] {
            assert!(under("a_%\\:", key), "{key:?}");
        }
        for key in ["a_%\\", "a_%\\;", "ab:lock:{n}", "a_%:lock:{n}", "b"] {
            assert!(!under("a_%\\:", key), "{key:?}");
        }
        for key in ["", "lock:{n}", "\u{10FFFF}\u{10FFFF}"] {
            assert!(under("", key), "{key:?}");
        }
        assert!(under("é", "é:x") && !under("é", "ê"));
    }
}
