//! The conformance kit on PostgreSQL: one server for the test binary, a
//! schema of each test's own; and what only a PostgreSQL client is asked
//! (schema versions, a lock as a session's advisory lock).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Builder, Client, ErrorKind};
use lockguard_postgres::{BuilderExt as _, ClientExt as _, LockLeases};
use lockguard_testing::PostgresServer;
use lockguard_testing::conformance::{ClientFuture, Harness, eventually};

/// The binary's shared server, with a schema of the test's own (created by
/// its first client), so tests running side by side share nothing; its
/// clients' locks of `leases`.
struct Postgres {
    server: &'static PostgresServer,
    schema: String,
    leases: LockLeases,
}

impl Postgres {
    fn start() -> Self {
        Self::with(LockLeases::Recorded)
    }

    /// Clients whose locks are of session leases.
    fn session() -> Self {
        Self::with(LockLeases::Session)
    }

    fn with(leases: LockLeases) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: PostgresServer::shared(),
            schema: format!(
                "t{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            leases,
        }
    }
}

impl Harness for Postgres {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        Box::pin(async move {
            builder
                .postgres_schema(self.schema.as_str())
                .lock_leases(self.leases)
                .connect_postgres(&self.server.url())
                .await
                .expect("connect to postgres")
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

    /// A client of session leases keeps its locks' leases alone: no row
    /// and no session's name records them.
    fn keeps_lock_leases(&self) -> bool {
        self.leases != LockLeases::Session
    }
}

lockguard_testing::conformance!(
    postgres => Postgres::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, counters, counter_expiry, limits, rw_locks, leader
);

// The lock suites again, on clients whose locks are of session leases.
lockguard_testing::conformance!(
    postgres_session => Postgres::session();
    locks, wake_ups, queue, queue_wake_ups, inspection, survey, leader
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

/// A lock's holders, as the server sees them: each granted advisory lock
/// of the two-int form, with the key and newest token `lock_fences` keeps
/// for it (empty when it keeps none), the backend holding it and that
/// backend's `application_name`.
fn advisory_holds(server: &PostgresServer, schema: &str) -> Vec<(String, u64, String, String)> {
    server
        .psql(&format!(
            "SELECT coalesce(f.key, ''), coalesce(f.fence, 0), l.pid, a.application_name \
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
               LEFT JOIN {schema}.lock_fences f ON l.classid = f.hi::oid AND l.objid = f.lo::oid \
              WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted \
              ORDER BY 1"
        ))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.splitn(4, '|');
            let mut next = || f.next().expect("four columns").to_owned();
            let (key, fence, pid, name) = (next(), next(), next(), next());
            (key, fence.parse().expect("a fence"), pid, name)
        })
        .collect()
}

/// A multi-lock takes its keys one by one, each a session advisory lock
/// held by a session of its own, named with its hold (`lg <token> <fence>
/// <lease end>`, in hex) and recorded in `lock_fences` with the token the
/// guard holds. A multi-lock that finds a key busy takes none of the
/// others, and a release leaves no advisory lock behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_locks_keys_are_advisory_locks_of_sessions_of_their_own() {
    let server = PostgresServer::start();
    let lg = Client::connect_postgres(&server.url()).await.unwrap();
    let g = lg
        .multi_lock(["m:1", "m:2", "m:3"])
        .try_acquire()
        .await
        .expect("three free keys");
    let now_ms: i64 = server
        .psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .parse()
        .unwrap();
    let holds = advisory_holds(&server, "lockguard");
    assert_eq!(holds.len(), 3, "{holds:?}");
    let mut pids: Vec<&str> = holds.iter().map(|h| h.2.as_str()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "keys held by one session: {holds:?}");
    for (name, fence) in g.fencing_tokens() {
        let key = format!("lockguard:lock:{{{name}}}");
        let (_, kept, _, session) = holds
            .iter()
            .find(|h| h.0 == key)
            .unwrap_or_else(|| panic!("{key} is no advisory lock: {holds:?}"));
        assert_eq!(*kept, fence.get(), "{key}: lock_fences keeps another token");
        let parts: Vec<&str> = session.split(' ').collect();
        assert!(
            parts.len() == 4 && parts[0] == "lg" && !parts[1].is_empty(),
            "{key} held by a session named {session:?}"
        );
        assert_eq!(parts[2], format!("{:x}", fence.get()), "{session:?}");
        let end = i64::from_str_radix(parts[3], 16).expect("a lease end in hex");
        assert!(
            end > now_ms,
            "{session:?}: a lease that ended before {now_ms}"
        );
    }

    // All or none: the last key held, neither of the free two is taken.
    let other = Client::connect_postgres(&server.url()).await.unwrap();
    let e = other
        .multi_lock(["m:4", "m:5", "m:3"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    let left = eventually(Duration::from_secs(2), || async {
        advisory_holds(&server, "lockguard").len() == 3
    })
    .await;
    assert!(
        left,
        "a busy multi-lock kept keys: {:?}",
        advisory_holds(&server, "lockguard")
    );
    let free = other
        .multi_lock(["m:4", "m:5"])
        .try_acquire()
        .await
        .unwrap();
    assert_eq!(advisory_holds(&server, "lockguard").len(), 5);
    assert!(g.release().await.unwrap());
    assert!(free.release().await.unwrap());
    let none = eventually(Duration::from_secs(2), || async {
        advisory_holds(&server, "lockguard").is_empty()
    })
    .await;
    assert!(
        none,
        "released keys still held: {:?}",
        advisory_holds(&server, "lockguard")
    );
}

/// A lock's waiter waits in the server: its session, named `lg <token>`,
/// waits for the lock's advisory lock, which the holder's release grants
/// it at once (well before the waiter's first refresh, 10 s in). Neither
/// opens a bell (no connection, no row of `bells`), nor writes a row of
/// the tables of semaphores (`holders`, `waiters`, `mail`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locks_waiter_waits_in_the_server_with_no_bell_and_no_row() {
    let server = PostgresServer::start();
    let holder = Client::connect_postgres(&server.url()).await.unwrap();
    let waiter = lockguard_testing::faults::patient()
        .connect_postgres(&server.url())
        .await
        .unwrap();
    let held = holder
        .lock("w")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("w")
            .wait(Duration::from_secs(25))
            .acquire()
            .await
    });
    let waits = || {
        server.psql(
            "SELECT coalesce(string_agg(a.application_name, ','), '') \
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
              WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND NOT l.granted",
        )
    };
    let queued = eventually(Duration::from_secs(10), || async { !waits().is_empty() }).await;
    assert!(queued, "no session waits for the lock's advisory lock");
    let name = waits();
    let parts: Vec<&str> = name.split(' ').collect();
    assert!(
        parts.len() == 2 && parts[0] == "lg" && !parts[1].is_empty(),
        "the waiting session is named {name:?}"
    );
    assert_eq!(holder.lock("w").inspect().await.unwrap().waiters, 1);
    let rows = || {
        server.psql(
            "SELECT (SELECT count(*) FROM lockguard.holders) \
                  + (SELECT count(*) FROM lockguard.waiters) \
                  + (SELECT count(*) FROM lockguard.mail)",
        )
    };
    // The bells' rows, and their connections.
    let bells = || {
        server.psql(
            "SELECT (SELECT count(*) FROM lockguard.bells) \
                  + (SELECT count(*) FROM pg_stat_activity \
                      WHERE pid <> pg_backend_pid() AND query LIKE '%lockguard_bell%')",
        )
    };
    assert_eq!(
        rows(),
        "0",
        "a lock's wait wrote rows of the semaphores' tables"
    );
    assert_eq!(bells(), "0", "a lock's waiter opened a bell");

    assert!(held.release().await.unwrap());
    let g = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the release did not grant the lock to its waiter")
        .unwrap()
        .expect("the waiter's lock");
    let holds = advisory_holds(&server, "lockguard");
    assert!(
        holds.len() == 1 && holds[0].1 == g.fencing_token().get(),
        "the waiter's hold as the server has it: {holds:?}"
    );
    assert_eq!(
        rows(),
        "0",
        "a lock's handoff wrote rows of the semaphores' tables"
    );
    assert_eq!(bells(), "0", "a lock's waiter opened a bell");
    assert!(g.release().await.unwrap());
}

/// An upgrade from version 3 under its clients: a schema of version 3
/// (its file as released), with a lock held and a waiter queued by a
/// client of version 3 (its statements, by hand), is brought up to date by
/// this client, which records that only clients of its version may use it.
/// A client of version 3 still running is stopped, not left taking locks
/// the others no longer see: its acquisitions (a new holder's, the queued
/// waiter's next attempt) and a multi-lock's statement fail with LG003.
/// What this client does works beside the rows it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_version_3_is_upgraded_and_its_clients_are_stopped() {
    let server = PostgresServer::shared();
    let schema = format!("u{}", std::process::id());
    let v3 = include_str!("fixtures/schema_v3.sql").replace("__SCHEMA__", &schema);
    server.psql(&format!(
        "{v3}\nINSERT INTO {schema}.meta (version) VALUES (3);"
    ));
    // What a client of version 3 sends: a holder, then a queued waiter.
    let acquire = |token: &str, wait: &str| {
        format!(
            "SELECT acquired FROM {schema}.acquire('k', '{token}', 60000, 1, {wait}, 'chan', 1)"
        )
    };
    assert_eq!(server.psql(&acquire("old-holder", "NULL")), "t");
    assert_eq!(server.psql(&acquire("old-waiter", "30000")), "f");

    let lg = schema_client(server, &schema).await.expect("upgraded");
    assert_eq!(
        server.psql(&format!(
            "SELECT version || ' ' || compatible_since FROM {schema}.meta"
        )),
        "12 11"
    );
    let (db, conn) = lockguard_postgres::tokio_postgres::connect(
        &server.url(),
        lockguard_postgres::tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for (what, sql) in [
        ("a new holder's acquire", acquire("old-other", "NULL")),
        (
            "the queued waiter's acquire",
            acquire("old-waiter", "30000"),
        ),
        (
            "acquire_all",
            format!("SELECT acquired FROM {schema}.acquire_all(ARRAY['k2'], ARRAY['old'], 60000)"),
        ),
    ] {
        let Err(e) = db.query(sql.as_str(), &[]).await else {
            panic!("{what} of a client of version 3 still works");
        };
        assert_eq!(e.code().map(|c| c.code()), Some("LG003"), "{what}: {e}");
    }
    // And what is new works beside it: locks, read-write locks, and the
    // removal of a fenced value written before the upgrade (its value
    // column, NOT NULL in version 3, became nullable).
    let g = lg.lock("k").try_acquire().await.unwrap();
    assert!(g.release().await.unwrap());
    let r = lg.rw_lock("k").read().try_acquire().await.unwrap();
    assert!(r.release().await.unwrap());
    let token = lockguard_core::FencingToken::new(5);
    let fenced = lg.fenced("v3");
    fenced.write(token, "before").await.unwrap();
    fenced.remove(token).await.unwrap();
    assert_eq!(fenced.read().await.unwrap(), None);
}

/// A migration waits only for migrations of its own schema, and gets more
/// than the connect timeout to do so: with the lock of schema `a`'s
/// migration held by another session, a client of schema `b` is created
/// while `a`'s first client waits; held past the connect timeout (1 s
/// here), `a`'s client is then created, not timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waits_only_for_its_own_schema_past_the_connect_timeout() {
    use lockguard_postgres::tokio_postgres;
    let server = PostgresServer::shared();
    let (a, b) = (
        format!("ma{}", std::process::id()),
        format!("mb{}", std::process::id()),
    );
    let (db, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let hold = format!("hashtextextended('lockguard migration of {a}', 0)");
    db.execute(&format!("SELECT pg_advisory_lock({hold})"), &[])
        .await
        .unwrap();
    let connect = |schema: String| {
        let url = server.url();
        tokio::spawn(async move {
            Client::builder()
                .connect_timeout(Duration::from_secs(1))
                .postgres_schema(schema.as_str())
                .connect_postgres(&url)
                .await
        })
    };
    let waiting = connect(a.clone());
    let other = connect(b.clone()).await.unwrap();
    assert!(other.is_ok(), "schema {b}: {:?}", other.err());
    // `a`'s client is blocked on the lock (seen by the server), and stays
    // so past its connect timeout.
    let blocked = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
         AND (classid::bigint << 32 | objid::bigint) = {hold}"
    );
    let queued = eventually(Duration::from_secs(10), || async {
        server.psql(&blocked) == "1"
    })
    .await;
    assert!(
        queued,
        "schema {a}'s client never waited for its migration's lock"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "schema {a} was created under the lock of its migration"
    );
    db.execute(&format!("SELECT pg_advisory_unlock({hold})"), &[])
        .await
        .unwrap();
    let created = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the migration ends once its lock is free")
        .unwrap();
    assert!(created.is_ok(), "schema {a}: {:?}", created.err());
}

/// A hot key's scans skip its dead holders: each cycle of a semaphore's
/// permit (a lock's holds are no rows) leaves an index entry of a deleted
/// holder row until a vacuum, and the functions' scans, plain (bitmap
/// scans off), mark those entries as they pass them, so the entries read
/// per scan stay flat over a run of cycles on one key instead of growing
/// with every cycle since the last vacuum. Counted by the server
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
    let sem = lg.semaphore("hot", 1).lease(Duration::from_secs(30));
    for _ in 0..CYCLES {
        let p = sem.try_acquire().await.expect("acquire");
        assert!(p.release().await.expect("release"));
    }
    drop(sem);
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
