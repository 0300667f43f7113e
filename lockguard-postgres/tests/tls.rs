//! PostgreSQL over TLS (feature `tls-rustls`), against a real server that
//! refuses connections without it, with certificates the test makes: the
//! pool, the sessions of locks and the bell's connections all go over TLS,
//! the server's certificate is verified, and `sslmode` in the URL is
//! honoured.
#![cfg(feature = "tls-rustls")]

use std::time::Duration;

use lockguard_core::Client;
use lockguard_postgres::{BuilderExt as _, PostgresBuilder};
use lockguard_testing::faults::{a_waiter_is_woken_by_the_handoff, patient};
use lockguard_testing::{PostgresServer, make_test_certificates};

/// A client of `url` trusting the test CA `ca`.
async fn client(builder: lockguard_core::Builder, url: &str, ca: &[u8]) -> Client {
    PostgresBuilder::new(builder)
        .tls_root_certificate(ca.to_vec())
        .connect_postgres(url)
        .await
        .expect("connect over TLS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_locks_and_wake_ups_work_over_tls_with_a_private_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();
    let server = PostgresServer::start_tls(certs.path());
    let url = format!("{}?sslmode=require", server.url());

    let holder = client(Client::builder(), &url, &ca).await;
    let waiter = client(patient(), &url, &ca).await;
    // The server refuses any connection without TLS: a lock's session, a
    // waiter's and the bell's are among its encrypted ones.
    let g = holder.lock("tls:held").acquire().await.unwrap();
    let sessions = server.psql(
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE ssl AND application_name LIKE 'lg %'",
    );
    assert_eq!(sessions, "1", "no session of the lock over TLS");
    assert!(g.release().await.unwrap());
    a_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "tls").await;
    lockguard_testing::faults::a_permit_waiter_is_woken_by_the_handoff(
        &holder,
        waiter.clone(),
        "tls",
    )
    .await;
    let bell = server.psql(
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE ssl AND pid <> pg_backend_pid() AND query LIKE '%lockguard_bell%'",
    );
    assert_ne!(bell, "0", "no connection of the bell over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_refuses_an_unknown_ca_and_sslmode_disable_is_plain() {
    let certs = tempfile::tempdir().unwrap();
    make_test_certificates(certs.path());
    let server = PostgresServer::start_tls(certs.path());
    let builder = || Client::builder().connect_timeout(Duration::from_secs(2));

    // The system's roots do not know the test CA: the certificate is
    // verified, not only used to encrypt.
    let err = builder()
        .connect_postgres(&format!("{}?sslmode=require", server.url()))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    // Plain text, as asked, which this server refuses.
    let err = builder()
        .connect_postgres(&format!("{}?sslmode=disable", server.url()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("pg_hba.conf")
            || err.kind() == lockguard_core::ErrorKind::Unauthorized,
        "{err}"
    );
    // Certificates that cannot be read are the caller's mistake.
    let err = PostgresBuilder::new(builder())
        .tls_root_certificate(b"not a certificate".to_vec())
        .connect_postgres(&server.url())
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}

/// With the TLS feature built in, a unix socket URL still connects, in
/// plain text as libpq does (`sslmode` has nothing to secure there): locks
/// (their sessions) and wake-ups (the server's of a lock, the bell's of a
/// semaphore) work over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_a_unix_socket_needs_no_tls() {
    let server = PostgresServer::start();
    let url = server.socket_url();
    let holder = Client::builder()
        .connect_postgres(&url)
        .await
        .expect("connect over the unix socket");
    let waiter = patient().connect_postgres(&url).await.expect("connect");
    a_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "socket").await;
    lockguard_testing::faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter, "socket")
        .await;
    let over_tls = server.psql("SELECT count(*) FROM pg_stat_ssl WHERE ssl");
    assert_eq!(over_tls, "0");
}
