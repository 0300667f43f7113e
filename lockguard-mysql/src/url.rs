//! The MySQL store's URL grammar: `mysql://`, and `mariadb://` read as
//! `mysql://`; lockguard's own `lock_leases` parameter (`recorded`, the
//! default, or `session`: see [`LockLeases`](crate::LockLeases)) is taken
//! out of what the driver reads.

use lockguard_core::check::Report;
use lockguard_core::{Builder, Client, Result};

/// A `mariadb://` URL is a `mysql://` one.
fn as_mysql(url: &str) -> String {
    match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
        _ => url.to_owned(),
    }
}

/// Connects `builder` to the MySQL or MariaDB server `url` names, as
/// [`MySqlBuilder::connect_mysql`](crate::MySqlBuilder::connect_mysql)
/// does; `mariadb://` is read as `mysql://`, and a `lock_leases`
/// parameter picks the locks' [`LockLeases`](crate::LockLeases)
/// (`mariadb://app@db/app?lock_leases=session`).
///
/// # Errors
///
/// What [`MySqlBuilder::connect_mysql`](crate::MySqlBuilder::connect_mysql)
/// returns.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    crate::MySqlBuilder::new(builder)
        .connect_mysql(&as_mysql(url))
        .await
}

/// Checks the MySQL or MariaDB deployment `url` names (see
/// [`check::check`](crate::check::check)); `mariadb://` is read as
/// `mysql://`.
///
/// # Errors
///
/// What [`check::check`](crate::check::check) returns.
pub async fn check_url(url: &str) -> Result<Report> {
    let (_, url) = lockguard_core::store::url::lock_leases(url)?;
    crate::check::check(&as_mysql(&url)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_is_read_as_mysql() {
        assert_eq!(as_mysql("MariaDB://u@h/d"), "mysql://u@h/d");
        assert_eq!(as_mysql("mysql://u@h/d"), "mysql://u@h/d");
    }
}
