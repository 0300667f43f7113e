//! `rediss://` against a real `redis-server` serving TLS, with certificates
//! made for the test by `openssl`: a private CA, the server's certificate,
//! and a client certificate for a server that authenticates clients.

use std::path::Path;
use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::{RedisServer, make_test_certificates};

/// A free loopback port for the TLS listener.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// A server that also serves TLS on a port of its own; `auth_clients`
/// makes it demand a client certificate. Returns it with the TLS url.
fn tls_server(certs: &Path, auth_clients: bool) -> (RedisServer, String) {
    let port = free_port().to_string();
    let file = |f: &str| certs.join(f).to_str().unwrap().to_owned();
    let (cert, key, ca) = (file("server.crt"), file("server.key"), file("ca.crt"));
    let server = RedisServer::start_with_args(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        if auth_clients { "yes" } else { "no" },
    ]);
    (server, format!("rediss://127.0.0.1:{port}"))
}

/// Locks work over TLS with a private CA, and a waiter on another TLS
/// client is woken by the handoff over its TLS pub/sub connection. Without
/// the CA, the server's certificate is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_wake_ups_work_over_tls_with_a_private_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let (_server, url) = tls_server(certs.path(), false);
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();
    let holder = Client::builder()
        .tls_root_certificate(ca.clone())
        .connect(&url)
        .await
        .expect("connect over TLS with the test CA");
    let waiter = Client::builder()
        .waiter_timeout(Duration::from_secs(30))
        .retry_interval(Duration::from_secs(20))
        .tls_root_certificate(ca)
        .connect(&url)
        .await
        .unwrap();
    lockguard_testing::faults::a_waiter_is_woken_by_the_handoff(&holder, waiter, "tls").await;
    // The certificates apply to connection settings the application
    // brings, too.
    let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
    let brought = Client::builder()
        .tls_root_certificate(std::fs::read(certs.path().join("ca.crt")).unwrap())
        .connect_with(info)
        .await
        .expect("connect with the application's settings and the test CA");
    let g = brought.lock("tls-brought").acquire().await.unwrap();
    assert!(g.release().await.unwrap());

    let untrusted = Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_redis(&url)
        .await
        .unwrap_err();
    assert!(untrusted.is_unavailable(), "{untrusted}");
    // Certificates for a plain url are a mistake, said at once.
    let plain = Client::builder()
        .tls_root_certificate(b"not used".to_vec())
        .connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(plain.is_invalid_input(), "{plain}");
}

/// A server that authenticates clients admits the one with a certificate
/// from its CA and refuses the one without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_when_the_server_asks() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let (_server, url) = tls_server(certs.path(), true);
    let read = |f: &str| std::fs::read(certs.path().join(f)).unwrap();
    let refused = Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .tls_root_certificate(read("ca.crt"))
        .connect(&url)
        .await;
    assert!(
        refused.as_ref().is_err_and(|e| e.is_unavailable()),
        "a client without a certificate got in: {refused:?}"
    );
    let lg = Client::builder()
        .tls_root_certificate(read("ca.crt"))
        .tls_client_certificate(read("client.crt"), read("client.key"))
        .connect(&url)
        .await
        .expect("connect with a client certificate");
    let g = lg.lock("mtls").acquire().await.unwrap();
    assert!(g.release().await.unwrap());
}

/// Sentinel over TLS (every server and sentinel serves TLS only on the
/// ports the client is given or the sentinels name, with a private CA):
/// the client reaches the sentinels and the master over TLS with the
/// builder's CA, a waiter is woken over its TLS pub/sub connection, and
/// after a failover the client reaches the new master over TLS too.
#[cfg(all(feature = "sentinel", feature = "tls-rustls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_reaches_the_sentinels_and_the_master_across_a_failover() {
    use lockguard_testing::{SENTINEL_SERVICE, SentinelGroup, conformance::eventually};

    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let group = SentinelGroup::start_tls(1, 3, certs.path());
    let urls = group.sentinel_urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();
    let connect = |patient: bool| {
        let b = Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_millis(500));
        let b = if patient {
            b.waiter_timeout(Duration::from_secs(30))
                .retry_interval(Duration::from_secs(20))
        } else {
            b
        };
        b.tls_root_certificate(ca.clone())
            .connect_sentinel(urls.clone(), SENTINEL_SERVICE)
    };
    let holder = connect(false).await.expect("connect through TLS sentinels");
    let waiter = connect(true).await.unwrap();
    lockguard_testing::faults::a_waiter_is_woken_by_the_handoff(&holder, waiter, "sentinel-tls")
        .await;

    // The sentinels name the new master's TLS port; the client follows.
    let first = group.master_port().expect("a master");
    let second = group.failover();
    assert_ne!(first, second);
    let moved = eventually(Duration::from_secs(15), || async {
        match holder.lock("sentinel-tls-after").try_acquire().await {
            Ok(g) => g.release().await.unwrap_or(false),
            Err(_) => false,
        }
    })
    .await;
    assert!(moved, "no lock on the new master over TLS");

    // Without the CA, the sentinels' certificate is refused.
    let untrusted = Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_sentinel(urls.clone(), SENTINEL_SERVICE)
        .await
        .unwrap_err();
    assert!(untrusted.is_unavailable(), "{untrusted}");
    // TLS to some sentinels and not to others is a mistake, said at once.
    let mixed = [
        urls[0].clone(),
        urls[1].replacen("rediss://", "redis://", 1),
    ];
    let mixed = Client::builder()
        .tls_root_certificate(ca.clone())
        .connect_sentinel(mixed, SENTINEL_SERVICE)
        .await
        .unwrap_err();
    assert!(mixed.is_invalid_input(), "{mixed}");
}

/// On the platform's TLS library, redis-rs takes no certificates for the
/// master a sentinel names: a private CA for Sentinel is refused at once,
/// naming the feature that takes it.
#[cfg(all(feature = "sentinel", not(feature = "tls-rustls")))]
#[tokio::test]
async fn sentinel_tls_certificates_without_rustls_are_refused() {
    let e = Client::builder()
        .tls_root_certificate(b"a CA".to_vec())
        .connect_sentinel(["rediss://127.0.0.1:1"], "mymaster")
        .await
        .unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("tls-rustls"),
        "{e}"
    );
}
