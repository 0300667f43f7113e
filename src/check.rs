//! The deployment check: for the store behind a URL, what a lock's
//! guarantees depend on and whether this deployment provides it, as a
//! [`Report`] of OK / WARN / FAIL lines, each naming the guarantee it
//! affects. `lockguard check URL` prints it and exits non-zero on a FAIL, so
//! it fits in a deploy pipeline.
//!
//! Covered:
//! - one Redis server (version, `maxmemory-policy`, persistence,
//!   replication);
//! - Redlock's nodes (each, and that they are independent servers with
//!   clocks that agree);
//! - Redis Cluster (the cluster's state and slot coverage, each master's
//!   replicas, and each master as a server);
//! - Redis Sentinel (the sentinels' quorum and number, that they name one
//!   master, and that master as a server);
//! - PostgreSQL (version, `fsync` and `synchronous_commit`, standbys,
//!   lockguard's schema);
//! - MySQL and MariaDB (version, `innodb_flush_log_at_trx_commit` and
//!   `sync_binlog`, the server's replication role and replicas, lockguard's
//!   tables);
//! - ZooKeeper (the ensemble's voting members, the servers' versions, the
//!   session timeout the ensemble grants: a crashed holder's lease).
//!
//! ```no_run
//! # async fn run() -> lockguard::Result<()> {
//! let report = lockguard::check::deployment("redis://10.0.0.5:6379").await?;
//! println!("{report}");
//! assert!(report.passed(), "a guarantee does not hold on this deployment");
//! # Ok(()) }
//! ```

use lockguard_core::Result;
pub use lockguard_core::check::{Finding, Report, Verdict};

use crate::connect::scheme;

/// Checks the deployment at `url` (the URLs of
/// [`connect`](mod@crate::connect)).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
/// malformed URL or an unknown scheme,
/// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when a server
/// cannot be reached,
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) for a store
/// whose feature is off.
pub async fn deployment(url: &str) -> Result<Report> {
    let url = url.trim();
    match scheme(url)?.as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => redis(url).await,
        "redis+redlock" | "rediss+redlock" => redlock(url).await,
        "redis+cluster" | "rediss+cluster" => cluster(url).await,
        "redis+sentinel" | "rediss+sentinel" => sentinel(url).await,
        "postgres" | "postgresql" => postgres(url).await,
        "mysql" | "mariadb" => mysql(url).await,
        "zookeeper" | "zk" => zookeeper(url).await,
        "memory" => Ok(Report::new(
            "memory",
            vec![Finding::new(
                Verdict::Warn,
                "store",
                "memory://: locks and limits hold within one process only",
                "mutual exclusion across processes",
            )],
        )),
        other => Err(crate::connect::invalid(
            url,
            format!("unknown scheme {other:?}: the check takes the URLs of lockguard::connect"),
        )),
    }
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<Report> {
    lockguard_redis::check::server(url).await
}

#[cfg(not(feature = "redis"))]
async fn redis(url: &str) -> Result<Report> {
    Err(crate::connect::feature_off(url, "Redis", "redis"))
}

#[cfg(feature = "redis")]
async fn redlock(url: &str) -> Result<Report> {
    use crate::connect::{hosts, invalid};
    let parts = hosts(url)?;
    if !parts.path.is_empty() && parts.path != "/" {
        return Err(invalid(
            url,
            "nothing may follow the hosts of a Redlock URL",
        ));
    }
    lockguard_redis::check::redlock(&crate::connect::node_urls(&parts)).await
}

#[cfg(not(feature = "redis"))]
async fn redlock(url: &str) -> Result<Report> {
    Err(crate::connect::feature_off(url, "Redlock", "redis"))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<Report> {
    lockguard_postgres::check::check(url).await
}

#[cfg(not(feature = "postgres"))]
async fn postgres(url: &str) -> Result<Report> {
    Err(crate::connect::feature_off(url, "PostgreSQL", "postgres"))
}

#[cfg(feature = "cluster")]
async fn cluster(url: &str) -> Result<Report> {
    use crate::connect::{hosts, invalid};
    let parts = hosts(url)?;
    if !parts.path.is_empty() && parts.path != "/" {
        return Err(invalid(
            url,
            "a cluster has no database: nothing may follow the hosts",
        ));
    }
    lockguard_redis::check::cluster(&crate::connect::node_urls(&parts)).await
}

#[cfg(not(feature = "cluster"))]
async fn cluster(url: &str) -> Result<Report> {
    crate::connect::hosts(url)?;
    Err(crate::connect::feature_off(url, "Redis Cluster", "cluster"))
}

#[cfg(feature = "sentinel")]
async fn sentinel(url: &str) -> Result<Report> {
    use crate::connect::{hosts, invalid};
    let parts = hosts(url)?;
    if authority(url).contains('@') {
        return Err(invalid(
            url,
            "credentials in a Sentinel URL are not taken (the sentinels' and the master's \
             differ)",
        ));
    }
    let service = parts.path.trim_start_matches('/');
    if service.is_empty() || service.contains('/') {
        return Err(invalid(
            url,
            "the service is missing: redis+sentinel://host:port,.../SERVICE",
        ));
    }
    lockguard_redis::check::sentinel(&crate::connect::node_urls(&parts), service).await
}

#[cfg(not(feature = "sentinel"))]
async fn sentinel(url: &str) -> Result<Report> {
    crate::connect::hosts(url)?;
    Err(crate::connect::feature_off(
        url,
        "Redis Sentinel",
        "sentinel",
    ))
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<Report> {
    let url = match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
        _ => url.to_owned(),
    };
    lockguard_mysql::check::check(&url).await
}

#[cfg(not(feature = "mysql"))]
async fn mysql(url: &str) -> Result<Report> {
    Err(crate::connect::feature_off(url, "MySQL", "mysql"))
}

#[cfg(feature = "zookeeper")]
async fn zookeeper(url: &str) -> Result<Report> {
    use crate::connect::{hosts, invalid};
    // Taken apart (and checked) as connect takes it; the path (a root) does
    // not change what is checked.
    hosts(url)?;
    let list = authority(url);
    if list.contains('@') {
        return Err(invalid(url, "a ZooKeeper URL takes no credentials"));
    }
    let list: Vec<&str> = list.split(',').map(str::trim).collect();
    lockguard_zookeeper::check::ensemble(&list.join(",")).await
}

#[cfg(not(feature = "zookeeper"))]
async fn zookeeper(url: &str) -> Result<Report> {
    crate::connect::hosts(url)?;
    Err(crate::connect::feature_off(url, "ZooKeeper", "zookeeper"))
}

/// The part of a URL between `://` and the path: `[userinfo@]hosts`.
#[cfg(any(feature = "sentinel", feature = "zookeeper"))]
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}
