//! The ZooKeeper store's URL grammar: `zookeeper://` and `zk://`, the
//! ensemble's hosts as `host:port,host:port` and the root as the path
//! (`zk://a:2181,b:2181/app/locks`). Credentials are refused.

use lockguard_core::check::Report;
use lockguard_core::store::url::{hosts, invalid};
use lockguard_core::{Builder, Client, Result};

/// The ensemble's hosts (`host:port,...`) and the root a URL names
/// (`None`: the default).
fn parts(url: &str) -> Result<(String, Option<String>)> {
    let parts = hosts(url)?;
    if parts.userinfo.is_some() {
        return Err(invalid(url, "a ZooKeeper URL takes no credentials"));
    }
    let root = match parts.path.trim_end_matches('/') {
        "" => None,
        root => Some(root.to_owned()),
    };
    Ok((parts.hosts.join(","), root))
}

/// Connects `builder` to the ensemble `url` names, under the URL's root
/// (or [`DEFAULT_ROOT`](crate::DEFAULT_ROOT)).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
/// for a malformed URL or one with credentials; otherwise what
/// [`BuilderExt::connect_zookeeper`](crate::BuilderExt::connect_zookeeper)
/// returns.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    use crate::BuilderExt as _;
    match parts(url)? {
        (hosts, None) => builder.connect_zookeeper(&hosts).await,
        (hosts, Some(root)) => builder.zookeeper_root(root).connect_zookeeper(&hosts).await,
    }
}

/// Checks the ensemble `url` names (see
/// [`check::ensemble`](crate::check::ensemble)); the root does not change
/// what is checked.
///
/// # Errors
///
/// As [`from_url`], for the URL; otherwise what
/// [`check::ensemble`](crate::check::ensemble) returns.
pub async fn check_url(url: &str) -> Result<Report> {
    let (hosts, _root) = parts(url)?;
    crate::check::ensemble(&hosts).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockguard_core::ErrorKind;

    #[test]
    fn the_path_is_the_root_and_credentials_are_refused() {
        assert_eq!(parts("zk://a:1,b:2").unwrap(), ("a:1,b:2".to_owned(), None));
        assert_eq!(
            parts("zk://a:1/app/locks/").unwrap(),
            ("a:1".to_owned(), Some("/app/locks".to_owned()))
        );
        let e = parts("zk://u:pw@a:1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("takes no credentials"), "{e}");
        assert!(!e.to_string().contains("pw"), "{e}");
    }
}
