//! The PostgreSQL store: locks as the server's own advisory locks
//! ([`locks`](crate::locks)), and the design's lock table made safe for
//! semaphores and read-write locks.
//!
//! Every other operation is one statement, a call of a function in lockguard's
//! schema (`schema.sql`), so one round trip and one transaction; the
//! statements are prepared once per pooled connection. Operations on one
//! key are serialized by a transaction advisory lock on it, check the rows
//! they write under those rows' locks, and take their time from the
//! database's clock, read after the locks. A handoff is written to the
//! waiter's client's mail, in the transaction that made it, and the
//! client's bell (one backend) is signalled to read it ([`bell`]).
//!
//! Read-write locks live in the tables of locks, a hold's `reads` telling
//! a reader from the writer, in one queue for both; a release hands the
//! lock to the whole run of readers at the head (a handoff, rung, to each)
//! or to the one writer there. A multi-lock's attempt is one statement for
//! every key, which takes the keys' locks in one fixed order.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use lockguard_core::store::net::{self, InFlight, overflow_is_invalid};
use lockguard_core::store::{
    AllOrNone, CounterKeys, DataStore, Holding, Inbox, LimitKeys, LimitOp, LimitReply, LockKeys,
    LockSet, LockStore, Occupancy, OnDemand, Outcome, Place, Resource, RwMode, Store, Stored,
    SurveyRow, Token, Waiting, holdings_from_rows,
};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

use crate::bell::{self, pg_channel};
use crate::locks::{Locks, PgSessions};
use crate::options::PgOptions;
use crate::pool::{Param, Pool, Row};
use crate::schema;

/// The statements, with the schema's name filled in.
#[derive(Debug)]
struct Statements {
    acquire: String,
    release: String,
    extend: String,
    inspect: String,
    lock_inspect: String,
    lock_evict: String,
    rw_acquire: String,
    rw_release: String,
    rw_inspect: String,
    survey: String,
    crash_wait: String,
    counter_add: String,
    counter_take: String,
    counter_get: String,
    counter_set: String,
    mark_once: String,
    gcra: String,
    fixed_window: String,
    sliding_window: String,
    fenced_write: String,
    fenced_read: String,
    fenced_remove: String,
    sweep: String,
}

impl Statements {
    fn new(s: &str) -> Self {
        Self {
            acquire: format!("SELECT * FROM {s}.permit_acquire($1, $2, $3, $4, $5, $6, $7)"),
            release: format!("SELECT {s}.release($1, $2, $3)"),
            extend: format!("SELECT {s}.extend($1, $2, $3)"),
            inspect: format!("SELECT * FROM {s}.inspect($1)"),
            lock_inspect: format!("SELECT * FROM {s}.lock_inspect($1)"),
            lock_evict: format!("SELECT {s}.lock_evict($1, $2)"),
            rw_acquire: format!("SELECT * FROM {s}.rw_acquire($1, $2, $3, $4, $5, $6, $7)"),
            rw_release: format!("SELECT {s}.rw_release($1, $2)"),
            rw_inspect: format!("SELECT * FROM {s}.rw_inspect($1)"),
            // Every live holder and live waiter of the keys that `$1` (a
            // LIKE pattern, see `like_prefix`) matches, a row each: holders
            // by fence, then waiters in their queue's order (`n` is a
            // holder's fence, a waiter's arrival). The clock is read once;
            // the newest token is what `inspect` and `rw_inspect` report.
            survey: format!(
                "WITH t AS (SELECT clock_timestamp() AS now), \
                 e AS ( \
                   SELECT h.key, false AS waits, h.token, h.reads, h.fence AS n, \
                          ceil(extract(epoch FROM h.expires_at - t.now) * 1000)::bigint AS left_ms \
                     FROM {s}.holders h CROSS JOIN t \
                     WHERE h.key LIKE $1 AND h.expires_at > t.now \
                   UNION ALL \
                   SELECT w.key, true, w.token, w.reads, w.arrival, NULL \
                     FROM {s}.waiters w CROSS JOIN t \
                     WHERE w.key LIKE $1 AND w.deadline > t.now), \
                 l AS ( \
                   SELECT l.key, l.waits, l.token, false AS reads, \
                          coalesce(l.fence, (extract(epoch FROM l.since) * 1000000)::bigint) AS n, \
                          l.left_ms, l.latest \
                     FROM {s}.lock_survey($1) l) \
                 SELECT e.key, e.waits, e.token, e.reads, e.n, e.left_ms, \
                        greatest((SELECT f.fence FROM {s}.latest_fences f WHERE f.key = e.key), \
                                 (SELECT max(h.fence) FROM {s}.holders h WHERE h.key = e.key)) \
                   FROM e \
                 UNION ALL \
                 SELECT l.key, l.waits, l.token, l.reads, l.n, l.left_ms, l.latest FROM l \
                 ORDER BY 1, 2, 5"
            ),
            crash_wait: format!("SELECT {s}.lock_epoch_ms()"),
            counter_add: format!("SELECT {s}.counter_add($1, $2, $3)"),
            counter_take: format!("SELECT * FROM {s}.counter_take($1, $2, $3)"),
            counter_get: format!(
                "SELECT value, version FROM {s}.counters \
                 WHERE key = $1 AND (expires_at IS NULL OR expires_at > clock_timestamp())"
            ),
            counter_set: format!("SELECT * FROM {s}.counter_set($1, $2, $3, $4)"),
            mark_once: format!("SELECT {s}.mark_once($1, $2, $3)"),
            gcra: format!("SELECT * FROM {s}.gcra($1, $2, $3, $4, $5)"),
            fixed_window: format!("SELECT * FROM {s}.fixed_window($1, $2, $3, $4, $5)"),
            sliding_window: format!("SELECT * FROM {s}.sliding_window($1, $2, $3, $4, $5)"),
            fenced_write: format!(
                "INSERT INTO {s}.fenced AS f (key, fence, value) VALUES ($1, $2::text::numeric, $3) \
                 ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, value = EXCLUDED.value \
                 WHERE f.fence <= EXCLUDED.fence RETURNING 1"
            ),
            fenced_read: format!("SELECT fence::text, value FROM {s}.fenced WHERE key = $1"),
            // The row stays, with the removal's token and no value.
            fenced_remove: format!(
                "INSERT INTO {s}.fenced AS f (key, fence, value) VALUES ($1, $2::text::numeric, NULL) \
                 ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, value = NULL \
                 WHERE f.fence <= EXCLUDED.fence RETURNING 1"
            ),
            sweep: format!("SELECT {s}.sweep()"),
        }
    }
}

/// The PostgreSQL store.
pub(crate) struct PostgresStore {
    pool: Pool,
    schema: String,
    sql: Arc<Statements>,
    opts: PgOptions,
    /// Locks, on sessions of their own.
    locks: Locks,
    /// The bells of the waiters for permits and read-write holds.
    bell: Arc<OnDemand<bell::PgBell>>,
    /// Acquisitions whose statement may still be running, by token.
    flights: Arc<lockguard_core::store::Flights>,
    /// The periodic sweep of expired state, stopped with the store.
    sweeper: Option<net::Sweeper>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// Connects a store over `pool`, creating lockguard's schema in it when
/// missing (or older than this version), and a bell opening its own
/// connections with `listen` at the first wait.
pub(crate) async fn connect(
    pool: Pool,
    listen: tokio_postgres::Config,
    schema: String,
    opts: PgOptions,
    connector: crate::tls::Connector,
) -> Result<Store> {
    let bell = Arc::new(OnDemand::new(bell::PgBell::new(
        listen.clone(),
        opts,
        connector.clone(),
        schema.clone(),
    )));
    let mut store = PostgresStore {
        bell: bell.clone(),
        sql: Arc::new(Statements::new(&schema)),
        locks: Locks::new(PgSessions::new(
            listen.clone(),
            connector.clone(),
            opts,
            schema.clone(),
        )),
        pool,
        schema,
        opts,
        flights: Arc::default(),
        sweeper: None,
    };
    let at = address(&listen);
    let what = format!("connecting to postgres at {at}");
    let what = what.as_str();
    let answer = tokio::time::timeout(opts.connect_timeout, async {
        store.pool.get().await.map_err(|e| e.about(what))
    })
    .await;
    let mut conn = net::within(opts.connect_timeout, "postgres", || what.to_owned(), answer)
        .map_err(net::unreachable)?;
    schema::ensure(&mut conn, &store.schema, opts.connect_timeout).await?;
    drop(conn);
    store.sweeper = Some(spawn_sweeper(&store));
    Ok(Store::new(Arc::new(store), vec![bell]).at(&at))
}

/// The server(s) a configuration names, `host:port` each, for messages.
fn address(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => {
                    format!("{}/.s.PGSQL.{port}", path.display())
                }
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Removes expired state every `sweep_interval` (core's sweeper).
fn spawn_sweeper(store: &PostgresStore) -> net::Sweeper {
    let pool = store.pool.clone();
    let sql = store.sql.sweep.clone();
    let timeout = store.opts.response_timeout.max(Duration::from_secs(30));
    net::spawn_sweeper(store.opts.sweep_interval, timeout, move || {
        let (pool, sql) = (pool.clone(), sql.clone());
        async move {
            let mut conn = pool.get().await.ok()?;
            let rows = conn.query(&sql, &[]).await.ok()?;
            rows.first()?.get::<i64>(0, &|| "sweeping".to_owned()).ok()
        }
    })
}

impl PostgresStore {
    /// Runs one statement on a pooled connection and returns its rows:
    /// one round trip once the connection has the statement prepared.
    async fn query(
        &self,
        sql: &str,
        params: &[Param<'_>],
        what: impl Fn() -> String,
    ) -> Result<Vec<Row>> {
        let timeout = self.opts.response_timeout;
        let answer = tokio::time::timeout(timeout, async {
            let mut conn = self.pool.get().await.map_err(|e| e.about(&what()))?;
            conn.query(sql, params).await.map_err(|e| e.about(&what()))
        })
        .await;
        net::within(timeout, "postgres", &what, answer)
    }

    /// Like [`query`](Self::query), for a statement answering one row.
    async fn query_one(
        &self,
        sql: &str,
        params: &[Param<'_>],
        what: impl Fn() -> String,
    ) -> Result<Row> {
        one(self.query(sql, params, &what).await?, &what)
    }
}

impl PostgresStore {
    /// Runs one acquisition statement, taking with `tokens`, and returns
    /// its one row. A release of any of the tokens waits until this
    /// statement has run (see `release`), so that the two, sent on
    /// different connections of the pool, reach the database in the order
    /// they were made; a caller that stops waiting (a dropped acquire, a
    /// timeout) leaves the flights to end when the connection has run it
    /// (`InFlight`).
    async fn acquisition(
        &self,
        sql: &str,
        params: &[Param<'_>],
        tokens: &[Token],
        what: impl Fn() -> String,
    ) -> Result<Row> {
        let timeout = self.opts.response_timeout;
        let answer = tokio::time::timeout(timeout, async {
            let flights = tokens.iter().map(|t| self.flights.depart(t)).collect();
            let conn = self.pool.get().await.map_err(|e| e.about(&what()))?;
            let mut sent = InFlight::new(conn, flights, crate::pool::drain);
            let rows = sent
                .conn()
                .query(sql, params)
                .await
                .map_err(|e| e.about(&what()));
            sent.landed();
            one(rows?, &what)
        })
        .await;
        net::within(timeout, "postgres", &what, answer)
    }

    /// Waits for the acquisitions of `token` still running (see
    /// [`acquisition`](Self::acquisition)); waiting longer than a request
    /// may take is pointless (its lease then frees what it took).
    async fn after_acquisitions(&self, token: &Token) {
        self.flights.landed(token, self.opts.response_timeout).await;
    }
}

impl PostgresStore {
    /// A waiter's place as the acquisition statements take it: the ms it
    /// is kept, its client's channel, the attempt's number; all NULL
    /// without one (the statement then never queues). A place starts the
    /// bell of its client, which tells it of a handoff.
    fn place_params<'a>(
        &self,
        place: Option<Place<'a>>,
    ) -> (Option<i64>, Option<&'a str>, Option<i64>) {
        if let Some(p) = place {
            self.bell.needed(p.channel);
        }
        place_params(place)
    }
}

/// [`PostgresStore::place_params`], without starting a bell.
fn place_params<'a>(place: Option<Place<'a>>) -> (Option<i64>, Option<&'a str>, Option<i64>) {
    match place {
        Some(p) => (
            Some(net::millis(p.timeout)),
            Some(pg_channel(p.channel)),
            Some(i64::from(p.attempt)),
        ),
        None => (None, None, None),
    }
}

/// The answer `(acquired, n)` of `acquire` or `rw_acquire`: the hold's
/// fencing token, or the ms until the holders' lease ends.
fn attempt_reply(keys: &Arc<LockKeys>, row: &Row, what: &dyn Fn() -> String) -> Result<Outcome> {
    let taken: bool = row.get(0, what)?;
    let n: Option<i64> = row.get(1, what)?;
    match (taken, n.map(u64::try_from)) {
        (true, Some(Ok(fence))) if fence > 0 => Ok(Outcome::Acquired {
            fence: FencingToken::new(fence),
            keys: keys.clone(),
        }),
        (false, Some(Ok(left))) => Ok(Outcome::Busy(Some(Duration::from_millis(left)))),
        (false, _) => Ok(Outcome::Busy(None)),
        _ => Err(Error::new(
            ErrorKind::Protocol,
            format!("{}: unexpected reply ({taken}, {n:?})", what()),
        )),
    }
}

/// The one row of a statement that answers one.
fn one(mut rows: Vec<Row>, what: &dyn Fn() -> String) -> Result<Row> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(Error::new(
            ErrorKind::Protocol,
            format!("{}: postgres answered {n} rows, not one", what()),
        )),
    }
}

/// `prefix` as a LIKE pattern matching exactly the texts that start with
/// it: its `\`, `%` and `_` escaped by `\` (LIKE's escape character),
/// then `%`. A prefix `a_` then matches `a_x` but never `abx`.
fn like_prefix(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// Whether the lock `id` under `prefix` is a read-write lock (its kind is
/// `rw`): its holders' and waiters' `reads` then say their mode.
fn is_read_write(prefix: &str, id: &str) -> bool {
    lockguard_core::store::is_read_write_id(prefix, id)
}

/// The newest fencing token as `inspect` reads it: none when NULL or not
/// positive.
fn latest_fence(latest: Option<i64>) -> Option<FencingToken> {
    latest
        .and_then(|f| u64::try_from(f).ok())
        .filter(|f| *f > 0)
        .map(FencingToken::new)
}

/// The rows of the survey statement, a holder or a waiter each, sorted by
/// key, as the holdings of `prefix`'s locks.
fn holdings(prefix: &str, rows: &[Row], what: &dyn Fn() -> String) -> Result<Vec<Holding>> {
    let mut read = Vec::with_capacity(rows.len());
    for row in rows {
        let id: String = row.get(0, what)?;
        let waits: bool = row.get(1, what)?;
        let token: String = row.get(2, what)?;
        let reads: bool = row.get(3, what)?;
        let n: i64 = row.get(4, what)?;
        let left: Option<i64> = row.get(5, what)?;
        let latest: Option<i64> = row.get(6, what)?;
        let mode =
            is_read_write(prefix, &id).then_some(if reads { RwMode::Read } else { RwMode::Write });
        read.push(SurveyRow {
            id,
            token: token.into_bytes(),
            mode,
            hold: (!waits).then_some((n, left)),
            latest,
        });
    }
    holdings_from_rows(read).map_err(|detail| {
        Error::new(
            ErrorKind::Protocol,
            format!("{}: unexpected reply: {detail}", what()),
        )
    })
}

/// Read-write locks: the holds of a read-write lock's keys, which the
/// boundary's methods hand on here.
impl PostgresStore {
    /// One statement, `rw_acquire`; see [`LockStore::acquire`].
    async fn rw_acquire(
        &self,
        keys: &Arc<LockKeys>,
        mode: RwMode,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        let what = || format!("acquiring {:?} to {}", keys.id(), mode.as_str());
        let (wait, channel, attempt) = self.place_params(place);
        let row = self
            .acquisition(
                &self.sql.rw_acquire,
                &[
                    keys.id().into(),
                    token.as_str().into(),
                    net::millis(lease).into(),
                    (mode == RwMode::Read).into(),
                    wait.into(),
                    channel.into(),
                    attempt.into(),
                ],
                std::slice::from_ref(token),
                what,
            )
            .await?;
        attempt_reply(keys, &row, &what)
    }

    /// One statement, `rw_release`, which hands the lock on as far as it
    /// fits; see [`LockStore::release`].
    async fn rw_release(&self, keys: &Arc<LockKeys>, mode: RwMode, token: &Token) -> Result<bool> {
        let what = || format!("releasing {:?} ({})", keys.id(), mode.as_str());
        self.after_acquisitions(token).await;
        let row = self
            .query_one(
                &self.sql.rw_release,
                &[keys.id().into(), token.as_str().into()],
                what,
            )
            .await?;
        row.get(0, &what)
    }

    /// One statement, `rw_inspect`; see [`LockStore::inspect`].
    async fn rw_inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        let what = || format!("inspecting {:?}", keys.id());
        let row = self
            .query_one(&self.sql.rw_inspect, &[keys.id().into()], what)
            .await?;
        let readers: i64 = row.get(0, &what)?;
        let writer: bool = row.get(1, &what)?;
        let left: Option<i64> = row.get(2, &what)?;
        let waiters: i64 = row.get(3, &what)?;
        let latest: Option<i64> = row.get(4, &what)?;
        let garbage = || Error::new(ErrorKind::Protocol, format!("{}: unexpected reply", what()));
        Ok(Occupancy::read_write(
            u32::try_from(readers).map_err(|_| garbage())?,
            writer,
            left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
            u64::try_from(waiters).map_err(|_| garbage())?,
            latest_fence(latest),
        ))
    }
}

/// Whether `keys` are a lock's (not a semaphore's, nor a read-write
/// lock's): an advisory lock on a session of its own.
fn is_lock(keys: &LockKeys) -> bool {
    keys.resource() == Resource::Lock && keys.rw_mode().is_none()
}

impl PostgresStore {
    /// One statement, `lock_inspect`, reading the sessions of the lock's
    /// advisory lock; see [`LockStore::inspect`].
    async fn lock_inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        let what = || format!("inspecting {:?}", keys.id());
        let row = self
            .query_one(&self.sql.lock_inspect, &[keys.id().into()], what)
            .await?;
        let holders: i32 = row.get(0, &what)?;
        let left: Option<i64> = row.get(1, &what)?;
        let waiters: i64 = row.get(2, &what)?;
        let latest: Option<i64> = row.get(3, &what)?;
        let garbage = || Error::new(ErrorKind::Protocol, format!("{}: unexpected reply", what()));
        Ok(Occupancy::new(
            u32::try_from(holders).map_err(|_| garbage())?,
            1,
            left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
            u64::try_from(waiters).map_err(|_| garbage())?,
            latest_fence(latest),
        ))
    }
}

impl LockStore for PostgresStore {
    fn name(&self) -> &'static str {
        "postgres"
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
        if let Some(mode) = keys.rw_mode() {
            return self.rw_acquire(keys, mode, token, lease, place).await;
        }
        if is_lock(keys) {
            return self
                .locks
                .acquire(keys, token, lease, place.map(|p| p.timeout))
                .await;
        }

        let what = || format!("acquiring {:?}", keys.id());
        let (wait, channel, attempt) = self.place_params(place);
        let row = self
            .acquisition(
                &self.sql.acquire,
                &[
                    keys.id().into(),
                    token.as_str().into(),
                    net::millis(lease).into(),
                    net::permits(keys.resource()).into(),
                    wait.into(),
                    channel.into(),
                    attempt.into(),
                ],
                std::slice::from_ref(token),
                what,
            )
            .await?;
        attempt_reply(keys, &row, &what)
    }

    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        if let Some(mode) = keys.rw_mode() {
            return self.rw_release(keys, mode, token).await;
        }
        if is_lock(keys) {
            return self.locks.release(keys, token).await;
        }

        let what = || format!("releasing {:?}", keys.id());
        // An acquisition of this token still running is let finish first.
        self.after_acquisitions(token).await;
        let row = self
            .query_one(
                &self.sql.release,
                &[
                    keys.id().into(),
                    token.as_str().into(),
                    net::permits(keys.resource()).into(),
                ],
                what,
            )
            .await?;
        row.get(0, &what)
    }

    fn attach(&self, inbox: Weak<dyn Inbox>) {
        self.locks.attach(inbox);
    }

    /// Each lock is an advisory lock on a session of its own: a
    /// multi-lock takes its keys one by one, in order.
    async fn acquire_all(&self, _set: LockSet<'_>, _lease: Duration) -> Result<Option<AllOrNone>> {
        Ok(None)
    }

    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        if is_lock(keys) {
            return self.locks.extend(token, lease).await;
        }
        let what = || format!("extending {:?}", keys.id());
        let row = self
            .query_one(
                &self.sql.extend,
                &[
                    keys.id().into(),
                    token.as_str().into(),
                    net::millis(lease).into(),
                ],
                what,
            )
            .await?;
        row.get(0, &what)
    }

    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        if keys.rw_mode().is_some() {
            return self.rw_inspect(keys).await;
        }
        if is_lock(keys) {
            return self.lock_inspect(keys).await;
        }

        let what = || format!("inspecting {:?}", keys.id());
        let row = self
            .query_one(&self.sql.inspect, &[keys.id().into()], what)
            .await?;
        let holders: i64 = row.get(0, &what)?;
        let left: Option<i64> = row.get(1, &what)?;
        let waiters: i64 = row.get(2, &what)?;
        let latest: Option<i64> = row.get(3, &what)?;
        let garbage = || Error::new(ErrorKind::Protocol, format!("{}: unexpected reply", what()));
        Ok(Occupancy::new(
            u32::try_from(holders).map_err(|_| garbage())?,
            keys.resource().permits(),
            left.map(|l| Duration::from_millis(l.max(0).unsigned_abs())),
            u64::try_from(waiters).map_err(|_| garbage())?,
            latest_fence(latest),
        ))
    }

    /// Ends `token`'s hold from any client. A lock's: its session is
    /// ended (`lock_evict`), which hands the lock to its first waiter. A
    /// semaphore's permit or a read-write lock's hold is the holder's own
    /// release: `release` and `rw_release` need only the token, and hand
    /// it on as a release does.
    async fn evict(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        if !is_lock(keys) {
            return self.release(keys, token).await;
        }
        let what = || format!("forcing {:?} free", keys.id());
        let row = self
            .query_one(
                &self.sql.lock_evict,
                &[keys.id().into(), token.as_str().into()],
                what,
            )
            .await?;
        row.get(0, &what)
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

    /// One statement over the tables of locks (semaphores and read-write
    /// locks) and the sessions of advisory locks: every live holder and
    /// live waiter of the keys under `prefix`.
    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        let what = || format!("listing the locks under {prefix:?}");
        let pattern = like_prefix(prefix);
        let rows = self
            .query(&self.sql.survey, &[pattern.as_str().into()], what)
            .await?;
        holdings(prefix, &rows, &what)
    }

    /// The wait after a crash or a failover (schema.sql's `lock_epoch`):
    /// noted now, when no session of lockguard's locks noted it yet, as
    /// the first lock session after the crash would.
    async fn crash_wait(&self) -> Result<Option<Duration>> {
        let what = || "reading the wait after a crash".to_owned();
        let row = self.query_one(&self.sql.crash_wait, &[], what).await?;
        let left: Option<i64> = row.get(0, &what)?;
        Ok(left
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis))
    }
}

impl DataStore for PostgresStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let key = keys.id();
        let what = || format!("adding to counter {key:?}");
        let row = self
            .query_one(
                &self.sql.counter_add,
                &[key.into(), delta.into(), net::ttl_millis(ttl).into()],
                what,
            )
            .await
            .map_err(overflow_is_invalid(key))?;
        row.get(0, &what)
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let key = keys.id();
        let what = || format!("taking from counter {key:?}");
        let row = self
            .query_one(
                &self.sql.counter_take,
                &[key.into(), n.into(), net::ttl_millis(ttl).into()],
                what,
            )
            .await
            .map_err(overflow_is_invalid(key))?;
        let taken: bool = row.get(0, &what)?;
        let value: i64 = row.get(1, &what)?;
        Ok(if taken { Ok(value) } else { Err(value) })
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        let key = keys.id();
        let what = || format!("reading counter {key:?}");
        let rows = self
            .query(&self.sql.counter_get, &[key.into()], what)
            .await?;
        let Some(row) = rows.first() else {
            return Ok((0, 0));
        };
        let value: i64 = row.get(0, &what)?;
        let version: i64 = row.get(1, &what)?;
        Ok((value, version.max(0).unsigned_abs()))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        let key = keys.id();
        let what = || format!("setting counter {key:?}");
        let expected = expected.map(|v| v.to_string());
        let row = self
            .query_one(
                &self.sql.counter_set,
                &[
                    key.into(),
                    value.into(),
                    expected.as_deref().into(),
                    net::ttl_millis(ttl).into(),
                ],
                what,
            )
            .await?;
        let done: bool = row.get(0, &what)?;
        let version: i64 = row.get(1, &what)?;
        let version = version.max(0).unsigned_abs();
        Ok(if done { Ok(version) } else { Err(version) })
    }

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        let marks = format!("{}:marks", keys.id());
        let key = marks.as_str();
        let what = || format!("marking {member:?} in {key:?}");
        let row = self
            .query_one(
                &self.sql.mark_once,
                &[key.into(), member.into(), net::ttl_millis(ttl).into()],
                what,
            )
            .await?;
        row.get(0, &what)
    }

    async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        let key = keys.id();
        let what = || format!("rate limiting {key:?}");
        let cost = i64::try_from(cost).map_err(|_| {
            Error::invalid(format!("rate limiting {key:?}: cost {cost} is too large"))
        })?;
        match op {
            LimitOp::Gcra(p) => {
                let row = self
                    .query_one(
                        &self.sql.gcra,
                        &[
                            key.into(),
                            p.t.into(),
                            p.tau.into(),
                            cost.into(),
                            peek.into(),
                        ],
                        what,
                    )
                    .await?;
                let allowed: bool = row.get(0, &what)?;
                let used: i64 = row.get(1, &what)?;
                let retry: i64 = row.get(2, &what)?;
                Ok(LimitReply::gcra(allowed, used, retry))
            }
            LimitOp::Fixed { limit, .. } => {
                let window_ms = i64::try_from(op.period_ms()).unwrap_or(i64::MAX);
                let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
                let row = self
                    .query_one(
                        &self.sql.fixed_window,
                        &[
                            key.into(),
                            limit_i.into(),
                            window_ms.into(),
                            cost.into(),
                            peek.into(),
                        ],
                        what,
                    )
                    .await?;
                let allowed: bool = row.get(0, &what)?;
                let used: i64 = row.get(1, &what)?;
                let left_ms: i64 = row.get(2, &what)?;
                Ok(LimitReply::fixed_ms(
                    allowed,
                    used.max(0).unsigned_abs(),
                    left_ms,
                ))
            }
            LimitOp::Sliding { limit, period_us } => {
                let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
                let row = self
                    .query_one(
                        &self.sql.sliding_window,
                        &[
                            key.into(),
                            limit_i.into(),
                            period_us.into(),
                            cost.into(),
                            peek.into(),
                        ],
                        what,
                    )
                    .await?;
                let allowed: bool = row.get(0, &what)?;
                let used: i64 = row.get(1, &what)?;
                let reset: i64 = row.get(2, &what)?;
                let retry: i64 = row.get(3, &what)?;
                Ok(LimitReply::window(
                    allowed,
                    used.max(0).unsigned_abs(),
                    reset,
                    retry,
                ))
            }
            _ => Err(lockguard_core::store::unsupported(
                self.name(),
                "this rate-limit algorithm",
            )),
        }
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        let what = || format!("writing fenced {key:?}");
        let rows = self
            .query(
                &self.sql.fenced_write,
                &[key.into(), (&token.to_string()).into(), value.into()],
                what,
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        let what = || format!("reading fenced {key:?}");
        let rows = self
            .query(&self.sql.fenced_read, &[key.into()], what)
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let fence: String = row.get(0, &what)?;
        // NULL: a removed value, whose row keeps its token.
        let Some(value) = row.get::<Option<Vec<u8>>>(1, &what)? else {
            return Ok(None);
        };
        let fence = fence.parse::<u64>().map_err(|_| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: unreadable token {fence:?}", what()),
            )
        })?;
        Ok(Some((fence, value)))
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        let what = || format!("removing fenced {key:?}");
        let rows = self
            .query(
                &self.sql.fenced_remove,
                &[key.into(), (&token.to_string()).into()],
                what,
            )
            .await?;
        Ok(!rows.is_empty())
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
        lockguard_testing::assert_lock_futures_within::<PostgresStore>(4096);
    }

    #[test]
    fn survey_patterns_escape_what_like_reads() {
        assert_eq!(like_prefix(""), "%");
        assert_eq!(like_prefix("lockguard:"), "lockguard:%");
        assert_eq!(like_prefix("a_b%c\\d:"), "a\\_b\\%c\\\\d:%");
    }

    /// On a server, the pattern of a prefix holding LIKE's wildcards and
    /// its escape character matches the identities under that prefix and
    /// no others.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn survey_patterns_match_their_prefix_alone_on_the_server() {
        let server = lockguard_testing::PostgresServer::shared();
        let (db, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let pattern = like_prefix("a_%\\:");
        for (id, under) in [
            ("a_%\\:lock:{n}", true),
            ("a_%\\:", true),
            ("ab:lock:{n}", false),
            ("a_x\\:lock:{n}", false),
            ("a_%:lock:{n}", false),
            ("a_%\\\\:lock:{n}", false),
            ("A_%\\:lock:{n}", false),
        ] {
            let row = db
                .query_one("SELECT $1::text LIKE $2::text", &[&id, &pattern])
                .await
                .unwrap();
            assert_eq!(row.get::<_, bool>(0), under, "{id:?}");
        }
    }

    #[test]
    fn read_write_locks_are_told_by_their_kind() {
        assert!(is_read_write("app:", "app:rw:{doc}"));
        assert!(!is_read_write("app:", "app:lock:{rw:doc}"));
        assert!(!is_read_write("app:", "other:rw:{doc}"));
    }
}
