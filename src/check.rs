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
    (crate::scheme::find(url)?.check)(url.to_owned()).await
}
