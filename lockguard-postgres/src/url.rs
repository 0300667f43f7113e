//! The PostgreSQL store's URL grammar: `postgres://` and
//! `postgresql://`, read as libpq reads them (`sslmode` and the other
//! parameters included), and lockguard's own `lock_leases` parameter
//! (`recorded`, the default, or `session`: see [`LockLeases`]).

use lockguard_core::check::Report;
use lockguard_core::{Builder, Client, Error, ErrorKind, Result};

use crate::LockLeases;

/// The URL parameter that picks the locks' [`LockLeases`].
const LEASES_PARAMETER: &str = "lock_leases";

/// Connects `builder` to the PostgreSQL server `url` names, as
/// [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// does, with the [`LockLeases`] its `lock_leases` parameter names
/// (`postgres://app@db/app?lock_leases=session`), taken out of the URL
/// the driver reads.
///
/// # Errors
///
/// What [`BuilderExt::connect_postgres`](crate::BuilderExt::connect_postgres)
/// returns, and [`ErrorKind::InvalidInput`] for a `lock_leases` that is
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

/// The [`LockLeases`] `url`'s `lock_leases` parameter names (the default
/// without one), and `url` without it.
fn lock_leases(url: &str) -> Result<(LockLeases, String)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((LockLeases::default(), url.to_owned()));
    };
    let mut leases = LockLeases::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((LEASES_PARAMETER, value)) => {
                leases = match value {
                    "recorded" => LockLeases::Recorded,
                    "session" => LockLeases::Session,
                    other => {
                        return Err(Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "postgres url: {LEASES_PARAMETER}={other:?} is neither \"recorded\" nor \"session\""
                            ),
                        ));
                    }
                }
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((leases, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_leases_is_read_and_taken_out_of_the_url() {
        let url = "postgres://app@db/app";
        assert_eq!(
            lock_leases(url).unwrap(),
            (LockLeases::Recorded, url.to_owned())
        );
        assert_eq!(
            lock_leases("postgres://app@db/app?lock_leases=session").unwrap(),
            (LockLeases::Session, url.to_owned())
        );
        assert_eq!(
            lock_leases(
                "postgres://app@db/app?sslmode=disable&lock_leases=recorded&application_name=x"
            )
            .unwrap(),
            (
                LockLeases::Recorded,
                "postgres://app@db/app?sslmode=disable&application_name=x".to_owned()
            )
        );
        let err = lock_leases("postgres://app@db/app?lock_leases=sessions").unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        assert!(err.to_string().contains("\"sessions\""), "{err}");
    }
}
