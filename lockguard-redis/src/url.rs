//! The Redis stores' URL grammar: which store a `redis…://` URL names,
//! and how its hosts, credentials and path are read.
//!
//! | Scheme | Store |
//! |---|---|
//! | `redis://`, `rediss://`, `redis+unix://`, `unix://` | one server |
//! | `redis+cluster://`, `rediss+cluster://` | Redis Cluster (feature `cluster`) |
//! | `redis+sentinel://`, `rediss+sentinel://` | Redis Sentinel (feature `sentinel`), the service as the path |
//! | `redis+redlock://`, `rediss+redlock://` | Redlock over independent servers |
//!
//! The multi-host schemes list their hosts as `host:port,host:port`; each
//! node is reached as `redis://` (or `rediss://` for the `rediss+`
//! schemes) with the URL's credentials.

use lockguard_core::check::Report;
use lockguard_core::store::url::{Parts, hosts, invalid};
use lockguard_core::{Builder, Client, Result};

#[cfg(not(all(feature = "cluster", feature = "sentinel")))]
use lockguard_core::{Error, ErrorKind};

/// Which Redis store a URL names.
enum Family {
    Server,
    Cluster,
    Sentinel,
    Redlock,
}

fn family(url: &str) -> Result<Family> {
    let scheme = url
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default();
    Ok(match scheme.as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => Family::Server,
        "redis+cluster" | "rediss+cluster" => Family::Cluster,
        "redis+sentinel" | "rediss+sentinel" => Family::Sentinel,
        "redis+redlock" | "rediss+redlock" => Family::Redlock,
        _ => {
            return Err(invalid(
                url,
                "not a Redis URL: redis://, rediss://, redis+unix://, unix://, \
                 redis+cluster://, redis+sentinel:// or redis+redlock://",
            ));
        }
    })
}

/// Connects `builder` to the Redis store `url` names (see the [module
/// docs](self) for the schemes).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
/// for a malformed URL or one that names no Redis store;
/// [`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported) for
/// a Cluster or Sentinel URL when this crate was built without that
/// feature; otherwise what connecting to the store returns.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    use crate::BuilderExt as _;
    match family(url)? {
        Family::Server => builder.connect_redis(url).await,
        Family::Cluster => {
            let nodes = node_urls(&cluster(url)?);
            #[cfg(feature = "cluster")]
            return builder.connect_cluster(nodes).await;
            #[cfg(not(feature = "cluster"))]
            return Err(without(url, "cluster", &nodes));
        }
        Family::Sentinel => {
            #[cfg_attr(not(feature = "sentinel"), allow(unused_variables))]
            let (parts, service) = sentinel(url)?;
            let nodes = node_urls(&parts);
            #[cfg(feature = "sentinel")]
            return builder.connect_sentinel(nodes, service).await;
            #[cfg(not(feature = "sentinel"))]
            return Err(without(url, "sentinel", &nodes));
        }
        Family::Redlock => builder.redlock(node_urls(&redlock(url)?)).await,
    }
}

/// Checks the Redis deployment `url` names against what lockguard's
/// guarantees need (see [`check`](crate::check)).
///
/// # Errors
///
/// As [`from_url`], for the URL; otherwise what the check returns.
pub async fn check_url(url: &str) -> Result<Report> {
    match family(url)? {
        Family::Server => crate::check::server(url).await,
        Family::Cluster => {
            let nodes = node_urls(&cluster(url)?);
            #[cfg(feature = "cluster")]
            return crate::check::cluster(&nodes).await;
            #[cfg(not(feature = "cluster"))]
            return Err(without(url, "cluster", &nodes));
        }
        Family::Sentinel => {
            #[cfg_attr(not(feature = "sentinel"), allow(unused_variables))]
            let (parts, service) = sentinel(url)?;
            let nodes = node_urls(&parts);
            #[cfg(feature = "sentinel")]
            return crate::check::sentinel(&nodes, service).await;
            #[cfg(not(feature = "sentinel"))]
            return Err(without(url, "sentinel", &nodes));
        }
        Family::Redlock => crate::check::redlock(&node_urls(&redlock(url)?)).await,
    }
}

/// The error for a well-formed URL (read into `_nodes`) whose store this
/// crate was built without its `feature`.
#[cfg(not(all(feature = "cluster", feature = "sentinel")))]
fn without(url: &str, feature: &str, _nodes: &[String]) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{:?}: lockguard-redis was built without its `{feature}` feature",
            lockguard_core::store::url::redacted(url)
        ),
    )
}

/// The hosts of a cluster URL, which has no database.
fn cluster(url: &str) -> Result<Parts<'_>> {
    let parts = hosts(url)?;
    if !parts.path.is_empty() && parts.path != "/" {
        return Err(invalid(
            url,
            "a cluster has no database: nothing may follow the hosts",
        ));
    }
    Ok(parts)
}

/// The sentinels of a Sentinel URL and the service it names.
fn sentinel(url: &str) -> Result<(Parts<'_>, &str)> {
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

/// The nodes of a Redlock URL, after which nothing may follow.
fn redlock(url: &str) -> Result<Parts<'_>> {
    let parts = hosts(url)?;
    if !parts.path.is_empty() && parts.path != "/" {
        return Err(invalid(
            url,
            "nothing may follow the hosts of a Redlock URL",
        ));
    }
    Ok(parts)
}

/// The per-node URLs of a multi-host Redis URL: `redis://` or `rediss://`
/// (for the `rediss+` schemes), each with the credentials.
fn node_urls(parts: &Parts<'_>) -> Vec<String> {
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
    fn nodes_keep_the_credentials_and_the_tls() {
        let p = hosts("rediss+redlock://u:pw@a:1,b:2").unwrap();
        assert_eq!(node_urls(&p), ["rediss://u:pw@a:1", "rediss://u:pw@b:2"]);
        let p = hosts("redis+cluster://a:1").unwrap();
        assert_eq!(node_urls(&p), ["redis://a:1"]);
    }

    #[test]
    fn each_scheme_reads_its_path() {
        assert!(cluster("redis+cluster://a:1/").is_ok());
        let e = cluster("redis+cluster://a:1/0").unwrap_err();
        assert!(e.to_string().contains("a cluster has no database"), "{e}");
        let e = redlock("redis+redlock://a:1/0").unwrap_err();
        assert!(e.to_string().contains("nothing may follow"), "{e}");
        let (_, service) = sentinel("redis+sentinel://a:1,b:2/mymaster").unwrap();
        assert_eq!(service, "mymaster");
        for (url, says) in [
            ("redis+sentinel://a:1", "the service is missing"),
            ("redis+sentinel://a:1/x/y", "the service is missing"),
            ("redis+sentinel://u:pw@a:1/m", "credentials"),
        ] {
            let e = sentinel(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains(says), "{url}: {e}");
            assert!(!e.to_string().contains("pw"), "{e}");
        }
    }

    #[test]
    fn other_schemes_are_not_redis_urls() {
        for url in ["postgres://h/d", "memory://", "nope"] {
            let e = family(url).err().unwrap();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
        }
        assert!(matches!(family("REDIS+Cluster://a:1"), Ok(Family::Cluster)));
    }
}
