//! The PostgreSQL store over the application's `sqlx::PgPool` (feature
//! `sqlx`): the conformance kit, and the server's own count of connections
//! showing that lockguard's statements go over the application's pool,
//! but for the sessions of its locks and its bell.
#![cfg(feature = "sqlx")]

use std::sync::atomic::{AtomicU64, Ordering};

use lockguard_core::{Builder, Client, Quota};
use lockguard_postgres::BuilderExt as _;
use lockguard_testing::PostgresServer;
use lockguard_testing::conformance::{ClientFuture, Harness};
use sqlx::postgres::PgPoolOptions;

/// The binary's shared server, a schema of the test's own, and a pool of
/// the client's own made the way an application makes it.
struct PostgresSqlx {
    server: &'static PostgresServer,
    schema: String,
}

impl PostgresSqlx {
    fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: PostgresServer::shared(),
            schema: format!(
                "s{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

impl Harness for PostgresSqlx {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        Box::pin(async move {
            let url = self.server.url();
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .connect(&url)
                .await
                .expect("an sqlx pool");
            builder
                .postgres_schema(self.schema.as_str())
                .connect_sqlx_pool(pool, &url)
                .await
                .expect("connect over the sqlx pool")
        })
    }

    /// Each of the 32 tasks waits for a lock on a session of its own, and
    /// a handoff of a semaphore or a read-write lock also wakes the
    /// waiter's bell, which reads its mail (about 3 ms, 6 ms beside the
    /// other tests): 50 rounds race the same 32 tasks, 1,600 acquisitions,
    /// as MySQL's and etcd's do.
    fn contention_rounds(&self) -> usize {
        50
    }
}

lockguard_testing::conformance!(
    postgres_sqlx => PostgresSqlx::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, counter_expiry, limits
);

/// The server's client connections whose `application_name` is like
/// `pattern` (LIKE's).
fn connections(server: &PostgresServer, pattern: &str) -> u32 {
    server
        .psql(&format!(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND application_name LIKE '{pattern}'"
        ))
        .trim()
        .parse()
        .unwrap()
}

/// The client connections that are neither the application's, nor psql's,
/// nor the sessions of lockguard's locks (`lockguard` idle, `lg ...` while
/// waiting or holding).
fn others(server: &PostgresServer) -> String {
    server.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND application_name NOT IN ('app', 'psql', 'lockguard') \
         AND application_name NOT LIKE 'lg %'",
    )
}

/// Every statement of a client on the application's pool goes over that
/// pool, but for a lock's: the server sees no connection of lockguard's
/// own until a lock is taken, then the lock's session (opened with the
/// listening URL, named `lg ...`), which holds it as an advisory lock; no
/// bell for a lock's waiter, which the server wakes; and a semaphore's
/// waiter opens the bell's two connections (the bell and the holder of the
/// lock it waits on), which wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_statements_go_over_the_applications_sqlx_pool() {
    let server = PostgresServer::start();
    let app_url = format!("{}?application_name=app", server.url());
    let listen_url = format!("{}?application_name=lockguard-listener", server.url());
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect(&app_url)
        .await
        .unwrap();
    let lg = Client::builder()
        .connect_sqlx_pool(pool.clone(), &listen_url)
        .await
        .expect("a client on the application's sqlx pool");
    assert_eq!(lg.store_name(), "postgres");

    assert_eq!(lg.counter("sqlx:stock").incr_by(5).await.unwrap(), 5);
    assert_eq!(
        lg.counter("sqlx:stock").decr_if_at_least(2).await.unwrap(),
        Some(3)
    );
    let limiter = lg.rate_limiter("sqlx", Quota::per_second(2));
    assert!(limiter.check("k").await.unwrap().is_allowed());
    let permit = lg.semaphore("sqlx", 2).try_acquire().await.unwrap();
    assert!(permit.release().await.unwrap());
    let app = connections(&server, "app");
    assert!((1..=3).contains(&app), "{app} application connections");
    assert_eq!(
        server
            .psql(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND application_name NOT IN ('app', 'psql')"
            )
            .trim(),
        "0",
        "lockguard opened a connection of its own before it took a lock"
    );

    let g = lg.lock("sqlx").acquire().await.unwrap();
    let holding = server.psql(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted \
           AND a.application_name LIKE 'lg %'",
    );
    assert_eq!(
        holding, "1",
        "the lock is no advisory lock of a session of lockguard's"
    );
    lg.fenced("sqlx:doc")
        .write(g.fencing_token(), "v1")
        .await
        .unwrap();
    assert!(g.release().await.unwrap());
    let seen = lg.fenced("sqlx:doc").read().await.unwrap();
    assert_eq!(seen.map(|v| v.value), Some(b"v1".to_vec()));
    assert!(connections(&server, "app") <= 3);
    assert_eq!(
        others(&server),
        "0",
        "lockguard opened a connection of its own but its lock's session"
    );

    // A lock's waiter, told of its handoff (not retrying for 10 s), waits
    // on a session of its own, with no bell.
    let waiter = lockguard_testing::faults::patient()
        .connect_sqlx_pool(pool.clone(), &listen_url)
        .await
        .unwrap();
    lockguard_testing::faults::a_waiter_is_woken_by_the_handoff(&lg, waiter.clone(), "sqlx-wait")
        .await;
    assert_eq!(others(&server), "0", "a lock's waiter opened a bell");
    // A semaphore's waiter opens the bell's two connections, and is woken
    // over them; open while the waiter's client lives.
    lockguard_testing::faults::a_permit_waiter_is_woken_by_the_handoff(
        &lg,
        waiter.clone(),
        "sqlx-permit",
    )
    .await;
    assert_eq!(connections(&server, "lockguard-listener"), 2);
    drop(waiter);
    assert!(connections(&server, "app") <= 3);

    // A bad listening URL is said at once.
    let bad = Client::builder()
        .connect_sqlx_pool(pool, "postgres://u:secret@h:notaport/db")
        .await
        .unwrap_err();
    assert!(
        bad.is_invalid_input() && !bad.to_string().contains("secret"),
        "{bad}"
    );
}
