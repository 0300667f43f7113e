//! The stores a URL can name: one table, [`SCHEMES`], that
//! [`connect`](mod@crate::connect) and [`check`](mod@crate::check) each
//! dispatch through with one lookup, and that every message listing the
//! schemes is written from. Adding a store is a line here (and the store's
//! two functions below, behind its feature).

use std::future::Future;
use std::pin::Pin;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

use crate::url::{invalid, redacted};

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

mod redis {
    use super::*;

    #[cfg(feature = "redis")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_redis::BuilderExt as _;
        boxed(async move { builder.connect_redis(&url).await })
    }

    #[cfg(feature = "redis")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::check::server(&url).await })
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

mod cluster {
    use super::*;
    #[cfg(feature = "cluster")]
    use crate::url::node_urls;
    use crate::url::{Parts, hosts};

    /// The hosts of a cluster URL, which has no database.
    fn parts(url: &str) -> Result<Parts<'_>> {
        let parts = hosts(url)?;
        if !parts.path.is_empty() && parts.path != "/" {
            return Err(invalid(
                url,
                "a cluster has no database: nothing may follow the hosts",
            ));
        }
        Ok(parts)
    }

    #[cfg(feature = "cluster")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_redis::BuilderExt as _;
        boxed(async move {
            let nodes = node_urls(&parts(&url)?);
            builder.connect_cluster(nodes).await
        })
    }

    #[cfg(feature = "cluster")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::check::cluster(&node_urls(&parts(&url)?)).await })
    }

    #[cfg(not(feature = "cluster"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            parts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "cluster"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            parts(&url)?;
            Err(feature_off(&url))
        })
    }
}

mod sentinel {
    use super::*;
    #[cfg(feature = "sentinel")]
    use crate::url::node_urls;
    use crate::url::{Parts, hosts};

    /// The sentinels of a Sentinel URL and the service it names.
    fn parts(url: &str) -> Result<(Parts<'_>, &str)> {
        let parts = hosts(url)?;
        if parts.userinfo.is_some() {
            return Err(invalid(
                url,
                "credentials in a Sentinel URL are not taken (the sentinels' and the master's \
                 differ): use Builder::connect_sentinel_with",
            ));
        }
        let service = parts.path.trim_start_matches('/');
        if service.is_empty() || service.contains('/') {
            return Err(invalid(
                url,
                "the service is missing: redis+sentinel://host:port,.../SERVICE",
            ));
        }
        Ok((parts, service))
    }

    #[cfg(feature = "sentinel")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_redis::BuilderExt as _;
        boxed(async move {
            let (parts, service) = parts(&url)?;
            builder.connect_sentinel(node_urls(&parts), service).await
        })
    }

    #[cfg(feature = "sentinel")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            let (parts, service) = parts(&url)?;
            lockguard_redis::check::sentinel(&node_urls(&parts), service).await
        })
    }

    #[cfg(not(feature = "sentinel"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            parts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "sentinel"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            parts(&url)?;
            Err(feature_off(&url))
        })
    }
}

mod redlock {
    use super::*;
    #[cfg(feature = "redis")]
    use crate::url::node_urls;
    use crate::url::{Parts, hosts};

    /// The nodes of a Redlock URL, after which nothing may follow.
    fn parts(url: &str) -> Result<Parts<'_>> {
        let parts = hosts(url)?;
        if !parts.path.is_empty() && parts.path != "/" {
            return Err(invalid(
                url,
                "nothing may follow the hosts of a Redlock URL",
            ));
        }
        Ok(parts)
    }

    #[cfg(feature = "redis")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_redis::BuilderExt as _;
        boxed(async move { builder.redlock(node_urls(&parts(&url)?)).await })
    }

    #[cfg(feature = "redis")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_redis::check::redlock(&node_urls(&parts(&url)?)).await })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            parts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "redis"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            parts(&url)?;
            Err(feature_off(&url))
        })
    }
}

mod postgres {
    use super::*;

    #[cfg(feature = "postgres")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_postgres::BuilderExt as _;
        boxed(async move { builder.connect_postgres(&url).await })
    }

    #[cfg(feature = "postgres")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_postgres::check::check(&url).await })
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

mod mysql {
    use super::*;

    /// A `mariadb://` URL is a `mysql://` one.
    #[cfg(feature = "mysql")]
    fn as_mysql(url: &str) -> String {
        match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
            _ => url.to_owned(),
        }
    }

    #[cfg(feature = "mysql")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        boxed(async move { lockguard_mysql::connect_with(builder, &as_mysql(&url)).await })
    }

    #[cfg(feature = "mysql")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move { lockguard_mysql::check::check(&as_mysql(&url)).await })
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

mod zookeeper {
    use super::*;
    use crate::url::hosts;

    /// The ensemble's hosts (`host:port,...`) and the root a URL names
    /// (`None`: the default).
    fn parts(url: &str) -> Result<(String, Option<String>)> {
        let parts = hosts(url)?;
        if parts.userinfo.is_some() {
            return Err(invalid(url, "a ZooKeeper URL takes no credentials"));
        }
        let root = match parts.path.trim_end_matches('/') {
            "" => None,
            root => Some(root.to_owned()),
        };
        Ok((parts.hosts.join(","), root))
    }

    #[cfg(feature = "zookeeper")]
    pub(super) fn connect(builder: Builder, url: String) -> Answer<Client> {
        use lockguard_zookeeper::BuilderExt as _;
        boxed(async move {
            match parts(&url)? {
                (hosts, None) => builder.connect_zookeeper(&hosts).await,
                (hosts, Some(root)) => builder.zookeeper_root(root).connect_zookeeper(&hosts).await,
            }
        })
    }

    /// The root does not change what is checked.
    #[cfg(feature = "zookeeper")]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            let (hosts, _root) = parts(&url)?;
            lockguard_zookeeper::check::ensemble(&hosts).await
        })
    }

    #[cfg(not(feature = "zookeeper"))]
    pub(super) fn connect(_: Builder, url: String) -> Answer<Client> {
        boxed(async move {
            // A malformed URL says so first.
            parts(&url)?;
            Err(feature_off(&url))
        })
    }

    #[cfg(not(feature = "zookeeper"))]
    pub(super) fn check(url: String) -> Answer<Report> {
        boxed(async move {
            parts(&url)?;
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
