//! Locks as PostgreSQL's own session advisory locks (schema version 8).
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
//! learns it at its next renewal. A statement whose answer is lost, or a
//! wait given up, never hands its session on: the session is dropped, and
//! its end frees whatever it took.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Row, Statement};

use lockguard_core::store::net;
use lockguard_core::store::{Inbox, LeaseEnd, LeaseEnds, LockKeys, Outcome, Token};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

use crate::error::pg_error;
use crate::options::PgOptions;
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

/// `sql` (one of the statements above) for the schema `schema`.
fn statement(sql: &str, schema: &str) -> String {
    sql.replace("__DRAW__", DRAW_SQL)
        .replace("__SCHEMA__", schema)
}

/// The most idle sessions a client keeps for later holds.
const IDLE_SESSIONS: usize = 64;

/// One session of the client's locks, with its statements prepared.
struct Session {
    client: tokio_postgres::Client,
    /// Kept so that the driving task does not end.
    _notes: mpsc::UnboundedReceiver<Note>,
    driver: JoinHandle<()>,
    try_lock: Statement,
    take: Statement,
    wait: Statement,
    wait_out: Statement,
    release: Statement,
    lease: Statement,
    keep: Statement,
    forget: Statement,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The connection closes, and the server ends the session: what it
        // held is free.
        self.driver.abort();
    }
}

/// A lock held on a session.
struct Hold {
    session: Arc<Session>,
    keys: Arc<LockKeys>,
    token: Token,
    fence: u64,
}

/// What this client knows of one token.
enum Entry {
    /// Waiting in the server, on a session the waiting task owns.
    Waiting { cancel: CancelToken },
    /// Granted to a waiter that has not claimed it yet; the answer came
    /// at `received`.
    Granted { hold: Hold, received: Instant },
    /// The wait failed; the waiter's next attempt is told.
    Failed(Error),
    /// Held, until `end` unless renewed.
    Holding { hold: Hold, end: LeaseEnd },
    /// Released before its `at_least` passed: kept until `end`.
    Kept { hold: Hold, end: LeaseEnd },
}

/// The client's locks: its sessions and what each token holds or awaits.
pub(crate) struct Locks {
    inner: Arc<Inner>,
}

struct Inner {
    config: tokio_postgres::Config,
    connector: Connector,
    opts: PgOptions,
    schema: String,
    idle: Mutex<Vec<Arc<Session>>>,
    entries: Mutex<HashMap<Token, Entry>>,
    inbox: OnceLock<Weak<dyn Inbox>>,
    ends: Arc<LeaseEnds>,
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("idle_sessions", &self.inner.idle().len())
            .field("tokens", &self.inner.entries().len())
            .finish_non_exhaustive()
    }
}

impl Drop for Locks {
    fn drop(&mut self) {
        self.inner.ends.close();
        // Waits still running are cancelled; every other session closes
        // with its entry.
        let entries = std::mem::take(&mut *self.inner.entries());
        let cancels: Vec<CancelToken> = entries
            .into_values()
            .filter_map(|e| match e {
                Entry::Waiting { cancel } => Some(cancel),
                _ => None,
            })
            .collect();
        if !cancels.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let connector = self.inner.connector.clone();
            runtime.spawn(async move {
                for cancel in cancels {
                    let _ = connector.cancel(&cancel).await;
                }
            });
        }
    }
}

impl Locks {
    /// The locks of a client whose sessions connect with `config`.
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        opts: PgOptions,
        schema: String,
    ) -> Self {
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let me = me.clone();
            Inner {
                config,
                connector,
                opts,
                schema,
                idle: Mutex::default(),
                entries: Mutex::default(),
                inbox: OnceLock::new(),
                ends: LeaseEnds::new(move |token, now| expire(&me, token, now)),
            }
        });
        Self { inner }
    }

    /// Where a waiter is told that the server granted it the lock.
    pub(crate) fn attach(&self, inbox: Weak<dyn Inbox>) {
        let _ = self.inner.inbox.set(inbox);
    }

    /// One attempt of `token` at the lock of `keys`: claims a lock the
    /// server granted to its wait; without `wait`, one try; with it, a
    /// wait in the server, started on a session of its own (the waiter is
    /// woken when it ends), or still running.
    pub(crate) async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        wait: bool,
    ) -> Result<Outcome> {
        {
            let mut entries = self.inner.entries();
            match entries.remove(token) {
                None => {}
                Some(Entry::Granted { hold, received }) => {
                    let fence = FencingToken::new(hold.fence);
                    // The server counts the lease from its grant, which
                    // came before its answer.
                    let end = self.inner.ends.schedule(*token, received + lease);
                    entries.insert(*token, Entry::Holding { hold, end });
                    return Ok(Outcome::Acquired {
                        fence,
                        keys: keys.clone(),
                    });
                }
                Some(Entry::Failed(e)) => return Err(e),
                Some(entry @ Entry::Waiting { .. }) => {
                    entries.insert(*token, entry);
                    return Ok(Outcome::Busy(None));
                }
                Some(entry) => {
                    entries.insert(*token, entry);
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        "a token already holding asked to acquire again",
                    ));
                }
            }
        }
        if wait {
            self.wait(keys, token, lease).await
        } else {
            self.try_lock(keys, token, lease).await
        }
    }

    /// One try, never waiting. The statement runs in a task of its own,
    /// which owns the session until the answer comes: when nobody waits
    /// for it any more (the attempt was dropped, or timed out), a lock it
    /// took is released there, and its lease ended.
    async fn try_lock(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
    ) -> Result<Outcome> {
        let what = || format!("acquiring {:?}", keys.id());
        let session = self.inner.session().await?;
        let sent = Instant::now();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(try_for(
            Arc::downgrade(&self.inner),
            session,
            keys.clone(),
            *token,
            lease,
            tx,
        ));
        let timeout = self.inner.opts.response_timeout;
        let answer = tokio::time::timeout(timeout, rx).await;
        let (session, row) = match answer {
            Ok(Ok((session, Ok(row)))) => (session, row),
            Ok(Ok((_, Err(e)))) => return Err(pg_error(e, &what())),
            Ok(Err(_)) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("{}: the attempt ended without an answer", what()),
                ));
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{}: no answer from postgres within {timeout:?}", what()),
                ));
            }
        };
        let acquired: bool = get(&row, 0, &what)?;
        let n: Option<i64> = get(&row, 1, &what)?;
        if !acquired {
            self.inner.put_back(session);
            let left = n.and_then(|n| u64::try_from(n).ok());
            return Ok(Outcome::Busy(left.map(Duration::from_millis)));
        }
        let hold = Hold {
            session,
            keys: keys.clone(),
            token: *token,
            fence: 0,
        };
        let fence = match fence(n, &what) {
            Ok(fence) => fence,
            Err(e) => {
                self.inner.abandon(hold).await;
                return Err(e);
            }
        };
        let end = self.inner.ends.schedule(*token, sent + lease);
        let hold = Hold { fence, ..hold };
        self.inner
            .entries()
            .insert(*token, Entry::Holding { hold, end });
        Ok(Outcome::Acquired {
            fence: FencingToken::new(fence),
            keys: keys.clone(),
        })
    }

    /// Starts `token`'s wait in the server.
    async fn wait(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<Outcome> {
        let session = self.inner.session().await?;
        let cancel = session.client.cancel_token();
        self.inner
            .entries()
            .insert(*token, Entry::Waiting { cancel });
        tokio::spawn(wait_for(
            Arc::downgrade(&self.inner),
            session,
            keys.clone(),
            *token,
            lease,
        ));
        Ok(Outcome::Busy(None))
    }

    /// Gives up `token`'s lock, or its wait: true when it held the lock.
    pub(crate) async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        let entry = self.inner.entries().remove(token);
        match entry {
            // An attempt that failed (its answer lost, its session gone)
            // may have taken the lock: its lease is ended.
            None | Some(Entry::Failed(_)) => {
                self.inner.forget(keys, token).await;
                Ok(false)
            }
            Some(Entry::Waiting { cancel }) => {
                // The waiting task drops its session when the wait ends,
                // which frees a lock granted meanwhile.
                let connector = self.inner.connector.clone();
                tokio::spawn(async move {
                    if let Err(e) = connector.cancel(&cancel).await {
                        tracing::debug!(error = %e, "cancelling a postgres lock wait");
                    }
                });
                Ok(false)
            }
            Some(Entry::Granted { hold, .. }) => self.inner.unlock(hold).await,
            Some(Entry::Holding { hold, end } | Entry::Kept { hold, end }) => {
                drop(end);
                self.inner.unlock(hold).await
            }
        }
    }

    /// Renews `token`'s lease to `lease` from now, on its session: true
    /// when it still holds the lock.
    pub(crate) async fn extend(&self, token: &Token, lease: Duration) -> Result<bool> {
        self.renew(token, lease, false).await
    }

    /// Keeps `token`'s lock for `keep` more, past its client's end.
    pub(crate) async fn release_later(&self, token: &Token, keep: Duration) -> Result<bool> {
        self.renew(token, keep, true).await
    }

    async fn renew(&self, token: &Token, lease: Duration, keep: bool) -> Result<bool> {
        let (session, keys, fence) = match self.inner.entries().get(token) {
            Some(Entry::Holding { hold, .. }) => {
                (hold.session.clone(), hold.keys.clone(), hold.fence)
            }
            _ => return Ok(false),
        };
        let what = || format!("extending {:?}", keys.id());
        let fence_param = i64::try_from(fence).unwrap_or(i64::MAX);
        let ms = net::millis(lease);
        let sent = Instant::now();
        let answer = if keep {
            self.inner
                .ask(
                    &session,
                    &session.keep,
                    &[&keys.id(), &token.as_str(), &fence_param, &ms],
                    &what,
                )
                .await
        } else {
            self.inner
                .ask(
                    &session,
                    &session.lease,
                    &[&keys.id(), &token.as_str(), &fence_param, &ms],
                    &what,
                )
                .await
        };
        let mut entries = self.inner.entries();
        let same = matches!(
            entries.get(token),
            Some(Entry::Holding { hold, .. }) if Arc::ptr_eq(&hold.session, &session)
        );
        match answer {
            Ok(_) if same => {
                let end = self.inner.ends.schedule(*token, sent + lease);
                if let Some(Entry::Holding { hold, .. }) = entries.remove(token) {
                    let entry = if keep {
                        Entry::Kept { hold, end }
                    } else {
                        Entry::Holding { hold, end }
                    };
                    entries.insert(*token, entry);
                }
                Ok(true)
            }
            Ok(_) => Ok(false),
            // The session ended, and the lock with it.
            Err(_) if session.client.is_closed() => {
                if same {
                    entries.remove(token);
                }
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

impl Inner {
    fn entries(&self) -> MutexGuard<'_, HashMap<Token, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Arc<Session>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle session, or a new one.
    async fn session(&self) -> Result<Arc<Session>> {
        loop {
            let Some(session) = self.idle().pop() else {
                break;
            };
            if !session.client.is_closed() {
                return Ok(session);
            }
        }
        self.connect().await
    }

    /// Keeps `session` for a later hold, unless it is closed or enough
    /// are kept.
    fn put_back(&self, session: Arc<Session>) {
        if session.client.is_closed() || Arc::strong_count(&session) > 1 {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < IDLE_SESSIONS {
            idle.push(session);
        }
    }

    /// Opens a session and prepares its statements.
    async fn connect(&self) -> Result<Arc<Session>> {
        const WHAT: &str = "opening a postgres session for a lock";
        let s = &self.schema;
        let opening = async {
            let (client, notes, driver) = self
                .connector
                .connect_listening(&self.config)
                .await
                .map_err(|e| pg_error(e, WHAT))?;
            let prepared = async {
                let start = format!("SELECT {s}.lock_session()");
                let try_sql = statement(TRY_SQL, s);
                let take_sql = format!("SELECT acquired, n FROM {s}.lock_take($1, $2, $3)");
                let wait_sql = statement(WAIT_SQL, s);
                let wait_out_sql = format!("SELECT {s}.lock_wait_out($1, $2, $3)");
                let release_sql = statement(RELEASE_SQL, s);
                let lease_sql = format!("SELECT {s}.lock_lease($1, $2, $3, $4)");
                let keep_sql = format!("SELECT {s}.lock_keep($1, $2, $3, $4)");
                let forget_sql = format!("SELECT {s}.lock_forget($1, $2)");
                let (started, try_lock, take, wait, wait_out, release, lease, keep, forget) = tokio::join!(
                    client.batch_execute(&start),
                    client.prepare(&try_sql),
                    client.prepare(&take_sql),
                    client.prepare(&wait_sql),
                    client.prepare(&wait_out_sql),
                    client.prepare(&release_sql),
                    client.prepare(&lease_sql),
                    client.prepare(&keep_sql),
                    client.prepare(&forget_sql),
                );
                started?;
                Ok::<_, tokio_postgres::Error>([
                    try_lock?, take?, wait?, wait_out?, release?, lease?, keep?, forget?,
                ])
            }
            .await;
            match prepared {
                Ok([try_lock, take, wait, wait_out, release, lease, keep, forget]) => {
                    Ok(Arc::new(Session {
                        client,
                        _notes: notes,
                        driver,
                        try_lock,
                        take,
                        wait,
                        wait_out,
                        release,
                        lease,
                        keep,
                        forget,
                    }))
                }
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

    /// Runs one prepared statement on `session` within the response
    /// timeout: its one row.
    async fn ask(
        &self,
        session: &Session,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Row> {
        let timeout = self.opts.response_timeout;
        let answer = tokio::time::timeout(timeout, async {
            session
                .client
                .query_one(statement, params)
                .await
                .map_err(|e| pg_error(e, &what()))
        })
        .await;
        net::within(timeout, "postgres", what, answer)
    }

    /// Gives back a lock taken for nobody: unlocked, its lease ended; a
    /// session that fails to do it is dropped (its end frees the lock).
    async fn abandon(&self, hold: Hold) {
        let (keys, token) = (hold.keys.clone(), hold.token);
        if !matches!(self.unlock(hold).await, Ok(true)) {
            self.forget(&keys, &token).await;
        }
    }

    /// Ends the lease an attempt of `token` may have left in the lock's
    /// row (`lock_forget`), on any session; what fails is left to the
    /// lease's end.
    async fn forget(&self, keys: &Arc<LockKeys>, token: &Token) {
        let what = || format!("ending an attempt at {:?}", keys.id());
        let Ok(session) = self.session().await else {
            return;
        };
        let answer = self
            .ask(
                &session,
                &session.forget,
                &[&keys.id(), &token.as_str()],
                &what,
            )
            .await;
        if answer.is_ok() {
            self.put_back(session);
        }
    }

    /// Unlocks `hold` on its session: true when the session held it. A
    /// session that fails to answer is dropped: its end frees the lock.
    async fn unlock(&self, hold: Hold) -> Result<bool> {
        let what = || format!("releasing {:?}", hold.keys.id());
        let answer = self
            .ask(
                &hold.session,
                &hold.session.release,
                &[&hold.keys.id(), &hold.token.as_str()],
                &what,
            )
            .await;
        match answer {
            Ok(row) => {
                let held: bool = get(&row, 0, &what)?;
                if held {
                    self.put_back(hold.session);
                }
                Ok(held)
            }
            // The session ended, and the lock with it.
            Err(_) if hold.session.client.is_closed() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The wait of `token` for the lock of `keys`, on `session`: records the
/// grant (or the failure) for the waiter's next attempt, and wakes it. A
/// wait given up meanwhile drops its session.
async fn wait_for(
    inner: Weak<Inner>,
    session: Arc<Session>,
    keys: Arc<LockKeys>,
    token: Token,
    lease: Duration,
) {
    let params: [&(dyn ToSql + Sync); 3] = [&keys.id(), &token.as_str(), &net::millis(lease)];
    let mut answer = session.client.query_one(&session.wait, &params).await;
    // Granted, but with no fencing token drawn: finished by lock_wait_out,
    // on the session that holds the lock.
    if let Ok(row) = &answer
        && row.try_get::<_, Option<i64>>(0).is_ok_and(|n| n.is_none())
    {
        answer = session.client.query_one(&session.wait_out, &params).await;
    }
    let received = Instant::now();
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let waiting = matches!(inner.entries().get(&token), Some(Entry::Waiting { .. }));
    if !waiting {
        // Given up: a cancel may still be on its way to this session, so
        // it serves nothing else; a grant's lease is ended.
        drop(session);
        if answer.is_ok() {
            inner.forget(&keys, &token).await;
        }
        return;
    }
    {
        let what = || format!("waiting for {:?}", keys.id());
        let lock = keys.clone();
        let entry = match answer {
            Ok(row) => match get::<Option<i64>>(&row, 0, &what).and_then(|n| fence(n, &what)) {
                Ok(fence) => Entry::Granted {
                    hold: Hold {
                        session,
                        keys,
                        token,
                        fence,
                    },
                    received,
                },
                Err(e) => Entry::Failed(e),
            },
            Err(e) => Entry::Failed(pg_error(e, &what())),
        };
        let late = {
            let mut entries = inner.entries();
            if matches!(entries.get(&token), Some(Entry::Waiting { .. })) {
                entries.insert(token, entry);
                None
            } else {
                Some(entry)
            }
        };
        // Given up while the answer was read: as above.
        if let Some(entry) = late {
            drop(entry);
            inner.forget(&lock, &token).await;
            return;
        }
    }
    if let Some(inbox) = inner.inbox.get().and_then(Weak::upgrade) {
        inbox.wake(&token);
    }
}

/// The answer of a try, with its session.
type TryAnswer = (
    Arc<Session>,
    std::result::Result<Row, tokio_postgres::Error>,
);

/// Runs `token`'s try at the lock of `keys` on `session` and hands the
/// answer on; when nobody takes it, a lock taken is released (on the
/// session, which is then kept) and its lease ended.
async fn try_for(
    inner: Weak<Inner>,
    session: Arc<Session>,
    keys: Arc<LockKeys>,
    token: Token,
    lease: Duration,
    tx: oneshot::Sender<TryAnswer>,
) {
    let params: [&(dyn ToSql + Sync); 3] = [&keys.id(), &token.as_str(), &net::millis(lease)];
    let mut answer = session.client.query_one(&session.try_lock, &params).await;
    // Taken, but with no fencing token drawn: finished (or undone) by
    // lock_take, on the session that holds it.
    if let Ok(row) = &answer
        && row.try_get::<_, bool>(0).unwrap_or(false)
        && row.try_get::<_, Option<i64>>(1).is_ok_and(|n| n.is_none())
    {
        answer = session.client.query_one(&session.take, &params).await;
    }
    let Err((session, answer)) = tx.send((session, answer)) else {
        return;
    };
    let Some(inner) = inner.upgrade() else {
        return;
    };
    match answer {
        Ok(row) if row.try_get::<_, bool>(0).unwrap_or(true) => {
            let hold = Hold {
                session,
                keys,
                token,
                fence: 0,
            };
            inner.abandon(hold).await;
        }
        Ok(_) => inner.put_back(session),
        Err(_) => {}
    }
}

/// Ends `token`'s hold, whose lease ended by `now` unless it was renewed
/// or released since: it is unlocked in the background.
fn expire(inner: &Weak<Inner>, token: Token, now: Instant) {
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let ended = {
        let mut entries = inner.entries();
        let due = matches!(
            entries.get(&token),
            Some(Entry::Holding { end, .. } | Entry::Kept { end, .. }) if end.at() <= now
        );
        if due { entries.remove(&token) } else { None }
    };
    if let Some(Entry::Holding { hold, .. } | Entry::Kept { hold, .. }) = ended {
        tracing::debug!(lock = %hold.keys.id(), "lease ended; unlocking");
        tokio::spawn(async move {
            if let Err(e) = inner.unlock(hold).await {
                tracing::debug!(error = %e, "unlocking a lock whose lease ended");
            }
        });
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

/// A fencing token as a statement answers it: positive.
fn fence(n: Option<i64>, what: &dyn Fn() -> String) -> Result<u64> {
    n.and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: unexpected fencing token {n:?}", what()),
            )
        })
}
