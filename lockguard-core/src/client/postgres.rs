//! The constructors of PostgreSQL clients.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::{Builder, Client};
use crate::backend::postgres::{self, PgOptions};
use crate::error::{Error, ErrorKind, Result};

/// The connections of the pool lockguard makes for itself.
const POOL_SIZE: usize = 16;

/// How often each client removes expired state from the tables.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Hides a password in a connection string before it reaches a message.
fn redact(url: &str) -> String {
    if url.contains("://") {
        return crate::backend::redis::redact(url);
    }
    // key=value form: drop the password's value.
    url.split_whitespace()
        .map(|part| match part.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => "password=***".to_owned(),
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Client {
    /// Connects to the PostgreSQL at `url` (`postgres://user:pass@host/db`
    /// or `host=... user=...`), with default settings; see
    /// [`Builder::connect_postgres`].
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_postgres`].
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn connect_postgres(url: &str) -> Result<Self> {
        Self::builder().connect_postgres(url).await
    }
}

impl Builder {
    /// The PostgreSQL schema holding lockguard's tables and functions
    /// (default `"lockguard"`): a lowercase identifier. Clients that share
    /// locks must use the same schema (and the same prefix).
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.postgres_schema = schema.into();
        self
    }

    /// Connects to the PostgreSQL at `url` (`postgres://user:pass@host/db`,
    /// or the `host=... user=...` form) with a pool of its own (up to 16
    /// connections) and one more connection, opened at the first wait, that
    /// listens for handoffs. Creates lockguard's schema when it is missing
    /// (see [`postgres::migration_sql`](crate::postgres::migration_sql)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL or settings that
    /// cannot work, [`ErrorKind::Unavailable`] when the database cannot be
    /// reached within the connect timeout.
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn connect_postgres(self, url: &str) -> Result<Client> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("malformed postgres url {:?}", redact(url)),
            )
            .with_source(e)
        })?;
        self.connect_postgres_with(config).await
    }

    /// Connects with connection settings the application built, with a
    /// pool of lockguard's own; see [`Builder::connect_postgres`].
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_postgres`].
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn connect_postgres_with(self, mut config: tokio_postgres::Config) -> Result<Client> {
        self.validate()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.opts.connect_timeout);
        }
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
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
            .wait_timeout(Some(self.opts.response_timeout))
            .create_timeout(Some(self.opts.connect_timeout))
            .build()
            .map_err(|e| {
                Error::new(ErrorKind::InvalidInput, "cannot build a postgres pool").with_source(e)
            })?;
        self.connect_postgres_pool(pool, config).await
    }

    /// Connects through a pool the application already has: every
    /// operation takes a connection from `pool` for one statement. `listen`
    /// holds the settings of the one connection lockguard opens itself, at
    /// the first wait, to listen for handoffs (a pooled connection cannot:
    /// the pool drops its notifications).
    ///
    /// Give the pool [`RecyclingMethod::Fast`]: other methods run a query
    /// each time a connection is handed out, a round trip more per
    /// operation. Creates lockguard's schema when it is missing.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_postgres`].
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn connect_postgres_pool(
        self,
        pool: Pool,
        listen: tokio_postgres::Config,
    ) -> Result<Client> {
        self.validate()?;
        postgres::validate_schema(&self.postgres_schema)?;
        let opts = PgOptions {
            connect_timeout: self.opts.connect_timeout,
            response_timeout: self.opts.response_timeout,
            sweep_interval: SWEEP_INTERVAL,
        };
        let store = postgres::connect(pool, listen, self.postgres_schema.clone(), opts).await?;
        tracing::debug!(schema = %self.postgres_schema, "connected to postgres");
        Ok(self.finish(store))
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
