//! MySQL/MariaDB over TLS (feature `tls-rustls`), against a real server
//! that refuses connections without it (`require_secure_transport`), with
//! certificates the test makes: the pool and the bell both go over TLS,
//! the server's certificate is verified, and a user that must present a
//! certificate (`REQUIRE X509`) is let in only with one.
#![cfg(feature = "tls-rustls")]

use lockguard_core::Client;
use lockguard_mysql::MySqlBuilder;
use lockguard_testing::faults::{a_waiter_is_woken_by_the_handoff, patient};
use lockguard_testing::{MariaDbServer, make_test_certificates};

/// A server that serves TLS with the test certificates in `certs` and
/// refuses plain connections.
fn tls_server(certs: &std::path::Path) -> MariaDbServer {
    let arg = |name: &str, file: &str| format!("--{name}={}", certs.join(file).display());
    MariaDbServer::start_with(&[
        &arg("ssl-ca", "ca.crt"),
        &arg("ssl-cert", "server.crt"),
        &arg("ssl-key", "server.key"),
        "--require-secure-transport=ON",
    ])
}

/// A client of `url` trusting the test CA `ca`.
async fn client(builder: lockguard_core::Builder, url: &str, ca: &[u8]) -> Client {
    MySqlBuilder::new(builder)
        .tls_root_certificate(ca.to_vec())
        .connect_mysql(url)
        .await
        .expect("connect over TLS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_locks_counters_and_wake_ups_work_over_tls_with_a_private_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();
    let server = tls_server(certs.path());
    let url = format!("{}?require_ssl=true", server.url());
    let lg = client(Client::builder(), &url, &ca).await;
    let guard = lg.lock("tls").try_acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
    assert_eq!(lg.counter("tls").incr_by(2).await.unwrap(), 2);
    // The waiter's bell (a connection of its own) goes over TLS too.
    let waiter = client(patient(), &url, &ca).await;
    a_waiter_is_woken_by_the_handoff(&lg, waiter, "tls-handoff").await;
    // The root certificate alone asks for TLS: the URL need not.
    let lg = client(Client::builder(), &server.url(), &ca).await;
    assert!(lg.lock("tls-2").try_acquire().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_tls_refuses_an_unknown_ca_and_the_server_refuses_plain_text() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let server = tls_server(certs.path());
    // The web's roots do not know the test CA.
    let e = Client::builder()
        .response_timeout(std::time::Duration::from_secs(5))
        .connect_timeout(std::time::Duration::from_secs(5));
    let e = MySqlBuilder::new(e)
        .connect_mysql(&format!("{}?require_ssl=true", server.url()))
        .await
        .unwrap_err();
    let said = format!("{e:?}");
    assert!(
        said.contains("UnknownIssuer") || said.contains("certificate"),
        "{said}"
    );
    // Without TLS, the server refuses the same user it lets in over TLS
    // (MariaDB answers "access denied").
    let e = MySqlBuilder::new(Client::builder())
        .connect_mysql(&server.url())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), lockguard_core::ErrorKind::Unauthorized, "{e}");
    assert!(
        e.message().contains("require_ssl=true"),
        "the fix is named: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_user_that_requires_a_certificate_is_let_in_with_one() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let read = |f: &str| std::fs::read(certs.path().join(f)).unwrap();
    let server = tls_server(certs.path());
    server.sql(
        "CREATE USER 'cert'@'%' IDENTIFIED BY 'cert' REQUIRE X509; \
         GRANT ALL ON lockguard.* TO 'cert'@'%'; FLUSH PRIVILEGES",
    );
    let url = server.url_as("cert", "cert", "lockguard");
    let e = MySqlBuilder::new(Client::builder())
        .tls_root_certificate(read("ca.crt"))
        .connect_mysql(&url)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        lockguard_core::ErrorKind::Unauthorized,
        "without a certificate: {e}"
    );
    let lg = MySqlBuilder::new(Client::builder())
        .tls_root_certificate(read("ca.crt"))
        .tls_client_certificate(read("client.crt"), read("client.key"))
        .connect_mysql(&url)
        .await
        .expect("with the client certificate");
    assert!(lg.lock("x509").try_acquire().await.is_ok());
}
