//! Locks of session leases (`LockLeases::Session`) on MariaDB under
//! faults: a holder's session killed by an operator hands the lock on at
//! once, and the old holder's fenced writes are refused (a recorded
//! lease's successor waits it out instead); a crash frees every lock at
//! once, and every token drawn after it is greater than every one drawn
//! before; a paused holder process loses its lock only after its lease; a
//! lock kept past its release (`at_least`) stays kept after its keeper's
//! session ends; a URL picks the mode.

use std::time::Duration;

use lockguard_core::Client;
use lockguard_mysql::{FencedTable, LockLeases, MySqlBuilder};
use lockguard_testing::faults;
use lockguard_testing::{ChildProcess, MariaDbServer};
use mysql_async::prelude::Queryable;

/// A client of `leases` on `server`.
async fn client(server: &MariaDbServer, leases: LockLeases) -> Client {
    let b = Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2));
    MySqlBuilder::new(b)
        .lock_leases(leases)
        .connect_mysql(&server.url())
        .await
        .expect("connect to mariadb")
}

/// The id of the session holding lock `key` (of the default prefixes),
/// as an operator finds it.
fn holder_session(server: &MariaDbServer, key: &str) -> String {
    server.sql(&format!(
        "SELECT IS_USED_LOCK(CONCAT('lockguard ', \
           HEX(UNHEX(SHA1(CONCAT('lockguard.lockguard_:', 'lockguard:lock:{{{key}}}'))))))"
    ))
}

/// Kills the session holding lock `key` (of the default prefixes), as an
/// operator would (`KILL CONNECTION`).
fn kill_holder(server: &MariaDbServer, key: &str) {
    let id = holder_session(server, key);
    assert!(id.parse::<u64>().is_ok(), "the holder's session: {id:?}");
    server.sql(&format!("KILL CONNECTION {id}"));
}

/// A holder's session killed by an operator (`KILL CONNECTION`) while a
/// waiter waits: the kit's scenario (session leases hand the lock on at
/// once and fence the old holder's writes out; recorded leases wait the
/// lease out), on a `FencedTable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_session_is_succeeded_at_once_and_its_writes_refused() {
    let server = MariaDbServer::start();
    let mut db = mysql_async::Conn::from_url(server.url()).await.unwrap();
    db.query_drop(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL); \
         INSERT INTO orders VALUES (1, 'new');",
    )
    .await
    .unwrap();
    let orders = FencedTable::new("orders", "id").unwrap();
    db.query_drop(orders.add_column_sql()).await.unwrap();

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
        |key| kill_holder(&server, key),
        async |token| {
            orders
                .update(&mut db, 1i64, token, &[("status", "paid".into())])
                .await
        },
    )
    .await;
}

/// The server crashes (SIGKILL) and comes back on its data while a lock of
/// session leases is held on a long lease: the lock is free at once, with
/// no wait for the leases granted before, and its next token is greater
/// than every token drawn before the crash (the sequence's cache is
/// written ahead of what it hands out); the old holder learns of the
/// crash at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_frees_session_leases_at_once_and_tokens_keep_growing() {
    let mut server = MariaDbServer::start();
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
const CHILD_ENV: &str = "LOCKGUARD_MYSQL_SESSION_CHILD";

/// The paused holder's lease: a fixed one, so the take set its session's
/// `wait_timeout`, and no renewal did.
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
    let lg = MySqlBuilder::new(Client::builder())
        .lock_leases(LockLeases::Session)
        .connect_mysql(&url)
        .await
        .expect("the child connects");
    faults::hold_paused(&lg, "paused", CHILD_LEASE).await;
}

/// A holder process frozen (SIGSTOP) right after it took a lock of session
/// leases on a fixed 2 s lease loses it when the server ends its session,
/// idle for the lease and a slack in whole seconds (`wait_timeout` 3 s, set
/// before the take; the server checks idle sessions on its own schedule,
/// so within seconds past it): not before the lease has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_process_loses_the_lock_after_its_lease() {
    let server = MariaDbServer::start();
    let waiter = client(&server, LockLeases::Session).await;
    let child = ChildProcess::spawn("child_holder", (CHILD_ENV, &server.url()));
    faults::a_paused_holder_process_loses_the_lock_after_its_lease(
        child,
        &waiter,
        "paused",
        CHILD_LEASE,
        CHILD_LEASE * 5,
    )
    .await;
}

/// A job's lock of session leases released early with `at_least` stays
/// kept after its keeper's session is killed: the kit's scenario, for a
/// taker of each mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lock_stays_kept_after_its_keepers_session_ends() {
    let server = MariaDbServer::start();
    let keeper = client(&server, LockLeases::Session).await;
    let session = client(&server, LockLeases::Session).await;
    let recorded = client(&server, LockLeases::Recorded).await;
    faults::a_kept_lock_stays_kept_after_its_keepers_session_ends(
        &keeper,
        [("job", &session), ("job:r", &recorded)],
        |key| {
            kill_holder(&server, key);
            let freed = (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                holder_session(&server, key) == "NULL"
            });
            assert!(
                freed,
                "{key}: the keeper's session still holds the user lock"
            );
        },
    )
    .await;
}

/// A URL's `lock_leases` parameter picks the mode (what `Client::connect`
/// and `LOCKGUARD_URL` reach): a hold of session leases writes no row of
/// its key, a hold of recorded ones does; the parameter is taken out of
/// what the driver reads, beside the driver's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_picks_the_lease_mode() {
    let server = MariaDbServer::start();
    let rows = |key: &str| {
        server.sql(&format!(
            "SELECT COUNT(*) FROM lockguard.lockguard_lock_fences \
              WHERE k = 'lockguard:lock:{{{key}}}'"
        ))
    };
    for (url, key, written) in [
        (
            format!("{}?lock_leases=session", server.url()),
            "url:s",
            "0",
        ),
        (
            format!("{}?prefer_socket=false&lock_leases=session", server.url()),
            "url:p",
            "0",
        ),
        (
            format!("{}?lock_leases=recorded", server.url()),
            "url:r",
            "1",
        ),
        (server.url(), "url:d", "1"),
    ] {
        let lg = lockguard_mysql::url::from_url(Client::builder(), &url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let g = lg.lock(key).acquire().await.unwrap();
        assert_eq!(rows(key), written, "{url}");
        assert!(g.release().await.unwrap());
    }
    let err = lockguard_mysql::url::from_url(
        Client::builder(),
        &format!("{}?lock_leases=both", server.url()),
    )
    .await
    .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}
