//! The deployment check: for the store behind a URL, what a lock's
//! guarantees depend on and whether this deployment provides it, as a
//! [`Report`] of OK / WARN / FAIL lines, each naming the guarantee it
//! affects. `lockguard check URL` prints it and exits non-zero on a FAIL, so
//! it fits in a deploy pipeline.
//!
//! Covered: one Redis server (version, `maxmemory-policy`, persistence,
//! replication), Redlock's nodes (each, and that they are independent
//! servers with clocks that agree), PostgreSQL (version, `fsync` and
//! `synchronous_commit`, standbys, lockguard's schema). Other stores'
//! URLs are `Unsupported` for now.
//!
//! ```no_run
//! # async fn run() -> lockguard::Result<()> {
//! let report = lockguard::check::deployment("redis://10.0.0.5:6379").await?;
//! println!("{report}");
//! assert!(report.passed(), "a guarantee does not hold on this deployment");
//! # Ok(()) }
//! ```

pub use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, ErrorKind, Result};

use crate::connect::scheme;

/// Checks the deployment at `url` (the URLs of
/// [`connect`](mod@crate::connect)).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL,
/// [`ErrorKind::Unavailable`] when a server cannot be reached,
/// [`ErrorKind::Unsupported`] for a store the check does not cover yet, or
/// whose feature is off.
pub async fn deployment(url: &str) -> Result<Report> {
    let url = url.trim();
    match scheme(url)?.as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => redis(url).await,
        "redis+redlock" | "rediss+redlock" => redlock(url).await,
        "postgres" | "postgresql" => postgres(url).await,
        "memory" => Ok(Report::new(
            "memory",
            vec![Finding::new(
                Verdict::Warn,
                "store",
                "memory://: locks and limits hold within one process only",
                "mutual exclusion across processes",
            )],
        )),
        other => Err(Error::new(
            ErrorKind::Unsupported,
            format!("the deployment check does not cover {other}:// yet"),
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
