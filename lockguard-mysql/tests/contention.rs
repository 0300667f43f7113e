//! A measurement, not a test (run with `--ignored --nocapture`): the
//! statements clients send per acquisition when 8 clients, each with its
//! own connection pool, contend for one lock: lockguard's queue with bell
//! wake-ups against a raw loop that polls with `SELECT ... FOR UPDATE`.

use lockguard_mysql::ClientExt as _;
use std::collections::HashMap;
use std::error::Error as _;
use std::time::{Duration, Instant};

use lockguard_core::Client;
use lockguard_testing::MariaDbServer;
use mysql_async::prelude::Queryable;

const CLIENTS: usize = 8;
const ROUNDS: usize = 40;
/// How long each holder keeps the lock.
const HOLD: Duration = Duration::from_millis(2);

/// The server's statement counters: `Questions` counts the statements
/// clients send (a `CALL` once, whatever it runs); `Queries` also counts
/// those run inside procedures.
fn status(server: &MariaDbServer) -> HashMap<String, i64> {
    server
        .sql(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Questions', 'Queries', 'Com_call_procedure', 'Com_select', 'Com_kill')",
        )
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn report(what: &str, server: &MariaDbServer, before: &HashMap<String, i64>, took: Duration) {
    let after = status(server);
    let n = (CLIENTS * ROUNDS) as f64;
    let per = |k: &str| (after[k] - before[k]) as f64 / n;
    println!(
        "{what}: {:.1} statements sent per acquisition ({:.1} run, incl. inside procedures; \
         CALL {:.1}, SELECT {:.1}, KILL {:.2}); {:.2} ms per acquisition",
        per("Questions"),
        per("Queries"),
        per("Com_call_procedure"),
        per("Com_select"),
        per("Com_kill"),
        took.as_secs_f64() * 1000.0 / n
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn statements_per_acquisition_under_contention() {
    let server = MariaDbServer::start();
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            lockguard_core::Client::connect_mysql(&server.url())
                .await
                .unwrap(),
        );
    }
    // Each client's pool, statements and bell, set up before counting.
    let warm = clients[0].lock("contended").acquire().await.unwrap();
    let mut waiting = Vec::new();
    for lg in &clients[1..] {
        let lg = lg.clone();
        waiting.push(tokio::spawn(async move {
            let g = lg.lock("contended").acquire().await.unwrap();
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    warm.release().await.unwrap();
    for w in waiting {
        w.await.unwrap();
    }

    let before = status(&server);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let per_client: usize = std::env::var("TASKS_PER_CLIENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for lg in clients.iter().cycle().take(CLIENTS * per_client) {
        let lg = lg.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS / per_client {
                let g = lg
                    .lock("contended")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                tokio::time::sleep(HOLD).await;
                assert!(g.release().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    report(
        "lockguard (queue + bell)",
        &server,
        &before,
        started.elapsed(),
    );

    for poll in [Duration::from_millis(10), Duration::from_millis(50)] {
        raw_polling(&server, poll).await;
    }
}

/// The raw loop: each attempt is a transaction that locks the lock's row
/// with `SELECT ... FOR UPDATE` and takes it when free; a busy lock is
/// tried again `poll` later.
async fn raw_polling(server: &MariaDbServer, poll: Duration) {
    let mut setup = mysql_async::Conn::new(mysql_async::Opts::from_url(&server.url()).unwrap())
        .await
        .unwrap();
    setup
        .query_drop(
            "CREATE TABLE IF NOT EXISTS raw_locks (k VARCHAR(64) PRIMARY KEY, \
             holder VARCHAR(64) NULL, expires DATETIME(6) NULL) ENGINE=InnoDB",
        )
        .await
        .unwrap();
    setup
        .query_drop("INSERT IGNORE INTO raw_locks (k) VALUES ('contended')")
        .await
        .unwrap();
    let pools: Vec<mysql_async::Pool> = (0..CLIENTS)
        .map(|_| mysql_async::Pool::new(server.url().as_str()))
        .collect();
    let before = status(server);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let me = format!("client{i}");
            for _ in 0..ROUNDS {
                loop {
                    let mut conn = pool.get_conn().await.unwrap();
                    conn.query_drop("START TRANSACTION").await.unwrap();
                    let row: Option<(Option<String>, i64)> = conn
                        .query_first(
                            "SELECT holder, COALESCE(expires > NOW(6), 0) FROM raw_locks \
                             WHERE k = 'contended' FOR UPDATE",
                        )
                        .await
                        .unwrap();
                    let free = matches!(row, Some((None, _)) | Some((_, 0)));
                    if free {
                        conn.exec_drop(
                            "UPDATE raw_locks SET holder = ?, \
                             expires = NOW(6) + INTERVAL 10 SECOND WHERE k = 'contended'",
                            (&me,),
                        )
                        .await
                        .unwrap();
                    }
                    conn.query_drop("COMMIT").await.unwrap();
                    if free {
                        break;
                    }
                    drop(conn);
                    tokio::time::sleep(poll).await;
                }
                tokio::time::sleep(HOLD).await;
                let mut conn = pool.get_conn().await.unwrap();
                conn.exec_drop(
                    "UPDATE raw_locks SET holder = NULL WHERE k = 'contended' AND holder = ?",
                    (&me,),
                )
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    report(
        &format!("raw SELECT ... FOR UPDATE polling every {poll:?}"),
        server,
        &before,
        started.elapsed(),
    );
}

/// How long each side runs per round of the uncontended measurement.
const RUN_FOR: Duration = Duration::from_secs(2);

/// Runs `tasks` loops of `cycle` (given the task's number and its cycle
/// count) for [`RUN_FOR`]; the cycles completed per second.
async fn cycles_per_second<F, Fut>(tasks: usize, cycle: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let mut running = Vec::new();
    for t in 0..tasks {
        let cycle = cycle.clone();
        running.push(tokio::spawn(async move {
            let mut n = 0u64;
            while started.elapsed() < RUN_FOR {
                cycle(t, n).await;
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for r in running {
        total += r.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Uncontended lock + unlock cycles (a key per task) through lockguard and
/// through raw `mysql_async` sending the same two procedure calls over the
/// same kind of pool, each side run twice, alternately; the ratio, and the
/// statements each lockguard cycle sent (`Questions`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn uncontended_cycles_beside_raw_mysql_async() {
    let server = MariaDbServer::start();
    let lg = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    // A pool set up as lockguard's own: 16 connections kept for a minute,
    // not reset when handed back, the same session settings.
    let pool = mysql_async::Pool::new(
        mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&server.url()).unwrap())
            .tcp_nodelay(true)
            .setup(vec![
                "SET time_zone = '+00:00'".to_owned(),
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
            ])
            .pool_opts(
                mysql_async::PoolOpts::default()
                    .with_constraints(mysql_async::PoolConstraints::new(0, 16).unwrap())
                    .with_inactive_connection_ttl(Duration::from_secs(60))
                    .with_reset_connection(false),
            ),
    );
    let failures = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for tasks in [1usize, 16] {
        let (mut ours, mut raw) = (0.0, 0.0);
        let mut statements = 0.0;
        for _ in 0..2 {
            let before = status(&server);
            let started = Instant::now();
            let client = lg.clone();
            let failed = failures.clone();
            let rate = cycles_per_second(tasks, move |t, _| {
                let lock = client.lock(&format!("u:{t}"));
                let failed = failed.clone();
                async move {
                    let released = match lock.try_acquire().await {
                        Ok(g) => g.release().await.map(drop),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = released {
                        failed
                            .lock()
                            .unwrap()
                            .push(format!("{e}: {:?}", e.source()));
                    }
                }
            })
            .await;
            let cycles = rate * started.elapsed().as_secs_f64();
            statements +=
                (status(&server)["Questions"] - before["Questions"]) as f64 / cycles / 2.0;
            ours += rate / 2.0;
            let pool = pool.clone();
            raw += cycles_per_second(tasks, move |t, n| {
                let pool = pool.clone();
                async move {
                    let key = format!("raw:u:{t}");
                    let token = format!("{t}-{n}");
                    let mut conn = pool.get_conn().await.unwrap();
                    let (taken, _fence): (i64, Option<i64>) = conn
                        .exec_first(
                            "CALL lockguard_acquire(?, ?, ?, ?, ?, ?, ?)",
                            (
                                &key,
                                &token,
                                30_000i64,
                                1i32,
                                None::<i64>,
                                None::<String>,
                                None::<i64>,
                            ),
                        )
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(taken, 1);
                    drop(conn);
                    let mut conn = pool.get_conn().await.unwrap();
                    let held: i64 = conn
                        .exec_first("CALL lockguard_release(?, ?, ?)", (&key, &token, 1i32))
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(held, 1);
                }
            })
            .await
                / 2.0;
        }
        let failed = failures.lock().unwrap().clone();
        if !failed.is_empty() {
            let status = server.sql("SHOW ENGINE INNODB STATUS");
            let deadlock = status
                .split("LATEST DETECTED DEADLOCK")
                .nth(1)
                .and_then(|d| d.split("TRANSACTIONS\\n").next())
                .unwrap_or(&status);
            panic!(
                "{} of the releases failed, first {:?}; the server's latest deadlock:\n{}",
                failed.len(),
                failed[0],
                deadlock.replace("\\n", "\n")
            );
        }
        println!(
            "uncontended, {tasks} tasks: lockguard {ours:.0} cycles/s, raw mysql_async {raw:.0} \
             cycles/s, ratio {:.2}x; {statements:.2} statements sent per lockguard cycle",
            ours / raw
        );
    }
}
