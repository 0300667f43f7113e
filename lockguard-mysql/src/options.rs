//! The store's settings: [`MySqlOptions`] as the application sets them,
//! and [`Config`], what the store and its bell need of them. A leaf:
//! every other module may use it, and it uses none of them.

use std::time::Duration;

use lockguard_core::store::LockLeases;

/// The default table prefix.
pub const DEFAULT_TABLE_PREFIX: &str = "lockguard_";

/// The connections of the pool lockguard makes for itself.
const DEFAULT_POOL_SIZE: usize = 16;

/// How often each client removes expired state from the tables.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long a bell sleeps when nobody rings it.
pub(crate) const BELL_PERIOD: Duration = Duration::from_secs(30);

/// The settings of the MySQL store: table prefix, timeouts, pool size.
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    pub(crate) table_prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) pool_size: usize,
    pub(crate) tls: crate::tls::TlsSettings,
    pub(crate) lock_leases: LockLeases,
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
            tls: crate::tls::TlsSettings::default(),
            lock_leases: LockLeases::Recorded,
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

    /// What the locks' leases rest on (default [`LockLeases::Recorded`]):
    /// with [`LockLeases::Session`], on MariaDB, a hold records nothing
    /// (its try is `GET_LOCK` and a sequence's next value in one
    /// statement, its release the bare `RELEASE_LOCK`), the server ends a
    /// paused or cut-off holder's session once idle for its lease and a
    /// slack (`wait_timeout`), and a session's end hands the lock on at
    /// once (see [`LockLeases`] and the crate docs). A URL's `lock_leases`
    /// parameter, when it has one, overrides this.
    pub fn lock_leases(mut self, leases: LockLeases) -> Self {
        self.lock_leases = leases;
        self
    }
}

/// What the store needs to know of its settings.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) sweep_interval: Duration,
    /// How long a bell sleeps between wake-ups when nobody rings it.
    pub(crate) bell_period: Duration,
    /// What the locks' leases rest on.
    pub(crate) leases: LockLeases,
}
