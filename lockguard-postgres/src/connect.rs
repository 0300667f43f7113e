//! The constructors of PostgreSQL clients: [`ClientExt`] and
//! [`BuilderExt`] add them to lockguard-core's `Client` and `Builder`.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

use crate::options::{LockLeases, PgOptions};
use crate::schema;
use crate::store;
use crate::tls::{Connector, TlsSettings};

pub use crate::schema::DEFAULT_SCHEMA;

/// The connections of the pool lockguard makes for itself.
const POOL_SIZE: usize = 16;

/// How often each client removes expired state from the tables.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// `Client::connect_postgres(url)`: a client with default settings on the
/// PostgreSQL at `url`.
pub trait ClientExt: Sized {
    /// Connects to the PostgreSQL at `url` (`postgres://user:pass@host/db`
    /// or `host=... user=...`), with default settings; see
    /// [`PostgresBuilder::connect_postgres`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    fn connect_postgres(url: &str) -> impl Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    async fn connect_postgres(url: &str) -> Result<Self> {
        Client::builder().connect_postgres(url).await
    }
}

/// The PostgreSQL constructors on lockguard-core's [`Builder`]: each starts
/// a [`PostgresBuilder`] from the builder's settings.
pub trait BuilderExt {
    /// The PostgreSQL schema holding lockguard's tables and functions
    /// (default [`DEFAULT_SCHEMA`], `"lockguard"`): a lowercase identifier.
    /// Clients that share locks must use the same schema (and the same
    /// prefix).
    fn postgres_schema(self, schema: impl Into<String>) -> PostgresBuilder;

    /// What the client's locks' leases rest on (default
    /// [`LockLeases::Recorded`]); see [`PostgresBuilder::lock_leases`].
    fn postgres_lock_leases(self, leases: LockLeases) -> PostgresBuilder;

    /// See [`PostgresBuilder::connect_postgres`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    fn connect_postgres(self, url: &str) -> impl Future<Output = Result<Client>> + Send;

    /// See [`PostgresBuilder::connect_postgres_with`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    fn connect_postgres_with(
        self,
        config: tokio_postgres::Config,
    ) -> impl Future<Output = Result<Client>> + Send;

    /// See [`PostgresBuilder::connect_postgres_pool`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    fn connect_postgres_pool(
        self,
        pool: Pool,
        listen: tokio_postgres::Config,
    ) -> impl Future<Output = Result<Client>> + Send;

    /// See [`PostgresBuilder::connect_sqlx_pool`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    fn connect_sqlx_pool(
        self,
        pool: sqlx::PgPool,
        listen_url: &str,
    ) -> impl Future<Output = Result<Client>> + Send;
}

impl BuilderExt for Builder {
    fn postgres_schema(self, schema: impl Into<String>) -> PostgresBuilder {
        PostgresBuilder::new(self).postgres_schema(schema)
    }

    fn postgres_lock_leases(self, leases: LockLeases) -> PostgresBuilder {
        PostgresBuilder::new(self).lock_leases(leases)
    }

    fn connect_postgres(self, url: &str) -> impl Future<Output = Result<Client>> + Send {
        PostgresBuilder::new(self).connect_postgres(url)
    }

    fn connect_postgres_with(
        self,
        config: tokio_postgres::Config,
    ) -> impl Future<Output = Result<Client>> + Send {
        PostgresBuilder::new(self).connect_postgres_with(config)
    }

    fn connect_postgres_pool(
        self,
        pool: Pool,
        listen: tokio_postgres::Config,
    ) -> impl Future<Output = Result<Client>> + Send {
        PostgresBuilder::new(self).connect_postgres_pool(pool, listen)
    }

    #[cfg(feature = "sqlx")]
    fn connect_sqlx_pool(
        self,
        pool: sqlx::PgPool,
        listen_url: &str,
    ) -> impl Future<Output = Result<Client>> + Send {
        PostgresBuilder::new(self).connect_sqlx_pool(pool, listen_url)
    }
}

/// A client's settings ([`Builder`]) and the PostgreSQL store's own.
#[derive(Debug)]
pub struct PostgresBuilder {
    builder: Builder,
    schema: String,
    tls: TlsSettings,
    leases: LockLeases,
}

impl PostgresBuilder {
    /// The store's settings at their defaults, with the client's settings
    /// of `builder`.
    pub fn new(builder: Builder) -> Self {
        Self {
            builder,
            schema: DEFAULT_SCHEMA.to_owned(),
            tls: TlsSettings::default(),
            leases: LockLeases::default(),
        }
    }

    /// The PostgreSQL schema holding lockguard's tables and functions
    /// (default [`DEFAULT_SCHEMA`]): a lowercase identifier. Clients that
    /// share locks must use the same schema (and the same prefix).
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// What this client's locks' leases rest on (default
    /// [`LockLeases::Recorded`]): what the next holder does when a holder's
    /// session ends before its lease. See [`LockLeases`].
    ///
    /// ```no_run
    /// # async fn run() -> lockguard_core::Result<()> {
    /// use lockguard_postgres::{BuilderExt as _, LockLeases};
    ///
    /// let lg = lockguard_core::Client::builder()
    ///     .postgres_schema("lockguard")
    ///     .lock_leases(LockLeases::Session)
    ///     .connect_postgres("postgres://app:secret@db.internal/app")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_leases(mut self, leases: LockLeases) -> Self {
        self.leases = leases;
        self
    }

    /// Trusts the CA certificates in `pem` (PEM, one or more) for the
    /// server's certificate, instead of the system's roots.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.roots = Some(pem.into());
        self
    }

    /// Presents this certificate chain and key (PEM) to a server that
    /// authenticates its clients by certificate.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_client_certificate(
        mut self,
        chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((chain_pem.into(), key_pem.into()));
        self
    }

    /// Connects to the PostgreSQL at `url` (`postgres://user:pass@host/db`,
    /// or the `host=... user=...` form) with a pool of its own (up to 16
    /// connections) and two more, opened at the first wait, that ring for
    /// handoffs (the bell; see the [crate docs](crate#how-a-waiter-is-woken)). Creates lockguard's schema when it is missing
    /// (see [`migration_sql`](crate::migration_sql)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL or settings that
    /// cannot work, [`ErrorKind::Unavailable`] when the database cannot be
    /// reached within the connect timeout.
    pub async fn connect_postgres(self, url: &str) -> Result<Client> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "malformed postgres url {:?}",
                    lockguard_core::store::url::redacted(url)
                ),
            )
            .with_source(e)
        })?;
        self.connect_postgres_with(config).await
    }

    /// Connects with connection settings the application built, with a
    /// pool of lockguard's own; see [`PostgresBuilder::connect_postgres`].
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    pub async fn connect_postgres_with(self, mut config: tokio_postgres::Config) -> Result<Client> {
        let settings = self.builder.connection_settings();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        let manager = Connector::new(&self.tls, &config)?.manager(
            config.clone(),
            // A connection handed out is not tested first: that would be a
            // round trip more per operation. A broken one fails its
            // statement, and the pool drops it.
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.response_timeout))
            .create_timeout(Some(settings.connect_timeout))
            .build()
            .map_err(|e| {
                Error::new(ErrorKind::InvalidInput, "cannot build a postgres pool").with_source(e)
            })?;
        self.connect_postgres_pool(pool, config).await
    }

    /// Connects through a pool the application already has: every
    /// operation takes a connection from `pool` for one statement. `listen`
    /// holds the settings of the two connections lockguard opens itself, at
    /// the first wait, to be rung for handoffs (the bell, which waits in a
    /// statement for as long as the client lives, and the holder of the
    /// lock it waits on: pooled connections cannot).
    ///
    /// Give the pool [`RecyclingMethod::Fast`]: other methods run a query
    /// each time a connection is handed out, a round trip more per
    /// operation. Creates lockguard's schema when it is missing.
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    pub async fn connect_postgres_pool(
        self,
        pool: Pool,
        listen: tokio_postgres::Config,
    ) -> Result<Client> {
        self.connect_over(crate::pool::Pool::Deadpool(pool), listen)
            .await
    }

    /// Connects through the application's `sqlx` pool (sqlx 0.8): every
    /// operation takes a connection from `pool` for one statement, as the
    /// application's own queries do (sqlx prepares each statement once per
    /// connection). `listen_url` is the database's URL, for the two
    /// connections lockguard opens itself, at the first wait, to be rung
    /// for handoffs (the bell; the URL the pool was made from; sqlx does not hand out a
    /// pool's password). Creates lockguard's schema when it is missing.
    ///
    /// # Errors
    ///
    /// As [`PostgresBuilder::connect_postgres`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockguard_postgres::BuilderExt as _;
    ///
    /// let url = std::env::var("DATABASE_URL")?;
    /// let pool = sqlx::PgPool::connect(&url).await?; // the application's
    /// let lg = lockguard_core::Client::builder()
    ///     .postgres_schema("lockguard")
    ///     .connect_sqlx_pool(pool.clone(), &url)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn connect_sqlx_pool(self, pool: sqlx::PgPool, listen_url: &str) -> Result<Client> {
        let listen = tokio_postgres::Config::from_str(listen_url).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "malformed postgres url {:?}",
                    lockguard_core::store::url::redacted(listen_url)
                ),
            )
            .with_source(e)
        })?;
        self.connect_over(crate::pool::Pool::Sqlx(pool), listen)
            .await
    }

    async fn connect_over(
        self,
        pool: crate::pool::Pool,
        listen: tokio_postgres::Config,
    ) -> Result<Client> {
        // The client's settings first: a bad prefix is reported before any
        // connection is made.
        self.builder.validate()?;
        schema::validate_schema(&self.schema)?;
        let settings = self.builder.connection_settings();
        let opts = PgOptions {
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            sweep_interval: SWEEP_INTERVAL,
            leases: self.leases,
        };
        let connector = Connector::new(&self.tls, &listen)?;
        let store = store::connect(pool, listen, self.schema.clone(), opts, connector).await?;
        tracing::debug!(schema = %self.schema, "connected to postgres");
        self.builder.build(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn malformed_urls_and_schemas_are_invalid_input() {
        for url in [
            "postgres://u:secret@h:notaport/db",
            "host=a port=x password=secret",
        ] {
            let err = Client::connect_postgres(url).await.unwrap_err();
            assert!(err.is_invalid_input(), "{url:?}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let err = Client::builder()
            .postgres_schema("Bad-Name")
            .connect_postgres("postgres://u@127.0.0.1:1/db")
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
}
