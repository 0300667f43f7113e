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

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Pool, Row};

use lockguard_core::Result;
use lockguard_core::store::net;
use lockguard_core::store::{HoldOf, LockSessions, SessionLocks, Token, Tried, Waited};

use crate::error::{garbage, is_gone, mysql_error, read_row};

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
}

impl MySqlSessions {
    /// Sessions opened with `opts`, calling the procedures of tables
    /// named with `prefix`; a wait is cancelled over `pool`.
    pub(crate) fn new(
        opts: mysql_async::Opts,
        pool: Pool,
        prefix: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Self {
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
        if lease_ms <= session.bound_ms.load(Ordering::Relaxed) {
            return Ok(());
        }
        let what = || format!("recording the lease of {key:?}");
        let mut conn = session.conn.lock().await;
        if let Err(e) = conn.exec_drop(&self.bound_sql, (lease_ms,)).await {
            if is_gone(&e) {
                session.closed.store(true, Ordering::Relaxed);
            }
            return Err(mysql_error(e, &what()));
        }
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
        match conn.exec_first::<Row, _, _>(sql, params).await {
            Ok(Some(row)) => Ok(row),
            Ok(None) => Err(garbage(&what(), "no row")),
            Err(e) => {
                if is_gone(&e) {
                    session.closed.store(true, Ordering::Relaxed);
                }
                Err(mysql_error(e, &what()))
            }
        }
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
        let fence = i64::try_from(hold.fence.get()).unwrap_or(i64::MAX);
        let params = (
            hold.key,
            hold.token.as_str(),
            fence,
            net::millis(lease),
            i8::from(keep),
        )
            .into();
        let row = self.one(session, &self.lease_sql, params, &what).await?;
        Ok(read_row::<i64>(row, &what)? == 1)
    }

    async fn forget(&self, session: &Session, key: &str, token: &Token) -> Result<()> {
        let what = || format!("ending an attempt at {key:?}");
        let params = (key, token.as_str()).into();
        self.one(session, &self.forget_sql, params, &what).await?;
        Ok(())
    }
}
