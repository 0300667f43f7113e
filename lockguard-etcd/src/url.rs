//! The etcd store's URL grammar: `etcd://` (and `etcds://` for TLS), the
//! members as `host:port,host:port`, the key prefix as the path
//! (`etcd://a:2379,b:2379/app/locks`), and `user:password@` when the
//! cluster has authentication on.

use lockguard_core::check::Report;
use lockguard_core::store::url::{hosts, invalid};
use lockguard_core::{Builder, Client, Result};

use crate::EtcdBuilder;

/// A URL taken apart.
#[derive(Debug, PartialEq, Eq)]
struct Parts {
    endpoints: String,
    prefix: Option<String>,
    user: Option<(String, String)>,
    tls: bool,
}

fn parts(url: &str) -> Result<Parts> {
    let parts = hosts(url)?;
    let tls = parts.scheme.eq_ignore_ascii_case("etcds");
    let user = match parts.userinfo {
        None => None,
        Some(info) => match info.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                Some((user.to_owned(), password.to_owned()))
            }
            _ => return Err(invalid(url, "credentials must be user:password")),
        },
    };
    let prefix = match parts.path.trim_end_matches('/') {
        "" => None,
        path => Some(format!("{path}/")),
    };
    Ok(Parts {
        endpoints: parts.hosts.join(","),
        prefix,
        user,
        tls,
    })
}

/// Connects `builder` to the cluster `url` names, with the URL's prefix
/// (or [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX)) and credentials.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
/// for a malformed URL, or `etcds://` in a build without the `tls-rustls`
/// feature; otherwise what
/// [`EtcdBuilder::connect_etcd`](crate::EtcdBuilder::connect_etcd) returns.
pub async fn from_url(builder: Builder, url: &str) -> Result<Client> {
    let parts = parts(url)?;
    let mut etcd = EtcdBuilder::new(builder);
    if let Some(prefix) = parts.prefix {
        etcd = etcd.etcd_prefix(prefix);
    }
    if let Some((user, password)) = parts.user {
        etcd = etcd.etcd_user(user, password);
    }
    if parts.tls {
        #[cfg(feature = "tls-rustls")]
        {
            etcd = etcd.etcd_tls();
        }
        #[cfg(not(feature = "tls-rustls"))]
        return Err(invalid(
            url,
            "etcds:// needs lockguard-etcd's `tls-rustls` feature",
        ));
    }
    etcd.connect_etcd(&parts.endpoints).await
}

/// Checks the cluster `url` names (see [`check::cluster`](crate::check::cluster)).
///
/// # Errors
///
/// As [`from_url`], for the URL; otherwise what
/// [`check::cluster`](crate::check::cluster) returns.
pub async fn check_url(url: &str) -> Result<Report> {
    let parts = parts(url)?;
    crate::check::cluster(&parts.endpoints, parts.user).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockguard_core::ErrorKind;

    #[test]
    fn the_path_is_the_prefix_and_credentials_are_taken() {
        assert_eq!(
            parts("etcd://a:1,b:2").unwrap(),
            Parts {
                endpoints: "a:1,b:2".to_owned(),
                prefix: None,
                user: None,
                tls: false
            }
        );
        let p = parts("etcds://u:pw@a:1/app/locks/").unwrap();
        assert_eq!(p.prefix.as_deref(), Some("/app/locks/"));
        assert_eq!(p.user, Some(("u".to_owned(), "pw".to_owned())));
        assert!(p.tls);
        let e = parts("etcd://u@a:1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let e = parts("etcd://u:secret@a:notaport").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
