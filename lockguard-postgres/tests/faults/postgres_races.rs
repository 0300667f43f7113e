//! Races on one PostgreSQL row, made deterministic: a raw connection holds
//! the row's lock (`SELECT ... FOR UPDATE`) while lockguard's operations
//! queue behind it in a known order, then lets them go. And a failover to
//! a stale standby, played by restoring an earlier dump of lockguard's
//! schema: what the promoted standby would hold.

use std::process::Command;
use std::time::Duration;

use lockguard_core::{Algorithm, Client, Quota};
use lockguard_postgres::BuilderExt as _;
use lockguard_postgres::tokio_postgres;
use lockguard_testing::{PostgresServer, postgres_bin_dir};

use lockguard_testing::conformance::eventually;

/// A client of the shared server on a schema of its own, so that the
/// statements it runs can be told apart in `pg_stat_activity`.
async fn client(schema: &str) -> Client {
    Client::builder()
        .response_timeout(Duration::from_secs(20))
        .postgres_schema(schema)
        .connect_postgres(&PostgresServer::shared().url())
        .await
        .expect("connect to postgres")
}

/// A raw connection to the shared server, outside any client.
async fn raw() -> tokio_postgres::Client {
    let (db, connection) =
        tokio_postgres::connect(&PostgresServer::shared().url(), tokio_postgres::NoTls)
            .await
            .expect("connect to postgres");
    tokio::spawn(connection);
    db
}

/// The store keys of the user's key `name`: its hash tag, with or without
/// a suffix (`:marks`).
fn like(name: &str) -> String {
    format!("%{{{name}}}%")
}

/// Opens a transaction on `db` that holds the lock of the one row of
/// `table` for the user's key `name`.
async fn lock_row(db: &tokio_postgres::Client, schema: &str, table: &str, name: &str) {
    db.batch_execute("BEGIN").await.unwrap();
    let rows = db
        .query(
            &format!("SELECT key FROM {schema}.{table} WHERE key LIKE $1 FOR UPDATE"),
            &[&like(name)],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "no row of {name:?} in {schema}.{table}");
}

/// Waits until `n` statements calling `function` of `schema` wait for a
/// lock (a row's or a key's): they are queued in the order they came.
/// (Asked on a connection of its own: inside a transaction,
/// `pg_stat_activity` shows the snapshot taken at its first read.)
async fn until_waiting(schema: &str, function: &str, n: i64) {
    let db = raw().await;
    let pattern = format!("%{schema}.{function}(%");
    let queued = eventually(Duration::from_secs(10), || async {
        let row = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) == n
    })
    .await;
    assert!(queued, "{n} calls of {function} never queued for the lock");
}

/// An increment waits for the counter's row; a compare-and-set on the
/// version before it comes after: the increment changed the version, so
/// the compare-and-set must fail (or, had it gone first, the increment
/// must add to what it set). It must never report success and then lose
/// the increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_and_set_never_overwrites_an_increment_it_waited_for() {
    let schema = "races_cas";
    let lg = client(schema).await;
    let c = lg.counter("cas-vs-incr");
    c.set(1).await.unwrap();
    let seen = c.get_versioned().await.unwrap().version;
    let db = raw().await;
    lock_row(&db, schema, "counters", "cas-vs-incr").await;
    let incr = tokio::spawn({
        let c = c.clone();
        async move { c.incr_by(5).await }
    });
    until_waiting(schema, "counter_add", 1).await;
    let cas = tokio::spawn({
        let c = c.clone();
        async move { c.compare_and_set(seen, 20).await }
    });
    until_waiting(schema, "counter_set", 1).await;
    db.batch_execute("COMMIT").await.unwrap();
    let incr = incr.await.unwrap().unwrap();
    let cas = cas.await.unwrap().unwrap();
    let value = c.get().await.unwrap();
    assert!(
        (!cas && incr == 6 && value == 6) || (cas && value == 25),
        "compare-and-set said {cas}, the increment {incr}, the counter holds {value}"
    );
}

/// A counter's first increment is still uncommitted (it made the row, in a
/// transaction not yet over) when a compare-and-set on version 0, which
/// found no row, goes to create it: it must wait for the increment and then
/// fail, not overwrite the row the increment made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_and_set_never_overwrites_a_first_increment() {
    let schema = "races_first";
    let lg = client(schema).await;
    let c = lg.counter("first");
    assert_eq!(c.get_versioned().await.unwrap().version, 0);
    let db = raw().await;
    db.batch_execute(&format!(
        "BEGIN; SELECT {schema}.counter_add('lockguard:counter:{{first}}', 5, 0)"
    ))
    .await
    .unwrap();
    let cas = tokio::spawn({
        let c = c.clone();
        async move { c.compare_and_set(0, 20).await }
    });
    until_waiting(schema, "counter_set", 1).await;
    db.batch_execute("COMMIT").await.unwrap();
    let cas = cas.await.unwrap().unwrap();
    let value = c.get().await.unwrap();
    assert!(
        !cas && value == 5,
        "compare-and-set said {cas}, the counter holds {value}"
    );
}

/// A decrement waits for the counter's row; a `decr_if_at_least` of the
/// whole stock comes after: the stock is never taken below zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_never_takes_stock_below_zero_behind_a_decrement() {
    let schema = "races_take";
    let lg = client(schema).await;
    let stock = lg.counter("stock");
    stock.set(5).await.unwrap();
    let db = raw().await;
    lock_row(&db, schema, "counters", "stock").await;
    let decr = tokio::spawn({
        let s = stock.clone();
        async move { s.decr_by(3).await }
    });
    until_waiting(schema, "counter_add", 1).await;
    let take = tokio::spawn({
        let s = stock.clone();
        async move { s.decr_if_at_least(5).await }
    });
    until_waiting(schema, "counter_take", 1).await;
    db.batch_execute("COMMIT").await.unwrap();
    let decr = decr.await.unwrap().unwrap();
    let take = take.await.unwrap().unwrap();
    let value = stock.get().await.unwrap();
    assert!(
        (take.is_none() && decr == 2 && value == 2) || (take == Some(0) && value == -3),
        "the take said {take:?}, the decrement {decr}, the stock holds {value}"
    );
}

/// Two increments and a set queue behind the row: each sees the one before
/// it, and every version is greater than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_counter_updates_keep_every_update_and_versions_in_order() {
    let schema = "races_queue";
    let lg = client(schema).await;
    let c = lg.counter("queued");
    c.set(10).await.unwrap();
    let before = c.get_versioned().await.unwrap().version;
    let db = raw().await;
    lock_row(&db, schema, "counters", "queued").await;
    let mut tasks = Vec::new();
    for (i, n) in [1i64, 2, 4].into_iter().enumerate() {
        let c = c.clone();
        tasks.push(tokio::spawn(async move { c.incr_by(n).await }));
        until_waiting(schema, "counter_add", i64::try_from(i).unwrap() + 1).await;
    }
    db.batch_execute("COMMIT").await.unwrap();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen.last(), Some(&17), "an increment was lost: {seen:?}");
    let after = c.get_versioned().await.unwrap();
    assert_eq!(after.value, 17);
    assert!(after.version > before, "{} after {before}", after.version);
}

/// A fixed window that ends while a request waits for its row, and is
/// swept meanwhile: the request is decided (in a new window), not failed
/// with a reply it cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_swept_under_a_waiting_request_still_decides() {
    let schema = "races_fixed";
    let lg = client(schema).await;
    let limiter = lg
        .rate_limiter("fw", Quota::new(2, Duration::from_millis(500)))
        .algorithm(Algorithm::FixedWindow);
    assert!(limiter.check("swept").await.unwrap().allowed);
    let db = raw().await;
    lock_row(&db, schema, "limits", "swept").await;
    let check = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.check("swept").await }
    });
    until_waiting(schema, "fixed_window", 1).await;
    until_expired(&db, schema, "limits", "swept").await;
    let swept: i64 = db
        .query_one(&format!("SELECT {schema}.sweep()"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(swept >= 1, "the sweep removed nothing");
    db.batch_execute("COMMIT").await.unwrap();
    let d = check.await.unwrap().expect("the request failed");
    assert!(d.allowed, "{d:?}");
}

/// A sliding window that ends while a request waits for its row, and is
/// swept meanwhile (its running sum and its log): the sum afterwards is
/// what the log holds, so the next request is counted against the one
/// request left in the window, not against the requests swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_swept_under_a_waiting_request_keeps_its_sum() {
    let schema = "races_sliding";
    let lg = client(schema).await;
    let limiter = lg
        .rate_limiter("sw", Quota::new(3, Duration::from_millis(500)))
        .algorithm(Algorithm::SlidingWindow);
    for _ in 0..2 {
        assert!(limiter.check("swept").await.unwrap().allowed);
    }
    let db = raw().await;
    lock_row(&db, schema, "limits", "swept").await;
    let check = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.check("swept").await }
    });
    until_waiting(schema, "sliding_window", 1).await;
    until_expired(&db, schema, "limits", "swept").await;
    db.query_one(&format!("SELECT {schema}.sweep()"), &[])
        .await
        .unwrap();
    db.batch_execute("COMMIT").await.unwrap();
    let third = check.await.unwrap().expect("the request failed");
    assert!(third.allowed, "{third:?}");
    // One request (the third) is in the window: two more fit.
    let fourth = limiter.check("swept").await.unwrap();
    assert!(
        fourth.allowed && fourth.remaining == 1,
        "requests swept with their window still count: {fourth:?}"
    );
}

/// Waits (on `db`, also inside its transaction) until the rows of `table`
/// for the user's key `name` have expired by the database's clock.
async fn until_expired(db: &tokio_postgres::Client, schema: &str, table: &str, name: &str) {
    let over = eventually(Duration::from_secs(10), || async {
        db.query_one(
            &format!(
                "SELECT bool_and(expires_at < clock_timestamp()) FROM {schema}.{table} \
                 WHERE key LIKE $1"
            ),
            &[&like(name)],
        )
        .await
        .unwrap()
        .get::<_, Option<bool>>(0)
        .unwrap_or(false)
    })
    .await;
    assert!(over, "the state of {name:?} in {table} never expired");
}

/// A set of marks that expired is begun again by a mark that waits for its
/// row while the sweep removes it: the mark lands in a set that stays, so
/// the member is new once, not twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_on_a_set_swept_under_it_is_new_once() {
    let schema = "races_marks";
    let lg = client(schema).await;
    let promo = lg.counter("promo").expire_after(Duration::from_millis(300));
    assert!(promo.mark_once("alice").await.unwrap());
    let db = raw().await;
    lock_row(&db, schema, "mark_sets", "promo").await;
    until_expired(&db, schema, "mark_sets", "promo").await;
    let mark = tokio::spawn({
        let promo = promo.clone();
        async move { promo.mark_once("alice").await }
    });
    until_waiting(schema, "mark_once", 1).await;
    db.query_one(&format!("SELECT {schema}.sweep()"), &[])
        .await
        .unwrap();
    db.batch_execute("COMMIT").await.unwrap();
    assert!(
        mark.await.unwrap().unwrap(),
        "alice is new in the set begun again"
    );
    assert!(
        !promo.mark_once("alice").await.unwrap(),
        "alice was new twice in one set"
    );
}

/// Runs `program` of PostgreSQL's against `server`, returning its output.
fn pg_tool(server: &PostgresServer, program: &str, args: &[&str]) -> String {
    let out = Command::new(postgres_bin_dir().join(program))
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
        .args(["-p", &server.port().to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The lease of the failover tests' locks: the wait after a failover (no
/// lock is taken anew until the longest lease any lock took has passed)
/// is this long.
const LEASE: Duration = Duration::from_millis(500);

/// The lock "failover" taken on `lg` once the wait after the failover at
/// `promoted` (the lease of [`LEASE`], counted from the first lock session
/// on the promoted server) is over, and not before.
async fn taken_after_the_wait(
    lg: &Client,
    promoted: std::time::Instant,
) -> lockguard_core::LockGuard {
    let g = lg
        .lock("failover")
        .lease(LEASE)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(
        promoted.elapsed() >= LEASE - Duration::from_millis(50),
        "taken {:?} after the failover, inside the lease of {LEASE:?} its holder may have had",
        promoted.elapsed()
    );
    g
}

/// The newest fencing token of a semaphore (a permit does not show its
/// own).
async fn sem_fence(sem: &lockguard_core::Semaphore) -> u64 {
    let now = sem.inspect().await.unwrap();
    now.latest_fence.expect("a permit was taken").get()
}

/// A failover to an asynchronous standby that had not seen the latest
/// writes leaves lockguard's tables and sequences as they were some time
/// before, and its unlogged tables (a lock's newest tokens, `lock_fences`)
/// empty (here: restored from a dump taken then, without the unlogged
/// tables' rows). Fencing tokens and counter versions handed out after the
/// dump must not come again: the next ones are greater than every one
/// before, for a lock, a semaphore and a counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_versions_keep_growing_after_a_failover_to_a_stale_standby() {
    let server = PostgresServer::start();
    let connect = || async {
        Client::builder()
            .response_timeout(Duration::from_secs(5))
            .connect_postgres(&server.url())
            .await
            .expect("connect to postgres")
    };
    let lg = connect().await;
    let (lock, sem, counter) = (
        lg.lock("failover").lease(LEASE),
        lg.semaphore("failover-sem", 2),
        lg.counter("failover-counter"),
    );
    let mut newest = (0u64, 0u64, 0u64);
    let round = async |n: usize, newest: &mut (u64, u64, u64)| {
        for _ in 0..n {
            let g = lock.try_acquire().await.unwrap();
            newest.0 = newest.0.max(g.fencing_token().get());
            assert!(g.release().await.unwrap());
            let p = sem.try_acquire().await.unwrap();
            newest.1 = newest.1.max(sem_fence(&sem).await);
            assert!(p.release().await.unwrap());
            counter.incr_by(1).await.unwrap();
            newest.2 = newest.2.max(counter.get_versioned().await.unwrap().version);
        }
    };
    round(3, &mut newest).await;
    // What the standby has: everything logged up to here.
    let standby = pg_tool(
        &server,
        "pg_dump",
        &[
            "-n",
            "lockguard",
            "--clean",
            "--if-exists",
            "--no-unlogged-table-data",
        ],
    );
    // More than a sequence logs ahead (32 values) happen after it.
    round(40, &mut newest).await;
    drop((lock, sem, counter, lg));
    // The standby is promoted.
    server.psql(&standby);
    let promoted = std::time::Instant::now();
    let lg = connect().await;
    let g = taken_after_the_wait(&lg, promoted).await;
    assert!(
        g.fencing_token().get() > newest.0,
        "lock token {} after {} was handed out",
        g.fencing_token().get(),
        newest.0
    );
    // Released at once: the lease is a fixed 500 ms, and the round trips
    // below, the first a freshly promoted server answers, may outlast it.
    assert!(g.release().await.unwrap());
    let sem = lg.semaphore("failover-sem", 2);
    let p = sem.try_acquire().await.unwrap();
    let fence = sem_fence(&sem).await;
    assert!(
        fence > newest.1,
        "semaphore token {fence} after {} was handed out",
        newest.1
    );
    let c = lg.counter("failover-counter");
    c.incr_by(1).await.unwrap();
    let version = c.get_versioned().await.unwrap().version;
    assert!(
        version > newest.2,
        "counter version {version} after {} was seen",
        newest.2
    );
    assert!(p.release().await.unwrap());
}

/// Moves the newest token or version `column` of `key` in `table` an hour
/// ahead, as a clock stepped back an hour would leave it; the value it
/// then holds.
async fn an_hour_ahead(
    db: &tokio_postgres::Client,
    schema: &str,
    table: &str,
    column: &str,
    key: &str,
) -> u64 {
    let ahead: i64 = db
        .query_one(
            &format!(
                "UPDATE {schema}.{table} SET {column} = {column} + 3600000000 \
                 WHERE key = $1 RETURNING {column}"
            ),
            &[&key],
        )
        .await
        .unwrap_or_else(|e| panic!("no {key:?} in {schema}.{table}: {e}"))
        .get(0);
    u64::try_from(ahead).unwrap()
}

/// The database's clock stepped back (played by moving a key's newest token
/// and a counter's version an hour ahead of it): the key remembers, and the
/// next token and version are still greater. A lock's newest token is in
/// `lock_fences`, a semaphore's in `latest_fences`; a lock not taken since
/// its schema became version 8 has its newest token in `latest_fences`,
/// and its first token of version 8 is greater too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_versions_stay_above_what_the_key_remembers() {
    let schema = "races_clock";
    let lg = client(schema).await;
    let lock = lg.lock("stepped");
    let held = lock.try_acquire().await.unwrap();
    let first = held.fencing_token().get();
    assert!(held.release().await.unwrap());
    let sem = lg.semaphore("stepped", 1);
    let p = sem.try_acquire().await.unwrap();
    assert!(p.release().await.unwrap());
    let c = lg.counter("stepped");
    c.incr_by(1).await.unwrap();
    let db = raw().await;
    let lock_ahead = an_hour_ahead(
        &db,
        schema,
        "lock_fences",
        "fence",
        "lockguard:lock:{stepped}",
    )
    .await;
    assert!(lock_ahead > first);
    let sem_ahead = an_hour_ahead(
        &db,
        schema,
        "latest_fences",
        "fence",
        "lockguard:sem:{stepped}",
    )
    .await;
    let version_ahead = an_hour_ahead(
        &db,
        schema,
        "counters",
        "version",
        "lockguard:counter:{stepped}",
    )
    .await;
    // What version 7 left of a lock it took last.
    let v7_ahead: i64 = db
        .query_one(
            &format!(
                "INSERT INTO {schema}.latest_fences (key, fence) \
                 VALUES ($1, {schema}.now_us() + 3600000000) RETURNING fence"
            ),
            &[&"lockguard:lock:{stepped-v7}"],
        )
        .await
        .unwrap()
        .get(0);
    let v7_ahead = u64::try_from(v7_ahead).unwrap();

    let g = lock.try_acquire().await.unwrap();
    assert!(
        g.fencing_token().get() > lock_ahead,
        "lock token {} after {lock_ahead}",
        g.fencing_token().get()
    );
    let p = sem.try_acquire().await.unwrap();
    assert!(
        p.fencing_token().get() > sem_ahead,
        "semaphore token {} after {sem_ahead}",
        p.fencing_token().get()
    );
    c.incr_by(1).await.unwrap();
    let version = c.get_versioned().await.unwrap().version;
    assert!(
        version > version_ahead,
        "version {version} after {version_ahead}"
    );
    let v7 = lg.lock("stepped-v7").try_acquire().await.unwrap();
    assert!(
        v7.fencing_token().get() > v7_ahead,
        "first lock token {} of version 8 after {v7_ahead} of version 7",
        v7.fencing_token().get()
    );
    assert!(g.release().await.unwrap());
    assert!(p.release().await.unwrap());
    assert!(v7.release().await.unwrap());
}

/// A real failover to an asynchronous standby that missed the latest
/// writes: the standby is stopped while the primary hands out more tokens
/// and versions than a sequence logs ahead (32), then the primary dies and
/// the standby is promoted, with no lock's newest token (`lock_fences` is
/// unlogged, empty on a promoted standby). The next token of the lock and
/// version of the counter are greater than every one handed out before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_versions_keep_growing_after_a_real_failover() {
    let mut primary = PostgresServer::start();
    let connect = |url: String| async move {
        Client::builder()
            .response_timeout(Duration::from_secs(5))
            .connect_postgres(&url)
            .await
            .expect("connect to postgres")
    };
    let lg = connect(primary.url()).await;
    let (lock, counter) = (
        lg.lock("failover").lease(LEASE),
        lg.counter("failover-counter"),
    );
    let mut newest = (0u64, 0u64);
    let round = async |n: usize, newest: &mut (u64, u64)| {
        for _ in 0..n {
            let g = lock.try_acquire().await.unwrap();
            newest.0 = newest.0.max(g.fencing_token().get());
            assert!(g.release().await.unwrap());
            counter.incr_by(1).await.unwrap();
            newest.1 = newest.1.max(counter.get_versioned().await.unwrap().version);
        }
    };
    round(3, &mut newest).await;
    let mut standby = primary.start_standby();
    // The standby has replayed everything so far.
    let lsn = primary.psql("SELECT pg_current_wal_lsn()");
    let caught_up = eventually(Duration::from_secs(20), || async {
        standby.psql(&format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'")) == "t"
    })
    .await;
    assert!(caught_up, "the standby never caught up");
    standby.kill();
    round(40, &mut newest).await;
    drop((lock, counter, lg));
    primary.kill();
    standby.restart();
    standby.promote();
    let promoted = std::time::Instant::now();
    let lg = connect(standby.url()).await;
    let g = taken_after_the_wait(&lg, promoted).await;
    assert!(
        g.fencing_token().get() > newest.0,
        "lock token {} after {} was handed out",
        g.fencing_token().get(),
        newest.0
    );
    // Released at once, as above.
    assert!(g.release().await.unwrap());
    let c = lg.counter("failover-counter");
    c.incr_by(1).await.unwrap();
    let version = c.get_versioned().await.unwrap().version;
    assert!(
        version > newest.1,
        "counter version {version} after {} was seen",
        newest.1
    );
}
