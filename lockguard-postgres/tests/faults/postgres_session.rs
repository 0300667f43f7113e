//! Locks of session leases (`LockLeases::Session`) under faults: a
//! holder's session ended by an operator hands the lock on at once, and
//! the old holder's fenced writes are refused; a crash frees every lock at
//! once, with no wait, and every token drawn after it is greater than
//! every one drawn before; a recorded lease's successor waits beside it.

use std::time::Duration;

use lockguard_core::Client;
use lockguard_postgres::{BuilderExt as _, FencedTable, LockLeases, tokio_postgres};
use lockguard_testing::PostgresServer;
use lockguard_testing::faults;

/// A client of `leases` on `server`.
async fn client(server: &PostgresServer, leases: LockLeases) -> Client {
    Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        .postgres_lock_leases(leases)
        .connect_postgres(&server.url())
        .await
        .expect("connect to postgres")
}

/// A holder's session ended by an operator (`pg_terminate_backend`) while
/// a waiter waits: the kit's scenario (session leases hand the lock on at
/// once and fence the old holder's writes out; recorded leases wait the
/// lease out), on a `FencedTable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_holder_is_succeeded_at_once_and_its_writes_refused() {
    let server = PostgresServer::start();
    let (db, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL);
         INSERT INTO orders VALUES (1, 'new');",
    )
    .await
    .unwrap();
    let orders = FencedTable::new("orders", "id").unwrap();
    db.batch_execute(&orders.add_column_sql()).await.unwrap();

    let session = (
        client(&server, LockLeases::Session).await,
        client(&server, LockLeases::Session).await,
    );
    let recorded = (
        client(&server, LockLeases::Recorded).await,
        client(&server, LockLeases::Recorded).await,
    );
    faults::a_cut_holder_is_succeeded_at_once_and_its_writes_refused(
        (&session.0, &session.1),
        (&recorded.0, &recorded.1),
        |key| terminate_holder_of(&server, key),
        async |token| {
            orders
                .update(&db, &1i64, token, &[("status", &"paid")])
                .await
        },
    )
    .await;
}

/// Ends the session holding lock `key` (of the default schema and
/// prefixes), as an operator's `pg_terminate_backend` would, and waits
/// until the server has ended it.
fn terminate_holder_of(server: &PostgresServer, key: &str) {
    let ended = server.psql(&format!(
        "SELECT count(pg_terminate_backend(l.pid, 5000)) FROM pg_locks l, \
           lockguard.lock_id('lockguard:lock:{{{key}}}') i \
          WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted \
            AND l.classid = i.hi::oid AND l.objid = i.lo::oid"
    ));
    assert_eq!(ended, "1", "{key}: the holder's session");
}

/// A job's lock of session leases released early with `at_least` stays
/// kept after its keeper's session is terminated: the kit's scenario, for
/// a taker of each mode (the recorded one's take reads the key's lease
/// row, which the keep writes its kept time into, whoever took the key
/// last).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lock_stays_kept_after_its_keepers_session_ends() {
    let server = PostgresServer::start();
    let keeper = client(&server, LockLeases::Session).await;
    let session = client(&server, LockLeases::Session).await;
    let recorded = client(&server, LockLeases::Recorded).await;
    faults::a_kept_lock_stays_kept_after_its_keepers_session_ends(
        &keeper,
        [("job", &session), ("job:r", &recorded)],
        |key| terminate_holder_of(&server, key),
    )
    .await;
}

/// The server crashes (SIGKILL) and comes back on its data while a lock of
/// session leases is held on a long lease: the lock is free at once, with
/// no wait for the leases granted before, and its next token is greater
/// than every token drawn before the crash, though the sequence they come
/// from is unlogged (emptied by crash recovery) on PostgreSQL 15 and
/// newer; the old holder learns of the crash at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_frees_session_leases_at_once_and_tokens_keep_growing() {
    let mut server = PostgresServer::start();
    let holder = client(&server, LockLeases::Session).await;
    let other = client(&server, LockLeases::Session).await;
    faults::a_crash_frees_session_leases_at_once_and_tokens_keep_growing(
        &mut server,
        &holder,
        &other,
    )
    .await;
}

/// Where the paused holder's child process finds the server.
const CHILD_ENV: &str = "LOCKGUARD_SESSION_CHILD";

/// The paused holder's lease: a fixed one, so the statement that took the
/// lock set its session's idle timeout, and no renewal did.
const CHILD_LEASE: Duration = Duration::from_secs(2);

/// The child of `a_paused_holder_process_loses_the_lock_after_its_lease`,
/// run only in the process it starts: holds `paused` with session leases
/// on a fixed lease, says so, and sleeps until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_paused_holder_process_loses_the_lock_after_its_lease"]
async fn child_holder() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::builder()
        .postgres_lock_leases(LockLeases::Session)
        .connect_postgres(&url)
        .await
        .expect("the child connects");
    faults::hold_paused(&lg, "paused", CHILD_LEASE).await;
}

/// A holder process frozen (SIGSTOP) right after it took a lock of session
/// leases on a fixed 2 s lease (so its client cannot unlock at the lease's
/// end): its session, idle from the take, is ended by the server once idle
/// for the lease and a quarter of it (`idle_session_timeout`, set by the
/// take), which frees the lock for a waiter: not before the holder's lease
/// has ended (so never while it may still believe it holds), and within a
/// bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_process_loses_the_lock_after_its_lease() {
    let server = PostgresServer::start();
    let waiter = client(&server, LockLeases::Session).await;
    let child = lockguard_testing::ChildProcess::spawn(
        "postgres_session::child_holder",
        (CHILD_ENV, &server.url()),
    );
    // The server ends the session 2.5 s after the take.
    faults::a_paused_holder_process_loses_the_lock_after_its_lease(
        child,
        &waiter,
        "paused",
        CHILD_LEASE,
        CHILD_LEASE * 3,
    )
    .await;
}

/// A URL's `lock_leases` parameter picks the mode (what `Client::connect`
/// and `LOCKGUARD_URL` reach): a hold of session leases writes no row of
/// its key, a hold of recorded ones does; the parameter is taken out of
/// what the driver reads, beside the driver's own (`host`, `port`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_picks_the_lease_mode() {
    let server = PostgresServer::start();
    let rows = |key: &str| {
        server.psql(&format!(
            "SELECT count(*) FROM lockguard.lock_fences WHERE key = '{key}'"
        ))
    };
    for (url, key, written) in [
        (
            format!("{}?lock_leases=session", server.url()),
            "url:s",
            "0",
        ),
        (
            format!("{}&lock_leases=session", server.socket_url()),
            "url:u",
            "0",
        ),
        (
            format!("{}?lock_leases=recorded", server.url()),
            "url:r",
            "1",
        ),
        (server.url(), "url:d", "1"),
    ] {
        let lg = lockguard_postgres::url::from_url(Client::builder(), &url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let g = lg.lock(key).acquire().await.unwrap();
        assert_eq!(rows(&format!("lockguard:lock:{{{key}}}")), written, "{url}");
        assert!(g.release().await.unwrap());
    }
    let err = lockguard_postgres::url::from_url(
        Client::builder(),
        &format!("{}?lock_leases=both", server.url()),
    )
    .await
    .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}
