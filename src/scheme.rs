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
    Scheme {
        names: &["etcd", "etcds"],
        store: "etcd",
        feature: Some("etcd"),
        connect: etcd::connect,
        check: etcd::check,
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

/// The error for a URL whose store's feature is off, naming the feature
/// (unused in a build with every store's feature).
#[allow(dead_code)]
fn feature_off(url: &str) -> Error {
    let (store, feature) = find(url).map_or(("this", ""), |s| (s.store, s.feature.unwrap_or("")));
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{:?} is a {store} URL, and lockguard was built without its feature: \
             enable `features = [\"{feature}\"]` (the `lockguard` tool: \
             `cargo install lockguard --features full` has every store)",
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

/// A network store's two functions, in a module `$name`: its crate's
/// `url::from_url` and `url::check_url` behind `$feature`; with the feature
/// off, the error that says so (after the host list of a multi-host URL is
/// checked, when `$hosts`, so a malformed URL says so first).
macro_rules! store {
    ($(#[$doc:meta])* $name:ident, $feature:literal, $krate:ident, hosts: $hosts:literal) => {
        $(#[$doc])*
        mod $name {
            use super::*;

            #[cfg(feature = $feature)]
            pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
                boxed(async move { $krate::url::from_url(builder, &url).await })
            }

            #[cfg(feature = $feature)]
            pub(super) fn check(url: String) -> Answer<Report> {
                boxed(async move { $krate::url::check_url(&url).await })
            }

            #[cfg(not(feature = $feature))]
            pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
                boxed(async move { Err(off(&url, $hosts)) })
            }

            #[cfg(not(feature = $feature))]
            pub(super) fn check(url: String) -> Answer<Report> {
                boxed(async move { Err(off(&url, $hosts)) })
            }
        }
    };
}

/// The error for `url` when its store's feature is off: the host list's
/// error first when `hosts` (a multi-host URL), else [`feature_off`].
#[cfg_attr(
    all(
        feature = "redis",
        feature = "cluster",
        feature = "sentinel",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        feature = "etcd"
    ),
    allow(dead_code)
)]
fn off(url: &str, hosts: bool) -> Error {
    match hosts.then(|| lockguard_core::store::url::hosts(url)) {
        Some(Err(e)) => e,
        _ => feature_off(url),
    }
}

store!(
    /// One Redis server: `lockguard_redis::url`.
    redis, "redis", lockguard_redis, hosts: false
);
store!(
    /// Redis Cluster: `lockguard_redis::url`.
    cluster, "cluster", lockguard_redis, hosts: true
);
store!(
    /// Redis Sentinel: `lockguard_redis::url`.
    sentinel, "sentinel", lockguard_redis, hosts: true
);
store!(
    /// Redlock: `lockguard_redis::url`.
    redlock, "redis", lockguard_redis, hosts: true
);
store!(
    /// PostgreSQL: `lockguard_postgres::url`.
    postgres, "postgres", lockguard_postgres, hosts: false
);
store!(
    /// MySQL and MariaDB: `lockguard_mysql::url`.
    mysql, "mysql", lockguard_mysql, hosts: false
);
store!(
    /// ZooKeeper: `lockguard_zookeeper::url`.
    zookeeper, "zookeeper", lockguard_zookeeper, hosts: true
);
store!(
    /// etcd: `lockguard_etcd::url`.
    etcd, "etcd", lockguard_etcd, hosts: true
);

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
