//! Redis clients from URLs and connection settings, and the reconnect
//! policy of their connections.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
#[cfg(feature = "cluster")]
use redis::io::tcp::TcpSettings;
use redis::{IntoConnectionInfo, RedisResult};

use crate::options::{RedisOptions, TlsSettings};
use lockguard_core::{Error, ErrorKind, Result};

/// Whether lockguard was built with a TLS feature.
const TLS: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

/// Reads a URL's connection settings; a `rediss://` URL without a TLS
/// feature is refused with the feature to turn on.
fn connection_info(url: &str) -> Result<redis::ConnectionInfo> {
    if !TLS && url.trim_start().to_ascii_lowercase().starts_with("rediss:") {
        return Err(Error::invalid(format!(
            "{:?} is a TLS url; build lockguard with the tls-rustls or tls-native-tls feature",
            lockguard_core::store::url::redacted(url)
        )));
    }
    url.into_connection_info().map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "malformed redis url {:?}",
                lockguard_core::store::url::redacted(url)
            ),
        )
        .with_source(e)
    })
}

/// Reads the addresses of the sentinels.
#[cfg(feature = "sentinel")]
pub(crate) fn sentinel_infos(urls: &[String]) -> Result<Vec<redis::ConnectionInfo>> {
    urls.iter().map(|u| connection_info(u)).collect()
}

/// Reads the seed nodes of a cluster.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_infos(urls: &[String]) -> Result<Vec<redis::ConnectionInfo>> {
    urls.iter().map(|u| connection_info(u)).collect()
}

/// Parses a Redis URL, with `TCP_NODELAY` on: small requests must not wait
/// for Nagle's algorithm. `tls` applies to a `rediss://` URL.
pub(crate) fn client_for(url: &str, tls: &TlsSettings) -> Result<redis::Client> {
    client_with(connection_info(url)?, tls)
}

/// A client for connection settings, with `TCP_NODELAY` on and, for a TLS
/// address, `tls`'s certificates.
pub(crate) fn client_with(info: redis::ConnectionInfo, tls: &TlsSettings) -> Result<redis::Client> {
    if !tls.is_set() {
        return client_from_info(info);
    }
    let addr = info.addr().to_string();
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    {
        if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(Error::invalid(format!(
                "TLS certificates were given, but {addr} is not a TLS (rediss://) address"
            )));
        }
        let with_certs = redis::Client::build_with_tls(info, tls.certificates()).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("unusable TLS certificates for {addr}"),
            )
            .with_source(e)
        })?;
        client_from_info(with_certs.get_connection_info().clone())
    }
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    {
        let _ = (info, addr);
        Err(Error::invalid(
            "TLS certificates need the tls-rustls or tls-native-tls feature",
        ))
    }
}

/// A client for connection settings the application built, with
/// `TCP_NODELAY` on and RESP3.
///
/// RESP3 because over it a connection hears of its own loss (a disconnect
/// push) while idle, and its manager reconnects at once: a client idle
/// through a server restart does not send its next request into the dead
/// connection (where it would fail, the server perhaps having run it).
pub(crate) fn client_from_info(info: redis::ConnectionInfo) -> Result<redis::Client> {
    let addr = info.addr().to_string();
    // The application's other TCP settings (keepalive, ...) are kept.
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let info = info.set_tcp_settings(tcp).set_redis_settings(settings);
    redis::Client::open(info).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("unusable redis connection settings for {addr}"),
        )
        .with_source(e)
    })
}

/// How long connecting to one node of a cluster may take: a third of the
/// client's connect timeout.
///
/// redis-rs connects a cluster in two steps, each waiting for its slowest
/// node: every seed node, then every node the slot map names. A node that
/// is down answers at once (the connection is refused), but one that is
/// paused or cut off by the network answers nothing, and each step waits
/// the node's timeout for it. With the whole connect timeout per node, a
/// client could not connect at all while one master hung (nor open its
/// pub/sub connection, so its waits relied on their refreshes): the two
/// steps took twice the time the connection was given. With a third, both
/// steps fit, and the connection comes up on the other nodes.
#[cfg(feature = "cluster")]
pub(crate) fn node_connect_timeout(connect_timeout: Duration) -> Duration {
    connect_timeout / 3
}

/// A cluster client over the given seed nodes, with the same response
/// timeout and `TCP_NODELAY` as single connections, and
/// [`node_connect_timeout`] per node.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_client_for(
    infos: &[redis::ConnectionInfo],
    opts: RedisOptions,
    tls: &TlsSettings,
) -> Result<redis::cluster::ClusterClient> {
    cluster_client_with(infos, opts, tls, std::convert::identity)
}

/// [`cluster_client_for`], its builder finished by `finish` (a
/// subscriber's push sender, say).
#[cfg(feature = "cluster")]
pub(crate) fn cluster_client_with(
    infos: &[redis::ConnectionInfo],
    opts: RedisOptions,
    tls: &TlsSettings,
    finish: impl FnOnce(redis::cluster::ClusterClientBuilder) -> redis::cluster::ClusterClientBuilder,
) -> Result<redis::cluster::ClusterClient> {
    if infos.is_empty() {
        return Err(Error::invalid(
            "a redis cluster needs at least one node url",
        ));
    }
    let infos = infos.to_vec();
    let b = redis::cluster::ClusterClientBuilder::new(infos)
        .connection_timeout(node_connect_timeout(opts.connect_timeout))
        .response_timeout(opts.response_timeout)
        // No automatic retries: a request re-sent after a dropped
        // connection may run twice (a second acquire finds our own lock, a
        // counter is added to twice). An unknown outcome is an error, and
        // the callers clean up after it.
        .retries(0)
        // RESP3, so a node's connection lost while idle is reconnected at
        // once (see `client_from_info`).
        .use_protocol(redis::ProtocolVersion::RESP3)
        .tcp_settings(TcpSettings::default().set_nodelay(true));
    #[cfg(feature = "tls-rustls")]
    let b = if tls.is_set() {
        b.certs(tls.certificates())
    } else {
        b
    };
    #[cfg(not(feature = "tls-rustls"))]
    if tls.is_set() {
        return Err(Error::invalid(
            "TLS certificates for a cluster need the tls-rustls feature",
        ));
    }
    finish(b).build().map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            "unusable redis cluster configuration",
        )
        .with_source(e)
    })
}

/// The reconnect policy shared by the command and subscriber connections:
/// explicit connect and response timeouts, and after a lost connection, a
/// few attempts with backoff (20 ms doubling up to 500 ms, with jitter).
///
/// The attempts are few because the manager's reconnecting task holds the
/// connection alive (a client dropped while its server is down would leave
/// a task retrying for ever), and because the first connection makes them
/// too (a server refusing the credentials must be reported within the
/// connect timeout). After they run out, the next request starts a new
/// round (see [`resent_if_unsent`]), and a subscriber has a keeper that
/// does.
pub(crate) fn manager_config(opts: RedisOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(opts.connect_timeout))
        .set_response_timeout(Some(opts.response_timeout))
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

/// [`manager_config`] for a connection whose every request is [`bounded`]:
/// without redis-rs's own response timeout, a second timer that would be
/// booked and cleared with every request for nothing.
pub(crate) fn command_config(opts: RedisOptions) -> ConnectionManagerConfig {
    manager_config(opts).set_response_timeout(None)
}

/// Sends a request with `send`, and once more if the first attempt failed
/// before it could reach the server.
///
/// Only a refused connection proves that: the connection manager had lost
/// its connection before the request (it hears of a loss at once over
/// RESP3) and could not make a new one, so nothing was sent; the failure
/// also made it start reconnecting, and the second attempt waits for that.
/// Any other failure (a connection lost after the request was written, a
/// timeout) leaves the outcome unknown: a script may have run, and running
/// it again could acquire twice or count twice, so it is reported instead.
pub(crate) async fn resent_if_unsent<T, F>(mut send: impl FnMut() -> F) -> RedisResult<T>
where
    F: Future<Output = RedisResult<T>>,
{
    match send().await {
        Err(e) if e.is_connection_refusal() => {
            tracing::debug!(error = %e, "redis connection was down; sending the request again");
            send().await
        }
        answer => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_urls_are_invalid_input() {
        for url in ["", "not a url", "http://localhost", "redis://:99999999"] {
            let err = client_for(url, &TlsSettings::default()).unwrap_err();
            assert!(err.is_invalid_input(), "{url:?}: {err}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            lockguard_core::store::url::redacted("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0"
        );
        let err = client_for("redis://u:secret@h:notaport", &TlsSettings::default()).unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
