//! The MySQL/MariaDB store of lockguard: locks and semaphores as rows with
//! leases on the database's clock, built on lockguard's public
//! [store boundary](lockguard_core::store).
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = lockguard_mysql::connect("mysql://app:secret@127.0.0.1:3306/app").await?;
//! let guard = lg.lock("order:42").acquire().await?;
//! println!("fencing token {}", guard.fencing_token().get());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - **Rows and leases.** A holder of a lock or semaphore permit is a row
//!   with its lease end in µs on the database's clock (`SYSDATE(6)`, read
//!   after the key's row lock); no client's clock takes part.
//! - **One transaction, one round trip.** Every operation is one `CALL` of
//!   a procedure lockguard creates on connect, or a database administrator
//!   installs beforehand (tables prefixed `lockguard_`
//!   by default, InnoDB, a schema version row in `lockguard_meta`). Each
//!   starts with an upsert of the key's row in `lockguard_keys`, which
//!   takes its exclusive row lock by primary key (never a scan): the
//!   operations on one key run one after another.
//! - **Fair queue, direct handoff.** Waiters queue first come first served
//!   in `lockguard_waiters`, their place refreshed by each of their
//!   attempts; a release hands the lock to the first live waiter in its own
//!   transaction. A waiter that died is skipped once its place lapses.
//! - **Fencing tokens** are drawn as `GREATEST(previous, clock in µs) + 1`
//!   from the key's row, so they never go back, across the row's removal
//!   and a server restart.
//! - **Wake-ups without polling.** MySQL has no `LISTEN`/`NOTIFY`. Each
//!   client keeps a *bell*: one connection holding a user lock
//!   (`GET_LOCK`) and one waiting for that lock in a query, itself holding
//!   a user lock named for the client. A release that hands a lock to one
//!   of its waiters writes the handoff to a mailbox table and, after
//!   committing, finds the bell's connection by its lock (`IS_USED_LOCK`)
//!   and interrupts it with `KILL QUERY` (in the same procedure call), so
//!   that only that client wakes, and only the waiter concerned takes the
//!   lock.
//!   A lost ring (the bell reconnecting, say) is covered by the waiter's
//!   timed refresh, which claims a lock handed to it as well. Why a user
//!   lock's wait and not `SLEEP()`, and not `GET_LOCK` per waiter: see the
//!   `bell` module's source.
//! - **Counters, limiters, fenced values** are rows too, each operation one
//!   procedure call under the row's lock: counters with a version column
//!   (compare-and-set, `decr_if_at_least` that never goes below zero,
//!   `mark_once`), GCRA, fixed and sliding windows on the database's clock
//!   (the core's `decide` makes the decision from their numbers).
//!
//! What a handoff costs under contention (statements per acquisition, the
//! handoff's latency against a polling loop's) is measured in
//! [docs/mysql.md](https://github.com/lockguard/lockguard/blob/main/docs/mysql.md#under-contention),
//! with `cargo test -p lockguard-mysql --test contention -- --ignored
//! --nocapture`.
//!
//! # Privileges
//!
//! A user that creates lockguard's tables and procedures on connect (when
//! they are missing, or older than this version) needs `CREATE`,
//! `CREATE ROUTINE`, `ALTER ROUTINE` and `INDEX` on the database, besides
//! the grants below. Once they are installed at this version (by a
//! database administrator, with the SQL of [`migration_sql`]), a client
//! reads their version and creates nothing, and its user needs only
//!
//! ```sql
//! GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON app.* TO 'app'@'%';
//! ```
//!
//! The bell needs no more: its user locks (`GET_LOCK`, `IS_USED_LOCK`)
//! take no privilege, and the `KILL` with which a new bell ends a stale
//! connection of its own client's is a user's right over its own
//! connections. Ringing a bell (`KILL QUERY`) runs in lockguard's ring
//! procedure, as the procedure's definer (the account that created it): it
//! rings the bells of the definer's own user, and of every user only when
//! the definer has `CONNECTION ADMIN` (MariaDB) / `CONNECTION_ADMIN`
//! (MySQL). So with clients of more than one user, install the schema as
//! an administrator holding that privilege (or give it to the user that
//! creates it); otherwise their waiters wake at their timed refreshes. A
//! client opens its pool (up to 16 connections) and, at its first wait,
//! the bell's two connections.
//!
//! # What is offered
//!
//! Everything a lockguard store offers: locks, semaphores, fencing tokens,
//! waiting with direct handoff, inspection, counters, rate limiters and
//! fenced values. For the application's own tables, [`FencedTable`] writes
//! a row only with a token not older than its last write's, and checks
//! the row-lock pitfalls (autocommit, an unindexed key column) where it
//! can.
//!
//! Tested on MariaDB 10.11; MySQL 8 should work (nothing MariaDB-only is
//! used: no `RETURNING`, no sequences) but is not tested.

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::time::Duration;

use lockguard_core::store::Store;
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

mod bell;
pub mod check;
mod error;
mod fenced_table;
mod flights;
mod schema;
mod store;

pub use fenced_table::FencedTable;
pub use schema::{DEFAULT_TABLE_PREFIX, migration_sql};

/// The connections of the pool lockguard makes for itself.
const DEFAULT_POOL_SIZE: usize = 16;

/// How often each client removes expired state from the tables.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long a bell sleeps when nobody rings it.
const BELL_PERIOD: Duration = Duration::from_secs(30);

/// Connects a client to the MySQL or MariaDB server at `url`
/// (`mysql://user:password@host:port/database`) with default settings.
///
/// # Errors
///
/// As [`MySqlOptions::connect`].
pub async fn connect(url: &str) -> Result<Client> {
    connect_with(Client::builder(), url).await
}

/// Connects a client built by `builder` (its prefix, leases, waits) to the
/// server at `url`, with default store settings.
///
/// # Errors
///
/// As [`MySqlOptions::connect`], and [`ErrorKind::InvalidInput`] for
/// builder settings that cannot work.
pub async fn connect_with(builder: Builder, url: &str) -> Result<Client> {
    builder.validate()?;
    let settings = builder.connection_settings();
    let store = MySqlOptions::new()
        .connect_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .connect(url)
        .await?;
    builder.build(store)
}

/// `Client::connect_mysql(url)`: [`connect`] as a constructor of
/// lockguard-core's `Client`, like the other store crates'.
pub trait ClientExt: Sized {
    /// See [`connect`].
    ///
    /// # Errors
    ///
    /// As [`MySqlOptions::connect`].
    fn connect_mysql(url: &str) -> impl std::future::Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    fn connect_mysql(url: &str) -> impl std::future::Future<Output = Result<Self>> + Send {
        connect(url)
    }
}

/// `builder.connect_mysql(url)`: [`connect_with`] on lockguard-core's
/// `Builder`, like the other store crates'.
pub trait BuilderExt {
    /// See [`connect_with`].
    ///
    /// # Errors
    ///
    /// As [`connect_with`].
    fn connect_mysql(self, url: &str) -> impl std::future::Future<Output = Result<Client>> + Send;
}

impl BuilderExt for Builder {
    fn connect_mysql(self, url: &str) -> impl std::future::Future<Output = Result<Client>> + Send {
        connect_with(self, url)
    }
}

/// The settings of the MySQL store: table prefix, timeouts, pool size.
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    table_prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    pool_size: usize,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl MySqlOptions {
    /// The defaults: tables prefixed `lockguard_`, 2 s to connect, 2 s per
    /// request, up to 16 pooled connections.
    pub fn new() -> Self {
        Self {
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    /// The prefix of lockguard's table and procedure names (default
    /// `"lockguard_"`): lowercase letters, digits and underscores, starting
    /// with a letter, at most 40 characters. Clients that share locks must
    /// use the same database and prefix (and the same key prefix).
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// How long connecting may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may take (default 2 s); also how long a
    /// statement waits for a row lock (`innodb_lock_wait_timeout`, whole
    /// seconds, at least 1).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The most pooled connections (default 16); the bell takes two more.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Connects to the server at `url` (`mysql://user:password@host:port/database`;
    /// the driver's URL parameters apply) and returns the store, for
    /// [`Builder::build`]. Reads the version of lockguard's tables and
    /// procedures, and creates them when they are missing or older (see
    /// [Privileges](crate#privileges)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL, one that names no
    /// database, or settings that cannot work; [`ErrorKind::Unavailable`]
    /// when the server cannot be reached within the connect timeout;
    /// [`ErrorKind::Unauthorized`] when it refuses the user, or a grant
    /// lockguard needs; [`ErrorKind::Misconfigured`] for a database the
    /// server does not have, or a binary log in `STATEMENT` format (which
    /// refuses lockguard's writes); [`ErrorKind::Unsupported`] for tables
    /// made by a newer lockguard.
    pub async fn connect(&self, url: &str) -> Result<Store> {
        schema::validate_prefix(&self.table_prefix)?;
        for (what, d) in [
            ("connect timeout", self.connect_timeout),
            ("response timeout", self.response_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("the {what} must be above zero"),
                ));
            }
        }
        if self.pool_size == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the pool size must be at least 1",
            ));
        }
        let opts = mysql_async::Opts::from_url(url).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("malformed mysql url {:?}", redact(url)),
            )
            .with_source(e)
        })?;
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "mysql url {:?} names no database (mysql://user:password@host/DATABASE)",
                    redact(url)
                ),
            ));
        }
        let lock_wait = self.response_timeout.as_secs().max(1);
        let constraints =
            mysql_async::PoolConstraints::new(0, self.pool_size).ok_or_else(|| {
                Error::new(ErrorKind::InvalidInput, "the pool size must be at least 1")
            })?;
        let pool_opts = opts
            .pool_opts()
            .clone()
            .with_constraints(constraints)
            // Connections handed back stay in the pool, idle up to a
            // minute (with no idle time-to-live the driver keeps only the
            // pool's minimum, and every request would open a connection).
            .with_inactive_connection_ttl(Duration::from_secs(60))
            // A connection handed back keeps its session (time zone,
            // isolation, prepared statements): resetting it would cost a
            // round trip and the statements' preparation each time.
            .with_reset_connection(false);
        let opts: mysql_async::Opts = mysql_async::OptsBuilder::from_opts(opts)
            .tcp_nodelay(true)
            .setup(vec![
                // Lease arithmetic reads SYSDATE(6) as µs since the epoch
                // (schema::clock_us): in UTC, with no daylight-saving jumps.
                "SET time_zone = '+00:00'".to_owned(),
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
                format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}"),
            ])
            .pool_opts(pool_opts)
            .into();
        let pool = mysql_async::Pool::new(opts.clone());
        let cfg = store::Config {
            prefix: self.table_prefix.clone(),
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            sweep_interval: SWEEP_INTERVAL,
            bell_period: BELL_PERIOD,
        };
        let store = store::connect(pool, opts, cfg).await;
        if store.is_ok() {
            tracing::debug!(prefix = %self.table_prefix, "connected to mysql");
        }
        store
    }
}

/// Hides a password in a URL before it reaches a message.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact("mysql://app:secret@db:3306/app?x=1"),
            "mysql://app:***@db:3306/app?x=1"
        );
        assert_eq!(redact("mysql://db/app"), "mysql://db/app");
    }

    #[tokio::test]
    async fn bad_urls_and_settings_are_invalid_input() {
        for url in [
            "mysql://u:secret@h:notaport/db",
            "mysql://u:secret@127.0.0.1:1",
            "postgres://u:secret@h/db",
        ] {
            let err = match MySqlOptions::new().connect(url).await {
                Err(e) => e,
                Ok(s) => panic!("{url:?} connected: {s:?}"),
            };
            assert!(err.is_invalid_input(), "{url:?}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let err = MySqlOptions::new()
            .table_prefix("Bad-Name")
            .connect("mysql://u@127.0.0.1:1/db")
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
}
