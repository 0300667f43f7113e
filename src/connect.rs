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
//!
//! What a URL cannot say (certificates, an application's own connection,
//! Sentinel credentials) has the stores' typed constructors, in the
//! [`prelude`](crate::prelude).

use std::future::Future;
use std::pin::Pin;

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
}

impl ClientExt for Client {
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
}

// Boxed: the futures of every store's constructor make a type too deep for
// the compiler to lay out inside a caller's own future.
impl BuilderExt for Builder {
    fn connect(self, url: &str) -> impl Future<Output = Result<Client>> + Send {
        let url = url.trim().to_owned();
        boxed(async move { connect_url(self, &url).await })
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

/// A URL taken apart: its scheme, and for the schemes that list several
/// hosts, the credentials, the hosts and the path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parts<'a> {
    pub(crate) scheme: &'a str,
    pub(crate) userinfo: Option<&'a str>,
    pub(crate) hosts: Vec<&'a str>,
    pub(crate) path: &'a str,
}

pub(crate) fn invalid(url: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{:?}: {what}", redacted(url)))
}

/// `url` with any password replaced by `***`, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, tail)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Takes a URL of several hosts apart: `scheme://[userinfo@]h1,h2,...[/path]`.
pub(crate) fn hosts(url: &str) -> Result<Parts<'_>> {
    let (scheme, rest) = url.split_once("://").expect("a scheme was found");
    if rest.contains(['?', '#']) {
        return Err(invalid(url, "parameters (`?...`) are not taken here"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, list) = match authority.rsplit_once('@') {
        Some((u, l)) => (Some(u), l),
        None => (None, authority),
    };
    let hosts: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(bad) = hosts.iter().find(|h| {
        h.is_empty() || h.contains(char::is_whitespace) || !h.rsplit_once(':').is_some_and(port_ok)
    }) {
        return Err(invalid(
            url,
            if bad.is_empty() {
                "a host is missing: list them as host:port,host:port".to_owned()
            } else {
                format!("host {bad:?} is not host:port")
            },
        ));
    }
    Ok(Parts {
        scheme,
        userinfo,
        hosts,
        path,
    })
}

fn port_ok((host, port): (&str, &str)) -> bool {
    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// Connects `builder` to the store `url` names (see [`crate::scheme`]).
async fn connect_url(builder: Builder, url: &str) -> Result<Client> {
    (crate::scheme::find(url)?.connect)(builder, url.to_owned()).await
}

/// The per-node URLs of a multi-host Redis URL: `redis://` or `rediss://`
/// (for the `rediss+` schemes), each with the credentials.
#[cfg(feature = "redis")]
pub(crate) fn node_urls(parts: &Parts<'_>) -> Vec<String> {
    let base = if parts.scheme.starts_with("rediss") {
        "rediss"
    } else {
        "redis"
    };
    let creds = parts.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    parts
        .hosts
        .iter()
        .map(|h| format!("{base}://{creds}{h}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_taken_apart_and_bad_ones_named() {
        let p = hosts("redis+cluster://u:pw@a:7000,b:7001/x").unwrap();
        assert_eq!(p.userinfo, Some("u:pw"));
        assert_eq!(p.hosts, ["a:7000", "b:7001"]);
        assert_eq!(p.path, "/x");
        for (url, says) in [
            ("zk://a:1,,b:2", "a host is missing"),
            ("zk://a:1,b", "host \"b\" is not host:port"),
            ("zk://a:0", "host \"a:0\" is not host:port"),
            ("zk://:5", "host \":5\" is not host:port"),
            ("zk://a:1?x=1", "parameters"),
        ] {
            let e = hosts(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains(says), "{url}: {e}");
        }
    }

    #[test]
    fn passwords_are_kept_out_of_messages() {
        assert_eq!(
            redacted("redis+redlock://u:secret@a:1,b:2"),
            "redis+redlock://u:***@a:1,b:2"
        );
        assert_eq!(redacted("redis://a:1"), "redis://a:1");
    }
}
