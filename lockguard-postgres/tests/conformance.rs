//! The conformance kit on PostgreSQL: one server for the test binary, a
//! schema of each test's own; and what only a PostgreSQL client is asked
//! (schema versions, a multi-lock in one transaction).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Builder, Client, ErrorKind};
use lockguard_postgres::{BuilderExt as _, ClientExt as _};
use lockguard_testing::PostgresServer;
use lockguard_testing::conformance::{ClientFuture, Harness};

/// The binary's shared server, with a schema of the test's own (created by
/// its first client), so tests running side by side share nothing.
struct Postgres {
    server: &'static PostgresServer,
    schema: String,
}

impl Postgres {
    fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: PostgresServer::shared(),
            schema: format!(
                "t{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

impl Harness for Postgres {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        Box::pin(async move {
            builder
                .postgres_schema(self.schema.as_str())
                .connect_postgres(&self.server.url())
                .await
                .expect("connect to postgres")
        })
    }

    /// Each handoff also wakes the waiter's bell, which reads its mail
    /// (about 3 ms, 6 ms beside the other tests): 100 rounds race the same
    /// 32 tasks in half the time of 200.
    fn contention_rounds(&self) -> usize {
        100
    }
}

lockguard_testing::conformance!(
    postgres => Postgres::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, counters, counter_expiry, limits, rw_locks, leader
);

/// A client of `schema` on `server`.
async fn schema_client(server: &PostgresServer, schema: &str) -> lockguard_core::Result<Client> {
    Client::builder()
        .postgres_schema(schema)
        .connect_postgres(&server.url())
        .await
}

/// A schema written by a newer lockguard (its `meta` row set by hand) is
/// used as it is when it works with clients of this version
/// (`compatible_since` at most this client's version), and refused with a
/// clear error when it needs newer clients, or says nothing of them. This
/// client's migration never runs over it: nothing is changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_used_when_compatible_and_refused_otherwise() {
    let server = PostgresServer::shared();
    let schema = format!("v{}", std::process::id());
    drop(schema_client(server, &schema).await.expect("created"));
    let meta = |sql: &str| server.psql(&format!("UPDATE {schema}.meta SET {sql}"));
    let seen = || {
        server.psql(&format!(
            "SELECT version || ' ' || coalesce(compatible_since::text, '-') FROM {schema}.meta"
        ))
    };

    // Version 1000, for clients of version 1 and newer: this one works.
    meta("version = 1000, compatible_since = 1");
    let lg = schema_client(server, &schema)
        .await
        .expect("a compatible newer schema is used");
    let g = lg.lock("newer").try_acquire().await.unwrap();
    assert!(g.release().await.unwrap());
    assert_eq!(
        seen(),
        "1000 1",
        "the older client migrated the newer schema"
    );

    // For clients of version 999 and newer: refused, saying why.
    meta("compatible_since = 999");
    let e = schema_client(server, &schema).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let m = e.to_string();
    assert!(
        m.contains(&format!("{schema:?} is version 1000"))
            && m.contains("version 999 or newer")
            && m.contains("upgrade this client"),
        "{m}"
    );
    // Saying nothing of older clients: for its own version only.
    meta("compatible_since = NULL");
    let e = schema_client(server, &schema).await.unwrap_err();
    assert!(e.to_string().contains("version 1000 or newer"), "{e}");
    assert_eq!(seen(), "1000 -");

    // The migration run by hand over it refuses too, changing nothing.
    let (db, conn) = lockguard_postgres::tokio_postgres::connect(
        &server.url(),
        lockguard_postgres::tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let e = db
        .batch_execute(&lockguard_postgres::migration_sql(&schema).unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("LG002"), "{e}");
    assert_eq!(seen(), "1000 -");
}

/// A multi-lock of three free keys is one statement, in one transaction:
/// the database hands out one transaction id for it (the one-by-one path
/// would take three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_on_free_keys_is_one_round_trip_and_one_transaction() {
    let server = PostgresServer::start();
    // Nothing else of the server's writes meanwhile.
    server.psql("ALTER SYSTEM SET autovacuum = off");
    server.psql("SELECT pg_reload_conf()");
    let lg = Client::connect_postgres(&server.url()).await.unwrap();
    let xid = || -> u64 {
        server
            .psql("SELECT pg_current_xact_id()")
            .parse()
            .expect("a transaction id")
    };
    // Its statement prepared on a connection of the pool (no transaction).
    let multi = lg.multi_lock(["m:1", "m:2", "m:3"]);
    let before = xid();
    let g = multi.try_acquire().await.expect("three free keys");
    let after = xid();
    // One for the multi-lock, one for the second read of the id.
    assert_eq!(after - before, 2, "transactions: {}", after - before - 1);
    let fences: Vec<u64> = g.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert_eq!(fences.len(), 3);
    // All or none: the last key held, neither of the free two is taken.
    let other = Client::connect_postgres(&server.url()).await.unwrap();
    let e = other
        .multi_lock(["m:4", "m:5", "m:3"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    let free = other
        .multi_lock(["m:4", "m:5"])
        .try_acquire()
        .await
        .unwrap();
    assert!(g.release().await.unwrap());
    assert!(free.release().await.unwrap());
}

/// A rolling upgrade from version 3: a schema of version 3 (its file as
/// released), with a lock held and a waiter queued by a client of version
/// 3 (its statements, by hand), is brought up to date by this client,
/// which records that clients of version 3 may use it; a client of version
/// 3 then keeps working on it (the same statements), and its release hands
/// the lock to its waiter as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_version_3_is_upgraded_under_its_clients() {
    let server = PostgresServer::shared();
    let schema = format!("u{}", std::process::id());
    let v3 = include_str!("fixtures/schema_v3.sql").replace("__SCHEMA__", &schema);
    server.psql(&format!(
        "{v3}\nINSERT INTO {schema}.meta (version) VALUES (3);"
    ));
    // What a client of version 3 sends: a holder, then a queued waiter.
    let acquire = |token: &str, wait: &str| {
        server.psql(&format!(
            "SELECT acquired FROM {schema}.acquire('k', '{token}', 60000, 1, {wait}, 'chan', 1)"
        ))
    };
    assert_eq!(acquire("old-holder", "NULL"), "t");
    assert_eq!(acquire("old-waiter", "30000"), "f");

    let lg = schema_client(server, &schema).await.expect("upgraded");
    assert_eq!(
        server.psql(&format!(
            "SELECT version || ' ' || compatible_since FROM {schema}.meta"
        )),
        "7 3"
    );
    assert_eq!(acquire("old-other", "NULL"), "f", "the held lock was lost");
    assert_eq!(
        server.psql(&format!("SELECT {schema}.release('k', 'old-holder', 1)")),
        "t"
    );
    assert_eq!(
        server.psql(&format!(
            "SELECT token || ' ' || reads FROM {schema}.holders WHERE key = 'k'"
        )),
        "old-waiter false",
        "not handed to the queued waiter"
    );
    // Its client has no bell: the letter waits in the mail for one.
    assert_eq!(
        server.psql(&format!(
            "SELECT token FROM {schema}.mail WHERE channel = 'chan'"
        )),
        "old-waiter",
        "no letter for a client without a bell"
    );
    // And what is new works beside it: read-write locks, and the removal of
    // a fenced value written before the upgrade (its value column, NOT NULL
    // in version 3, became nullable).
    let r = lg.rw_lock("k").read().try_acquire().await.unwrap();
    assert!(r.release().await.unwrap());
    let token = lockguard_core::FencingToken::new(5);
    let fenced = lg.fenced("v3");
    fenced.write(token, "before").await.unwrap();
    fenced.remove(token).await.unwrap();
    assert_eq!(fenced.read().await.unwrap(), None);
}

/// A hot key's scans skip its dead holders: each lock cycle leaves an index
/// entry of a deleted holder row until a vacuum, and the functions' scans,
/// plain (bitmap scans off), mark those entries as they pass them, so the
/// entries read per scan stay flat over a run of cycles on one key instead
/// of growing with every cycle since the last vacuum. Counted by the server
/// (`pg_stat_user_indexes`), on a server of the test's own: a scan may mark
/// an entry only once no transaction could still see its row, so other
/// tests' transactions on a shared server would keep entries alive for
/// reasons of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_keys_scans_skip_its_released_holders() {
    const CYCLES: u64 = 400;
    let own = PostgresServer::start();
    let server = &own;
    let schema = format!("h{}", std::process::id());
    let lg = schema_client(server, &schema).await.expect("client");
    let lock = lg.lock("hot").lease(Duration::from_secs(30));
    for _ in 0..CYCLES {
        let g = lock.try_acquire().await.expect("acquire");
        assert!(g.release().await.expect("release"));
    }
    drop(lock);
    drop(lg);
    let read = || {
        let out = server.psql(&format!(
            "SELECT idx_scan || ' ' || idx_tup_read FROM pg_stat_user_indexes \
             WHERE schemaname = '{schema}' AND indexrelname = 'holders_pkey'"
        ));
        let (scans, entries) = out.split_once(' ').expect("two counts");
        (
            scans.parse::<u64>().expect("scans"),
            entries.parse::<u64>().expect("entries"),
        )
    };
    // A backend reports its counts when it goes idle or exits: wait until
    // they stop changing, with a scan or more per cycle counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = read();
    let (scans, entries) = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = read();
        if now == last && now.0 >= CYCLES {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server counted {} scans of the holders' index in 20 s, \
             expected at least {CYCLES} (one per cycle)",
            now.0
        );
        last = now;
    };
    let per_scan = entries as f64 / scans as f64;
    // Walking every dead entry would read about CYCLES / 2 per scan (133
    // were counted with bitmap scans); marked as the scans pass, a few,
    // whatever the number of cycles (under 5 in every run seen alone, 6.0
    // once beside other tests' transactions).
    assert!(
        per_scan < (CYCLES / 20) as f64,
        "{per_scan:.1} index entries read per scan of one key after {CYCLES} cycles \
         ({entries} over {scans} scans): the scans walk the released holders"
    );
}

/// The deployment check judges the schema by the same rule: its own
/// version and a newer compatible one pass, a newer one that needs newer
/// clients fails, saying which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_judges_a_newer_schema_by_its_compatibility() {
    use lockguard_core::check::Verdict;
    let server = PostgresServer::start();
    drop(Client::connect_postgres(&server.url()).await.unwrap());
    let schema = || async {
        let report = lockguard_postgres::check::check(&server.url())
            .await
            .unwrap();
        let f = report.about("schema").next().expect("a schema finding");
        (f.verdict, f.detail.clone())
    };
    assert_eq!(schema().await.0, Verdict::Ok);
    server.psql("UPDATE lockguard.meta SET version = 1000, compatible_since = 1");
    let (verdict, detail) = schema().await;
    assert_eq!(verdict, Verdict::Ok, "{detail}");
    assert!(detail.contains("version 1000"), "{detail}");
    server.psql("UPDATE lockguard.meta SET compatible_since = 999");
    let (verdict, detail) = schema().await;
    assert_eq!(verdict, Verdict::Fail, "{detail}");
    assert!(detail.contains("version 999 or newer"), "{detail}");
}
