//! One URL picks the store: [`ClientExt::connect`] and
//! [`BuilderExt::connect`] read the scheme and connect through the store
//! crate that serves it; [`ClientExt::from_env`] reads `LOCKGUARD_URL`
//! (or `REDIS_URL`) and never falls back to a process-local store.
//!
//! | URL | store | feature |
//! |---|---|---|
//! | `memory://` | the in-memory store: locks hold within this process only | (always) |
//! | `redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS), `redis+unix:///path`, `unix:///path` | one Redis server | `redis` |
//! | `redis+cluster://[user:password@]host:port,host:port,...` (`rediss+cluster://` with TLS) | Redis Cluster, through its seed nodes | `cluster` |
//! | `redis+sentinel://host:port,host:port,.../SERVICE` (`rediss+sentinel://` with TLS) | the master the sentinels name for `SERVICE` | `sentinel` |
//! | `redis+redlock://[user:password@]host:port,host:port,host:port` (`rediss+redlock://` with TLS) | Redlock on independent masters | `redis` |
//! | `postgres://...`, `postgresql://...` (`sslmode` and the driver's other parameters) | PostgreSQL | `postgres` |
//! | `mysql://user:password@host:port/database`, `mariadb://...` | MySQL or MariaDB | `mysql` |
//! | `zookeeper://host:port,host:port,...[/root]`, `zk://...` | a ZooKeeper ensemble, locks under `/root` (default `/lockguard`) | `zookeeper` |
//! | `etcd://[user:password@]host:port,host:port,...[/prefix]`, `etcds://...` (TLS) | an etcd cluster, keys under `/prefix/` (default `/lockguard/`) | `etcd` |
//!
//! What a URL cannot say (certificates, an application's own connection,
//! Sentinel credentials) has the stores' typed constructors, in the
//! [`prelude`](crate::prelude).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

/// The environment variable [`ClientExt::from_env`] reads first.
pub const URL_VAR: &str = "LOCKGUARD_URL";

/// The variable read when [`URL_VAR`] is unset: a Redis URL, as earlier
/// releases read.
pub const REDIS_URL_VAR: &str = "REDIS_URL";

/// `Client::connect(url)`, `Client::from_env()` and
/// `Client::from_env_or_memory()`: the store chosen by the URL's scheme.
pub trait ClientExt: Sized {
    /// Connects to the store at `url`, with default settings; the scheme
    /// picks the store (the table in the [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL, naming the part that
    /// is wrong; [`ErrorKind::Unsupported`] for a store whose feature is
    /// off, naming the feature; and the store's own errors.
    fn connect(url: &str) -> impl Future<Output = Result<Self>> + Send;

    /// Connects to the store at `LOCKGUARD_URL`, or at `REDIS_URL` when that
    /// is unset.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Misconfigured`] when neither is set: a distributed lock
    /// never falls back to a process-local store by itself (ask for
    /// `memory://`, or call [`from_env_or_memory`](Self::from_env_or_memory)).
    /// Otherwise as [`connect`](Self::connect).
    fn from_env() -> impl Future<Output = Result<Self>> + Send;

    /// As [`from_env`](Self::from_env), but the in-memory store when neither
    /// variable is set, which it logs: for examples, tests and programs that
    /// run as one process.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect) when a URL is set.
    fn from_env_or_memory() -> impl Future<Output = Result<Self>> + Send;

    /// As [`connect`](Self::connect), for a service that may start before
    /// its store: while the store cannot be reached
    /// ([`ErrorKind::Unavailable`]), tries again with a backoff (100 ms,
    /// doubling to 5 s) until `wait` has passed since the call. The first
    /// failure is logged once as a warning naming the store (its password
    /// masked), and the connect that succeeds at `INFO`. Any other error (a
    /// malformed URL, credentials the store refuses, a feature that is off)
    /// is returned at once: waiting would not cure it.
    ///
    /// # Errors
    ///
    /// The last [`ErrorKind::Unavailable`] when `wait` ends first (its
    /// message says how long it waited); otherwise as
    /// [`connect`](Self::connect).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> lockguard::Result<()> {
    /// use std::time::Duration;
    /// use lockguard::{Client, prelude::*};
    ///
    /// // Starts even if Redis comes up a little after the service.
    /// let lg = Client::connect_within("redis://redis:6379", Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    fn connect_within(url: &str, wait: Duration) -> impl Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    fn connect_within(url: &str, wait: Duration) -> impl Future<Output = Result<Self>> + Send {
        BuilderExt::connect_within(Client::builder(), url, wait)
    }

    fn connect(url: &str) -> impl Future<Output = Result<Self>> + Send {
        BuilderExt::connect(Client::builder(), url)
    }

    fn from_env() -> impl Future<Output = Result<Self>> + Send {
        BuilderExt::from_env(Client::builder())
    }

    fn from_env_or_memory() -> impl Future<Output = Result<Self>> + Send {
        BuilderExt::from_env_or_memory(Client::builder())
    }
}

/// [`ClientExt`]'s constructors on a [`Builder`], with its settings (prefix,
/// leases, timeouts).
pub trait BuilderExt {
    /// As [`ClientExt::connect`], with this builder's settings.
    ///
    /// # Errors
    ///
    /// As [`ClientExt::connect`].
    fn connect(self, url: &str) -> impl Future<Output = Result<Client>> + Send;

    /// As [`ClientExt::from_env`], with this builder's settings.
    ///
    /// # Errors
    ///
    /// As [`ClientExt::from_env`].
    #[allow(clippy::wrong_self_convention)]
    fn from_env(self) -> impl Future<Output = Result<Client>> + Send;

    /// As [`ClientExt::from_env_or_memory`], with this builder's settings.
    ///
    /// # Errors
    ///
    /// As [`ClientExt::from_env_or_memory`].
    #[allow(clippy::wrong_self_convention)]
    fn from_env_or_memory(self) -> impl Future<Output = Result<Client>> + Send;

    /// As [`ClientExt::connect_within`], with this builder's settings.
    ///
    /// # Errors
    ///
    /// As [`ClientExt::connect_within`].
    fn connect_within(
        self,
        url: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Client>> + Send;
}

// Boxed: the futures of every store's constructor make a type too deep for
// the compiler to lay out inside a caller's own future.
impl BuilderExt for Builder {
    fn connect(self, url: &str) -> impl Future<Output = Result<Client>> + Send {
        let url = url.trim().to_owned();
        boxed(async move { connect_url(self, &url).await })
    }

    fn connect_within(
        self,
        url: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Client>> + Send {
        let url = url.trim().to_owned();
        boxed(async move { connect_patiently(self, &url, wait).await })
    }

    fn from_env(self) -> impl Future<Output = Result<Client>> + Send {
        boxed(async move {
            match env_url()? {
                Some((var, url)) => connect_from(self, var, &url).await,
                None => Err(Error::new(
                    ErrorKind::Misconfigured,
                    format!(
                        "{URL_VAR} is not set, nor {REDIS_URL_VAR}: set it to the store's URL \
                         ({}, or memory:// for locks that hold within this process only)",
                        crate::scheme::examples()
                    ),
                )),
            }
        })
    }

    fn from_env_or_memory(self) -> impl Future<Output = Result<Client>> + Send {
        boxed(async move {
            match env_url()? {
                Some((var, url)) => connect_from(self, var, &url).await,
                None => {
                    tracing::info!(
                        "{URL_VAR} is not set; using the in-memory store: locks and limits hold within this process only"
                    );
                    self.memory()
                }
            }
        })
    }
}

/// The first backoff between connects to a store that cannot be reached.
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest backoff between them.
const LAST_RETRY: Duration = Duration::from_secs(5);

/// Connects to `url`, trying again while the store cannot be reached,
/// until `wait` has passed.
async fn connect_patiently(builder: Builder, url: &str, wait: Duration) -> Result<Client> {
    let started = tokio::time::Instant::now();
    let deadline = started.checked_add(wait);
    let mut pause = FIRST_RETRY;
    let mut warned = false;
    loop {
        match connect_url(builder.clone(), url).await {
            Ok(client) => {
                if warned {
                    tracing::info!(
                        store = %lockguard_core::store::url::redacted(url),
                        waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "connected to the store"
                    );
                }
                return Ok(client);
            }
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                let now = tokio::time::Instant::now();
                if deadline.is_some_and(|d| now + pause > d) {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "{} (still, after waiting {:?} for the store to come up)",
                            e.message(),
                            started.elapsed()
                        ),
                    )
                    .with_source(e));
                }
                if !warned {
                    warned = true;
                    tracing::warn!(
                        store = %lockguard_core::store::url::redacted(url),
                        error = %e,
                        "the store cannot be reached yet; trying again for up to {wait:?}"
                    );
                } else {
                    tracing::debug!(error = %e, "the store still cannot be reached");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LAST_RETRY);
            }
            Err(e) => return Err(e),
        }
    }
}

fn boxed<'a>(
    f: impl Future<Output = Result<Client>> + Send + 'a,
) -> Pin<Box<dyn Future<Output = Result<Client>> + Send + 'a>> {
    Box::pin(f)
}

/// Connects to `url`, read from the variable `var`: an error says where
/// the URL came from.
async fn connect_from(builder: Builder, var: &str, url: &str) -> Result<Client> {
    connect_url(builder, url).await.map_err(|e| {
        if e.kind() == ErrorKind::InvalidInput {
            Error::new(ErrorKind::InvalidInput, format!("{var}: {e}"))
        } else {
            e
        }
    })
}

/// The first of `LOCKGUARD_URL` and `REDIS_URL` that is set and not empty,
/// with its name.
fn env_url() -> Result<Option<(&'static str, String)>> {
    for var in [URL_VAR, REDIS_URL_VAR] {
        match std::env::var(var) {
            Ok(url) if !url.trim().is_empty() => return Ok(Some((var, url.trim().to_owned()))),
            Ok(_) | Err(std::env::VarError::NotPresent) => {}
            Err(e @ std::env::VarError::NotUnicode(_)) => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{var} is not valid unicode"),
                )
                .with_source(e));
            }
        }
    }
    Ok(None)
}

/// Connects `builder` to the store `url` names (see [`crate::scheme`]).
async fn connect_url(builder: Builder, url: &str) -> Result<Client> {
    (crate::scheme::find(url)?.connect)(builder, url.to_owned()).await
}
