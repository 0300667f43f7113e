//! Connecting to MySQL/MariaDB: [`MySqlBuilder`] (a client's settings and
//! the store's, connected to a [`Client`]), the constructors that
//! [`ClientExt`] and [`BuilderExt`] add to lockguard-core's `Client` and
//! `Builder`, [`MySqlOptions::connect`] (the store alone, for
//! [`Builder::build`]), and the store's URL grammar.

use std::future::Future;
use std::time::Duration;

use lockguard_core::store::Store;
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

use crate::options::{BELL_PERIOD, Config, MySqlOptions, SWEEP_INTERVAL};
use crate::{schema, store};

/// `Client::connect_mysql(url)`: a client with default settings on the
/// MySQL or MariaDB server at `url`.
pub trait ClientExt: Sized {
    /// Connects to the server at `url`
    /// (`mysql://user:password@host:port/database`) with default settings;
    /// see [`MySqlBuilder::connect_mysql`].
    ///
    /// # Errors
    ///
    /// As [`MySqlBuilder::connect_mysql`].
    fn connect_mysql(url: &str) -> impl Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    fn connect_mysql(url: &str) -> impl Future<Output = Result<Self>> + Send {
        Client::builder().connect_mysql(url)
    }
}

/// The MySQL constructors on lockguard-core's [`Builder`]: each starts a
/// [`MySqlBuilder`] from the builder's settings.
pub trait BuilderExt {
    /// The prefix of lockguard's table and procedure names (default
    /// [`DEFAULT_TABLE_PREFIX`](crate::DEFAULT_TABLE_PREFIX)); see
    /// [`MySqlBuilder::table_prefix`].
    fn mysql_table_prefix(self, prefix: impl Into<String>) -> MySqlBuilder;

    /// What the client's locks' leases rest on (default
    /// [`LockLeases::Recorded`](crate::LockLeases::Recorded)); see
    /// [`MySqlOptions::lock_leases`](crate::MySqlOptions::lock_leases).
    fn mysql_lock_leases(self, leases: crate::LockLeases) -> MySqlBuilder;

    /// See [`MySqlBuilder::connect_mysql`].
    ///
    /// # Errors
    ///
    /// As [`MySqlBuilder::connect_mysql`].
    fn connect_mysql(self, url: &str) -> impl Future<Output = Result<Client>> + Send;
}

impl BuilderExt for Builder {
    fn mysql_table_prefix(self, prefix: impl Into<String>) -> MySqlBuilder {
        MySqlBuilder::new(self).table_prefix(prefix)
    }

    fn mysql_lock_leases(self, leases: crate::LockLeases) -> MySqlBuilder {
        MySqlBuilder::new(self).lock_leases(leases)
    }

    fn connect_mysql(self, url: &str) -> impl Future<Output = Result<Client>> + Send {
        MySqlBuilder::new(self).connect_mysql(url)
    }
}

/// A client's settings ([`Builder`]) and the MySQL store's own: the table
/// prefix and the pool's size. The timeouts are the client's (its
/// connect and response timeouts).
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> lockguard_core::Result<()> {
/// use lockguard_mysql::MySqlBuilder;
///
/// let lg = MySqlBuilder::new(lockguard_core::Client::builder())
///     .table_prefix("locks_")
///     .pool_size(8)
///     .connect_mysql("mysql://app:secret@127.0.0.1:3306/app")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MySqlBuilder {
    builder: Builder,
    options: MySqlOptions,
}

impl MySqlBuilder {
    /// The store's settings at their defaults, with the client's settings
    /// of `builder`.
    pub fn new(builder: Builder) -> Self {
        Self {
            builder,
            options: MySqlOptions::new(),
        }
    }

    /// The prefix of lockguard's table and procedure names (default
    /// `"lockguard_"`); see [`MySqlOptions::table_prefix`].
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options = self.options.table_prefix(prefix);
        self
    }

    /// The most pooled connections (default 16); the bell takes two more.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.options = self.options.pool_size(size);
        self
    }

    /// What the locks' leases rest on (default
    /// [`LockLeases::Recorded`](lockguard_core::store::LockLeases::Recorded));
    /// see [`MySqlOptions::lock_leases`].
    pub fn lock_leases(mut self, leases: lockguard_core::store::LockLeases) -> Self {
        self.options = self.options.lock_leases(leases);
        self
    }

    /// Trusts the CA certificates in `pem` (PEM, one or more) for the
    /// server's certificate, instead of the web's roots; connections then
    /// use TLS, whatever the URL says.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.tls.roots = Some(pem.into());
        self
    }

    /// Presents this certificate chain and key (PEM) to a server that
    /// authenticates its clients by certificate (`REQUIRE X509`);
    /// connections then use TLS, whatever the URL says.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_client_certificate(
        mut self,
        chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.options.tls.client = Some((chain_pem.into(), key_pem.into()));
        self
    }

    /// Connects to the MySQL or MariaDB server at `url`
    /// (`mysql://user:password@host:port/database`; the driver's URL
    /// parameters apply), with the client's connect and response timeouts,
    /// and builds the client. Creates lockguard's tables and procedures
    /// when they are missing or older (see [Privileges](crate#privileges)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for builder settings that cannot work,
    /// and as [`MySqlOptions::connect`].
    pub async fn connect_mysql(self, url: &str) -> Result<Client> {
        self.builder.validate()?;
        let settings = self.builder.connection_settings();
        let store = self
            .options
            .connect_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .connect(url)
            .await?;
        self.builder.build(store)
    }
}

/// Connects a client to the MySQL or MariaDB server at `url`
/// (`mysql://user:password@host:port/database`) with default settings:
/// `Client::connect_mysql(url)` ([`ClientExt`]) by another name.
///
/// # Errors
///
/// As [`MySqlBuilder::connect_mysql`].
#[deprecated(
    note = "use `Client::connect_mysql(url)` (`ClientExt`), as every store's crate has it"
)]
pub async fn connect(url: &str) -> Result<Client> {
    MySqlBuilder::new(Client::builder())
        .connect_mysql(url)
        .await
}

/// Connects a client built by `builder` (its prefix, leases, waits) to the
/// server at `url`, with default store settings: `builder.connect_mysql(url)`
/// ([`BuilderExt`]) by another name.
///
/// # Errors
///
/// As [`MySqlBuilder::connect_mysql`].
#[deprecated(
    note = "use `builder.connect_mysql(url)` (`BuilderExt`) or `MySqlBuilder`, as every store's crate has them"
)]
pub async fn connect_with(builder: Builder, url: &str) -> Result<Client> {
    MySqlBuilder::new(builder).connect_mysql(url).await
}

impl MySqlOptions {
    /// The settings checked, as the store and its bell take them.
    fn config(&self) -> Result<Config> {
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
        Ok(Config {
            prefix: self.table_prefix.clone(),
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            sweep_interval: SWEEP_INTERVAL,
            bell_period: BELL_PERIOD,
            leases: self.lock_leases,
        })
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
        let mut cfg = self.config()?;
        // A URL's `lock_leases` parameter, when it has one (the URL comes
        // back shorter without it), overrides the options'.
        let (leases, bare) = lockguard_core::store::url::lock_leases(url)?;
        if bare.len() != url.len() {
            cfg.leases = leases;
        }
        let opts = crate::tls::apply(from_url(&bare)?, &self.tls)?;
        let opts = session(opts, &cfg, self.pool_size)?;
        let pool = mysql_async::Pool::new(opts.clone());
        let store = store::connect(pool, opts, cfg).await;
        if store.is_ok() {
            tracing::debug!(prefix = %self.table_prefix, "connected to mysql");
        }
        store
    }
}

/// The driver's settings for `url` (`mysql://user:password@host:port/database`;
/// the driver's URL parameters apply): the store's URL grammar.
fn from_url(url: &str) -> Result<mysql_async::Opts> {
    let opts = mysql_async::Opts::from_url(url).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "malformed mysql url {:?}",
                lockguard_core::store::url::redacted(url)
            ),
        )
        .with_source(e)
    })?;
    if opts.db_name().is_none_or(str::is_empty) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "mysql url {:?} names no database (mysql://user:password@host/DATABASE)",
                lockguard_core::store::url::redacted(url)
            ),
        ));
    }
    Ok(opts)
}

/// The pool's and every session's settings over `opts`: at most
/// `pool_size` connections, each in UTC at READ COMMITTED, waiting for a
/// row lock no longer than a request may take.
fn session(opts: mysql_async::Opts, cfg: &Config, pool_size: usize) -> Result<mysql_async::Opts> {
    let lock_wait = cfg.response_timeout.as_secs().max(1);
    let constraints = mysql_async::PoolConstraints::new(0, pool_size)
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the pool size must be at least 1"))?;
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
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            lockguard_core::store::url::redacted("mysql://app:secret@db:3306/app?x=1"),
            "mysql://app:***@db:3306/app?x=1"
        );
        assert_eq!(
            lockguard_core::store::url::redacted("mysql://db/app"),
            "mysql://db/app"
        );
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
