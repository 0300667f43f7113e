//! The URL toolkit every store crate reads its URLs with: the hosts of a
//! multi-host URL, the message for a malformed one, and the URL with its
//! password masked for every message.
//!
//! Each store crate owns its URL grammar (which schemes, what the path
//! means, whether credentials are taken); these are the pieces the
//! grammars share, written once.
//!
//! # Examples
//!
//! ```
//! use lockguard_core::store::url::{hosts, redacted};
//!
//! let parts = hosts("redis+redlock://u:pw@a:6379,b:6379").unwrap();
//! assert_eq!(parts.scheme, "redis+redlock");
//! assert_eq!(parts.userinfo, Some("u:pw"));
//! assert_eq!(parts.hosts, ["a:6379", "b:6379"]);
//! assert_eq!(redacted("redis://u:pw@a:6379"), "redis://u:***@a:6379");
//! ```

use crate::error::{Error, Result};
use crate::store::LockLeases;

/// A URL taken apart: its scheme, and for the schemes that list several
/// hosts, the credentials, the hosts and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parts<'a> {
    /// The scheme, as written (`redis+cluster`).
    pub scheme: &'a str,
    /// What comes before the `@`, if anything (`user:password`).
    pub userinfo: Option<&'a str>,
    /// The hosts, each `host:port`, in the order written.
    pub hosts: Vec<&'a str>,
    /// The path after the hosts, with its leading `/` (`""`: none).
    pub path: &'a str,
}

/// The error for a malformed `url`: `what` is wrong with it. The URL is
/// quoted [`redacted`].
pub fn invalid(url: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{:?}: {what}", redacted(url)))
}

/// `url` with any password replaced by `***`, for messages and logs: the
/// one rule every store follows. The user stays, so the message still
/// says who connected; a connection string in `key=value` form loses its
/// `password=` value.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url
            .split_whitespace()
            .map(|part| match part.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => "password=***".to_owned(),
                _ => part.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" ");
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{hosts}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Takes a URL of several hosts apart: `scheme://[userinfo@]h1,h2,...[/path]`.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a URL
/// with parameters (`?...`, `#...`), a missing host, or a host that is
/// not `host:port` (see [`port_ok`]).
///
/// # Panics
///
/// If `url` has no `://`: the caller found its scheme first.
pub fn hosts(url: &str) -> Result<Parts<'_>> {
    let (scheme, rest) = url.split_once("://").expect("a scheme was found");
    if rest.contains(['?', '#']) {
        return Err(invalid(url, "parameters (`?...`) are not taken here"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, list) = match authority.rsplit_once('@') {
        Some((u, l)) => (Some(u), l),
        None => (None, authority),
    };
    let hosts: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(bad) = hosts.iter().find(|h| {
        h.is_empty()
            || h.contains(char::is_whitespace)
            || !h
                .rsplit_once(':')
                .is_some_and(|(host, port)| port_ok(host, port))
    }) {
        return Err(invalid(
            url,
            if bad.is_empty() {
                "a host is missing: list them as host:port,host:port".to_owned()
            } else {
                format!("host {bad:?} is not host:port")
            },
        ));
    }
    Ok(Parts {
        scheme,
        userinfo,
        hosts,
        path,
    })
}

/// Whether `host` and `port` make a host of a multi-host URL: a host is
/// named, and the port is a number from 1 to 65535.
pub fn port_ok(host: &str, port: &str) -> bool {
    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// The URL parameter that picks a database store's [`LockLeases`].
pub const LOCK_LEASES_PARAMETER: &str = "lock_leases";

/// The [`LockLeases`] `url`'s `lock_leases` parameter names (the default
/// without one), and `url` without that parameter, for the driver to read:
/// `postgres://app@db/app?sslmode=disable&lock_leases=session` is
/// [`LockLeases::Session`] and `postgres://app@db/app?sslmode=disable`.
///
/// # Examples
///
/// ```
/// use lockguard_core::store::LockLeases;
/// use lockguard_core::store::url::lock_leases;
///
/// let (leases, url) = lock_leases("mysql://app@db/app?lock_leases=session").unwrap();
/// assert_eq!((leases, url.as_str()), (LockLeases::Session, "mysql://app@db/app"));
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
/// value that is neither `recorded` nor `session`.
pub fn lock_leases(url: &str) -> Result<(LockLeases, String)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((LockLeases::default(), url.to_owned()));
    };
    let mut leases = LockLeases::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((LOCK_LEASES_PARAMETER, value)) => {
                leases = LockLeases::named(value).ok_or_else(|| {
                    invalid(
                        url,
                        format!(
                            "{LOCK_LEASES_PARAMETER}={value:?} is neither \"recorded\" nor \"session\""
                        ),
                    )
                })?;
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
    use crate::ErrorKind;

    #[test]
    fn hosts_are_taken_apart_and_bad_ones_named() {
        let p = hosts("redis+cluster://u:pw@a:7000,b:7001/x").unwrap();
        assert_eq!(p.userinfo, Some("u:pw"));
        assert_eq!(p.hosts, ["a:7000", "b:7001"]);
        assert_eq!(p.path, "/x");
        for (url, says) in [
            ("zk://a:1,,b:2", "a host is missing"),
            ("zk://a:1,b", "host \"b\" is not host:port"),
            ("zk://a:0", "host \"a:0\" is not host:port"),
            ("zk://:5", "host \":5\" is not host:port"),
            ("zk://a:1?x=1", "parameters"),
        ] {
            let e = hosts(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains(says), "{url}: {e}");
        }
    }

    #[test]
    fn passwords_are_kept_out_of_messages() {
        assert_eq!(
            redacted("redis+redlock://u:secret@a:1,b:2"),
            "redis+redlock://u:***@a:1,b:2"
        );
        assert_eq!(redacted("redis://a:1"), "redis://a:1");
        assert_eq!(redacted("redis://:pw@a:1/0"), "redis://:***@a:1/0");
        assert_eq!(redacted("redis://u@a:1"), "redis://u@a:1");
        assert_eq!(
            redacted("mysql://app:s@cret@db/app?x=a@b"),
            "mysql://app:***@db/app?x=a@b"
        );
        assert_eq!(
            redacted("host=db user=app password=secret dbname=x"),
            "host=db user=app password=*** dbname=x"
        );
    }

    #[test]
    fn ports_are_numbers_above_zero() {
        assert!(port_ok("a", "6379"));
        assert!(!port_ok("a", "0"));
        assert!(!port_ok("", "1"));
        assert!(!port_ok("a", "x"));
    }

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
        let err = lock_leases("mysql://app:pw@db/app?lock_leases=sessions").unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        assert!(err.to_string().contains("\"sessions\""), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }
}
