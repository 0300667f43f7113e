//! TLS to a member whose certificate a private CA signed: trusting that
//! CA connects and takes locks; the web's roots alone are refused; and a
//! member that authenticates clients by certificate takes a client that
//! shows one, and refuses one that does not.

use std::time::Duration;

use lockguard_core::{Client, ErrorKind};
use lockguard_etcd::EtcdBuilder;
use lockguard_etcd::testing::EtcdServer;
use lockguard_testing::make_test_certificates;

/// The test's certificates, in a directory of its own.
fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    make_test_certificates(dir.path());
    dir
}

fn read(dir: &tempfile::TempDir, name: &str) -> Vec<u8> {
    std::fs::read(dir.path().join(name)).unwrap()
}

/// A builder that gives up on a refused handshake quickly.
fn builder() -> EtcdBuilder {
    EtcdBuilder::new(Client::builder().connect_timeout(Duration::from_secs(3)))
}

/// Takes a lock and counts through `lg`: the connection works.
async fn works(lg: &Client) {
    let guard = lg.lock("tls").acquire().await.unwrap();
    assert_eq!(lg.counter("tls:n").incr_by(3).await.unwrap(), 3);
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_trusting_the_private_ca_takes_locks() {
    let certs = certificates();
    let server = EtcdServer::start_tls(certs.path(), false);
    let endpoint = server.tls_endpoint().unwrap();
    let lg = builder()
        .etcd_tls_root_certificate(read(&certs, "ca.crt"))
        .connect_etcd(&endpoint)
        .await
        .expect("connect over TLS, trusting the test CA");
    works(&lg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_with_the_web_roots_alone_is_refused() {
    let certs = certificates();
    let server = EtcdServer::start_tls(certs.path(), false);
    let url = format!("etcds://{}", server.tls_endpoint().unwrap());
    let started = std::time::Instant::now();
    let e = lockguard_etcd::url::from_url(
        Client::builder().connect_timeout(Duration::from_secs(3)),
        &url,
    )
    .await
    .expect_err("a certificate no root signed is refused");
    println!("the web's roots alone: {e}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Plain HTTP/2 to the TLS port is no way round it either.
    let plain = format!("etcd://{}", server.tls_endpoint().unwrap());
    let e = lockguard_etcd::url::from_url(
        Client::builder().connect_timeout(Duration::from_secs(3)),
        &plain,
    )
    .await
    .expect_err("plain text to the TLS port is refused");
    println!("plain text to the TLS port: {e}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_client_certificates_are_asked_for_and_shown() {
    let certs = certificates();
    let server = EtcdServer::start_tls(certs.path(), true);
    let endpoint = server.tls_endpoint().unwrap();
    let e = builder()
        .etcd_tls_root_certificate(read(&certs, "ca.crt"))
        .connect_etcd(&endpoint)
        .await
        .expect_err("a member that asks for a client certificate refuses a client without one");
    println!("no client certificate: {e}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let lg = builder()
        .etcd_tls_root_certificate(read(&certs, "ca.crt"))
        .etcd_tls_client_certificate(read(&certs, "client.crt"), read(&certs, "client.key"))
        .connect_etcd(&endpoint)
        .await
        .expect("connect with the client certificate");
    works(&lg).await;
}
