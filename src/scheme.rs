//! The stores a URL can name: one table, [`SCHEMES`], that
//! [`connect`](mod@crate::connect) and [`check`](mod@crate::check) each
//! dispatch through with one lookup, and that every message listing the
//! schemes is written from. Adding a store is a line here: the store crate
//! owns its URL grammar (its `url::from_url` and `url::check_url`), and the
//! module below calls them behind the store's feature, or says the feature
//! is off.

use std::future::Future;
use std::pin::Pin;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

use lockguard_core::store::url::{invalid, redacted};

/// A boxed future of a store's answer.
pub(crate) type Answer<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// One store a URL can name.
pub(crate) struct Scheme {
    /// The URL schemes that name it, the first the one to write.
    pub(crate) names: &'static [&'static str],
    /// The store, as messages name it.
    pub(crate) store: &'static str,
    /// The facade's feature that serves it (`None`: always there).
    pub(crate) feature: Option<&'static str>,
    /// Connects a builder to the URL.
    pub(crate) connect: fn(Builder, String) -> Answer<Client>,
    /// Checks the deployment at the URL.
    pub(crate) check: fn(String) -> Answer<Report>,
}

/// Every store, in the order messages list them.
pub(crate) const SCHEMES: &[Scheme] = &[
    Scheme {
        names: &["memory"],
        store: "in-memory",
        feature: None,
        connect: memory::connect,
        check: memory::check,
    },
    Scheme {
        names: &["redis", "rediss", "redis+unix", "unix"],
        store: "Redis",
        feature: Some("redis"),
        connect: redis::connect,
        check: redis::check,
    },
    Scheme {
        names: &["redis+cluster", "rediss+cluster"],
        store: "Redis Cluster",
        feature: Some("cluster"),
        connect: cluster::connect,
        check: cluster::check,
    },
    Scheme {
        names: &["redis+sentinel", "rediss+sentinel"],
        store: "Redis Sentinel",
        feature: Some("sentinel"),
        connect: sentinel::connect,
        check: sentinel::check,
    },
    Scheme {
        names: &["redis+redlock", "rediss+redlock"],
        store: "Redlock",
        feature: Some("redis"),
        connect: redlock::connect,
        check: redlock::check,
    },
    Scheme {
        names: &["postgres", "postgresql"],
        store: "PostgreSQL",
        feature: Some("postgres"),
        connect: postgres::connect,
        check: postgres::check,
    },
    Scheme {
        names: &["mysql", "mariadb"],
        store: "MySQL",
        feature: Some("mysql"),
        connect: mysql::connect,
        check: mysql::check,
    },
    Scheme {
        names: &["zookeeper", "zk"],
        store: "ZooKeeper",
        feature: Some("zookeeper"),
        connect: zookeeper::connect,
        check: zookeeper::check,
    },
];

/// The store `url` names by its scheme.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a URL without a scheme or with one no
/// store has, listing the schemes.
pub(crate) fn find(url: &str) -> Result<&'static Scheme> {
    let Some((name, _)) = url.split_once("://").filter(|(s, _)| !s.is_empty()) else {
        return Err(invalid(
            url,
            format!("no scheme: a store URL starts with {}", every_scheme()),
        ));
    };
    let name = name.to_ascii_lowercase();
    SCHEMES
        .iter()
        .find(|s| s.names.contains(&name.as_str()))
        .ok_or_else(|| invalid(url, format!("unknown scheme {name:?}: {}", every_scheme())))
}

/// Every scheme, `memory://, redis://, ... or zk://`.
pub(crate) fn every_scheme() -> String {
    let all: Vec<String> = SCHEMES
        .iter()
        .flat_map(|s| s.names)
        .map(|n| format!("{n}://"))
        .collect();
    match all.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// One example URL of each network store, `redis://..., postgres://...`,
/// for a message that asks for one.
pub(crate) fn examples() -> String {
    SCHEMES
        .iter()
        .filter(|s| s.feature.is_some())
        .map(|s| format!("{}://...", s.names[0]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The error for a URL whose store's feature is off, naming the feature.
#[cfg_attr(
    all(
        feature = "redis",
        feature = "cluster",
        feature = "sentinel",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper"
    ),
    allow(dead_code)
)]
pub(crate) fn feature_off(url: &str) -> Error {
    let (store, feature) = find(url).map_or(("this", ""), |s| (s.store, s.feature.unwrap_or("")));
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{:?} is a {store} URL, and lockguard was built without its feature: \
             enable `features = [\"{feature}\"]`",
            redacted(url)
        ),
    )
}

fn boxed<T>(f: impl Future<Output = Result<T>> + Send + 'static) -> Answer<T> {
    Box::pin(f)
}

mod memory {
    use super::*;

    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            if url.len() > "memory://".len() {
                return Err(invalid(&url, "memory:// takes nothing after the scheme"));
            }
            builder.memory()
        })
    }

    pub(super) fn check(_url: String) -> Answer<Report> {
        boxed(async {
            Ok(Report::new(
                "memory",
                vec![Finding::new(
                    Verdict::Warn,
                    "store",
                    "memory://: locks and limits hold within one process only",
                    "mutual exclusion across processes",
                )],
            ))
        })
    }
}

/// One Redis server: `lockguard_redis::url`.
mod redis {
    use super::*;

    #[cfg(feature = "redis")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_redis::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "redis")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::url::check_url(&url).await })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move { Err(feature_off(&url)) })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { Err(feature_off(&url)) })
    }
}

/// Redis Cluster: `lockguard_redis::url`.
mod cluster {
    use super::*;

    #[cfg(feature = "cluster")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_redis::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "cluster")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::url::check_url(&url).await })
    }

    #[cfg(not(feature = "cluster"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "cluster"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }
}

/// Redis Sentinel: `lockguard_redis::url`.
mod sentinel {
    use super::*;

    #[cfg(feature = "sentinel")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_redis::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "sentinel")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::url::check_url(&url).await })
    }

    #[cfg(not(feature = "sentinel"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "sentinel"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }
}

/// Redlock: `lockguard_redis::url`.
mod redlock {
    use super::*;

    #[cfg(feature = "redis")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_redis::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "redis")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::url::check_url(&url).await })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }
}

/// PostgreSQL: `lockguard_postgres::url`.
mod postgres {
    use super::*;

    #[cfg(feature = "postgres")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_postgres::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "postgres")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_postgres::url::check_url(&url).await })
    }

    #[cfg(not(feature = "postgres"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move { Err(feature_off(&url)) })
    }

    #[cfg(not(feature = "postgres"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { Err(feature_off(&url)) })
    }
}

/// MySQL and MariaDB: `lockguard_mysql::url`.
mod mysql {
    use super::*;

    #[cfg(feature = "mysql")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_mysql::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "mysql")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_mysql::url::check_url(&url).await })
    }

    #[cfg(not(feature = "mysql"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move { Err(feature_off(&url)) })
    }

    #[cfg(not(feature = "mysql"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { Err(feature_off(&url)) })
    }
}

/// ZooKeeper: `lockguard_zookeeper::url`.
mod zookeeper {
    use super::*;

    #[cfg(feature = "zookeeper")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_zookeeper::url::from_url(builder, &url).await })
    }

    #[cfg(feature = "zookeeper")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_zookeeper::url::check_url(&url).await })
    }

    #[cfg(not(feature = "zookeeper"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "zookeeper"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            lockguard_core::store::url::hosts(&url)?;
            Err(feature_off(&url))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_names_one_store() {
        let mut seen = std::collections::HashSet::new();
        for s in SCHEMES {
            for n in s.names {
                assert!(seen.insert(*n), "{n} names two stores");
                assert_eq!(find(&format!("{n}://x")).unwrap().store, s.store);
            }
        }
        assert_eq!(find("MariaDB://u@h/d").unwrap().store, "MySQL");
    }

    #[test]
    fn messages_list_every_scheme() {
        let e = find("nope://x").err().unwrap();
        for s in SCHEMES {
            for n in s.names {
                assert!(e.to_string().contains(&format!("{n}://")), "{n}: {e}");
            }
        }
        assert!(
            find("nope")
                .err()
                .unwrap()
                .to_string()
                .contains("no scheme")
        );
        assert!(examples().contains("mysql://..."), "{}", examples());
    }
}
