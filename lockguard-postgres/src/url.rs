//! The PostgreSQL store's URL grammar: `postgres://` and
//! `postgresql://`, read as libpq reads them (`sslmode` and the other
//! parameters included), and lockguard's own `lock_leases` parameter
//! (`recorded`, the default, or `session`: see [`LockLeases`]).

use lockguard_core::check::Report;
use lockguard_core::store::url::lock_leases;
use lockguard_core::{Builder, Client, Result};

#[cfg(doc)]
use crate::LockLeases;

/// Connects `builder` to the PostgreSQL server `url` names, as
/// [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// does, with the [`LockLeases`] its `lock_leases` parameter names
/// (`postgres://app@db/app?lock_leases=session`), taken out of the URL
/// the driver reads.
///
/// # Errors
///
/// What [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// returns, and [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput) for a `lock_leases` that is
/// neither `recorded` nor `session`.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    use crate::BuilderExt as _;
    let (leases, url) = lock_leases(url)?;
    builder
        .postgres_lock_leases(leases)
        .connect_postgres(&url)
        .await
}

/// Checks the PostgreSQL deployment `url` names (see
/// [`check::check`](crate::check::check)).
///
/// # Errors
///
/// What [`check::check`](crate::check::check) returns.
pub async fn check_url(url: &str) -> Result<Report> {
    let (_, url) = lock_leases(url)?;
    crate::check::check(&url).await
}
