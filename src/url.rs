//! A store URL taken apart, as the facade's stores read theirs: the
//! hosts of a multi-host URL, the message for a malformed one, and the
//! URL with its password masked for every message.

use lockguard_core::{Error, Result};

/// A URL taken apart: its scheme, and for the schemes that list several
/// hosts, the credentials, the hosts and the path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parts<'a> {
    pub(crate) scheme: &'a str,
    pub(crate) userinfo: Option<&'a str>,
    pub(crate) hosts: Vec<&'a str>,
    pub(crate) path: &'a str,
}

/// The error for a malformed `url`: `what` is wrong with it.
pub(crate) fn invalid(url: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{:?}: {what}", redacted(url)))
}

/// `url` with any password replaced by `***`, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, tail)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Takes a URL of several hosts apart: `scheme://[userinfo@]h1,h2,...[/path]`.
pub(crate) fn hosts(url: &str) -> Result<Parts<'_>> {
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
        h.is_empty() || h.contains(char::is_whitespace) || !h.rsplit_once(':').is_some_and(port_ok)
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

fn port_ok((host, port): (&str, &str)) -> bool {
    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// The per-node URLs of a multi-host Redis URL: `redis://` or `rediss://`
/// (for the `rediss+` schemes), each with the credentials.
#[cfg(feature = "redis")]
pub(crate) fn node_urls(parts: &Parts<'_>) -> Vec<String> {
    let base = if parts.scheme.starts_with("rediss") {
        "rediss"
    } else {
        "redis"
    };
    let creds = parts.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    parts
        .hosts
        .iter()
        .map(|h| format!("{base}://{creds}{h}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockguard_core::ErrorKind;

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
    }
}
