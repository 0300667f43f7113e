//! The PostgreSQL store's URL grammar: `postgres://` and
//! `postgresql://`, read as libpq reads them (`sslmode` and the other
//! parameters included).

use lockguard_core::check::Report;
use lockguard_core::{Builder, Client, Result};

/// Connects `builder` to the PostgreSQL server `url` names, as
/// [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// does.
///
/// # Errors
///
/// What [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// returns.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    use crate::BuilderExt as _;
    builder.connect_postgres(url).await
}

/// Checks the PostgreSQL deployment `url` names (see
/// [`check::check`](crate::check::check)).
///
/// # Errors
///
/// What [`check::check`](crate::check::check) returns.
pub async fn check_url(url: &str) -> Result<Report> {
    crate::check::check(url).await
}
