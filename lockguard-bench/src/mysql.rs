//! The MySQL/MariaDB store beside raw `mysql_async` sending the same
//! procedure calls, and beside the server's own user locks (`GET_LOCK` /
//! `RELEASE_LOCK`), waiting in the server or polled, against a MariaDB
//! server the harness starts.
//!
//! Statements are counted by the server: `Questions` in `SHOW GLOBAL
//! STATUS` counts the statements clients send (a `CALL` once, whatever it
//! runs inside).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use lockguard_mysql::{LockLeases, MySqlBuilder};
use lockguard_testing::MariaDbServer;

use crate::raw_mysql;
use crate::rounds::{Spread, turning};
use crate::stats::{percentile, us};
use crate::{Bench, Contention, HOLD, Recorder, THINK, contend, hold, median, throughput};

/// Rounds of the uncontended comparison, as on the other stores.
const UNCONTENDED_ROUNDS: usize = 7;
/// Rounds of the contention comparison: each a run of every variant.
const CONTENTION_ROUNDS: usize = 3;
/// How long a polling contender sleeps after a failed `GET_LOCK(name, 0)`
/// (a tokio timer: rounded up to the runtime's millisecond ticks).
const POLL: Duration = Duration::from_millis(1);
/// The user lock the raw contenders take.
const USER_LOCK: &str = "raw:contended";

async fn lockguard(server: &MariaDbServer) -> Client {
    lockguard_of(server, LockLeases::Recorded).await
}

/// A lockguard client whose locks' leases are `leases`.
async fn lockguard_of(server: &MariaDbServer, leases: LockLeases) -> Client {
    MySqlBuilder::new(Client::builder())
        .lock_leases(leases)
        .connect_mysql(&server.url())
        .await
        .expect("connect to mysql")
}

/// The statements clients have sent so far (`Questions`; the harness's
/// own query of it counts too, one per call).
fn questions(server: &MariaDbServer) -> u64 {
    server
        .sql("SHOW GLOBAL STATUS LIKE 'Questions'")
        .split_once('\t')
        .and_then(|(_, n)| n.trim().parse().ok())
        .expect("Questions")
}

/// The MySQL section: a MariaDB server of its own, the uncontended cycles,
/// then the contention.
pub(crate) async fn section(b: &mut Bench) {
    let server = MariaDbServer::start();
    // The schema, created once.
    drop(lockguard(&server).await);
    let version = server.sql("SELECT VERSION()");
    b.line(
        "\n## MySQL/MariaDB: lockguard beside raw `mysql_async` and the server's own user locks\n",
    );
    b.line(&format!("A MariaDB server ({version}) the harness starts (`lockguard_testing::MariaDbServer`: `--skip-log-bin`, `--innodb-flush-log-at-trx-commit=2`, `--innodb-doublewrite=0`, a 32 MB buffer pool), on loopback TCP. lockguard connects with `Client::connect_mysql`; its locks are the server's user locks, each held on a session of the client's own (kept idle for later holds), with the fencing token and lease in a MEMORY table (the default, recorded leases), or, with session leases (`LockLeases::Session`), nothing recorded: a try is one statement, `GET_LOCK` and the next value of a sequence, a release the bare `RELEASE_LOCK`. Two yardsticks: raw `mysql_async` sending the same `CALL lockguard_lock_try(...)` / `CALL lockguard_lock_release(...)` on one pooled connection per cycle (a pool set up as lockguard's: 16 connections, not reset when handed back, the same session settings, statements prepared once per connection), and the server's native user locks, `GET_LOCK(name, timeout)` / `RELEASE_LOCK(name)`. Statements are the server's `Questions` (what clients send; a `CALL` counts once), over the whole of each run, warm-up and connecting included (a connection's three session settings, a lockguard client's schema check).\n"));
    uncontended(b, &server).await;
    contention(b, &server).await;
}

/// The uncontended variants, in the table's order.
const UNCONTENDED: [&str; 4] = [
    "lockguard",
    "raw `mysql_async`, the same calls",
    "`GET_LOCK`/`RELEASE_LOCK`",
    "lockguard, session leases",
];

async fn uncontended(b: &mut Bench, server: &MariaDbServer) {
    let rounds = if b.quick { 1 } else { UNCONTENDED_ROUNDS };
    let each = b.run_for / 2;
    b.line("### Uncontended lock + unlock cycles (distinct keys)\n");
    b.line(&format!(
        "{rounds} rounds; in each, for each number of tasks, lockguard (recorded leases), raw `mysql_async` sending the same two calls, the native `GET_LOCK(name, 0)` + `RELEASE_LOCK(name)` (both on one pooled connection, as a user lock belongs to its session), and lockguard with session leases (a client of its own) run for {each:?} each (after a {:?} warm-up), one after the other, the order turning by one each round. Every run takes keys no run took before. Ratios are medians over the rounds of lockguard's rate divided by the other's in the same round, with the lowest and highest. One lockguard client and one raw pool serve every round; statements per cycle are over every round, warm-ups included.\n",
        each / 5
    ));
    b.line("| tasks | lockguard cycles/s (median) | raw same calls (median) | `GET_LOCK` (median) | ratio to raw same calls | range | ratio to `GET_LOCK` | range | session leases cycles/s (median) | session leases ratio to `GET_LOCK` | range | statements / cycle, lockguard / raw / `GET_LOCK` / session leases |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let lg = lockguard(server).await;
    let lg_session = lockguard_of(server, LockLeases::Session).await;
    let pool = raw_mysql::pool(&server.url());
    for tasks in [1, 16] {
        // Statements and cycles, each variant's, over every round.
        let sent: [AtomicU64; 4] = Default::default();
        let cycles: [Arc<AtomicU64>; 4] = Default::default();
        let rates = turning(rounds, UNCONTENDED.len(), async |round, variant| {
            let before = questions(server);
            let counted = cycles[variant].clone();
            let rate = throughput(tasks, each, |t, stop, done| {
                let counted = counted.clone();
                let key = format!("r{round}:{tasks}:u:{t}");
                let lock = lg.lock(&key).lease(Duration::from_secs(30));
                let session_lock = lg_session.lock(&key).lease(Duration::from_secs(30));
                let pool = pool.clone();
                async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        match variant {
                            0 => {
                                let g = lock.try_acquire().await.expect("uncontended acquire");
                                assert!(g.release().await.expect("release"));
                            }
                            1 => {
                                let (key, token) = (format!("raw:{key}"), format!("{t}-{n}"));
                                let mut conn = pool.get_conn().await.expect("connection");
                                assert!(raw_mysql::try_lock(&mut conn, &key, &token).await);
                                raw_mysql::unlock(&mut conn, &key, &token).await;
                            }
                            2 => {
                                let key = format!("user:{key}");
                                let mut conn = pool.get_conn().await.expect("connection");
                                assert!(raw_mysql::get_lock(&mut conn, &key, 0).await);
                                raw_mysql::release_lock(&mut conn, &key).await;
                            }
                            _ => {
                                let g = session_lock
                                    .try_acquire()
                                    .await
                                    .expect("uncontended acquire");
                                assert!(g.release().await.expect("release"));
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .await;
            sent[variant].fetch_add(questions(server) - before, Ordering::Relaxed);
            rate
        })
        .await;
        let per = |v: usize| {
            sent[v].load(Ordering::Relaxed) as f64 / cycles[v].load(Ordering::Relaxed).max(1) as f64
        };
        let against =
            |v: usize| Spread::of(rates[0].iter().zip(&rates[v]).map(|(l, r)| l / r).collect());
        let (raw, native) = (against(1), against(2));
        let session = Spread::of(rates[3].iter().zip(&rates[2]).map(|(l, r)| l / r).collect());
        b.line(&format!(
            "| {tasks} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {:.0} | {} | {} | {:.2} / {:.2} / {:.2} / {:.2} |",
            median(rates[0].clone()),
            median(rates[1].clone()),
            median(rates[2].clone()),
            raw.cell(),
            raw.range_cell(),
            native.cell(),
            native.range_cell(),
            median(rates[3].clone()),
            session.cell(),
            session.range_cell(),
            per(0),
            per(1),
            per(2),
            per(3),
        ));
        b.target(
            &format!(
                "mysql: uncontended lock cycles ≥ 0.5x native `GET_LOCK`/`RELEASE_LOCK`, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            native.to_string(),
            native.median >= 0.5,
        );
        b.target(
            &format!(
                "mysql: session leases, uncontended lock cycles ≥ 0.5x native `GET_LOCK`/`RELEASE_LOCK`, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            session.to_string(),
            session.median >= 0.5,
        );
    }
}

/// The contention variants, in the table's order.
const CONTENDED: [&str; 4] = [
    "lockguard",
    "`GET_LOCK(name, 60)`, waiting in the server",
    "polling `GET_LOCK(name, 0)`",
    "lockguard, session leases",
];

/// One contention run: what the contenders did, and the statements the
/// server counted per acquisition.
struct Run {
    c: Contention,
    per: f64,
}

async fn contention(b: &mut Bench, server: &MariaDbServer) {
    let rounds = if b.quick { 1 } else { CONTENTION_ROUNDS };
    let run_for = b.run_for;
    b.line(&format!(
        "\n### Contention: contenders on one key, each with a client of its own, holding it {HOLD:?} and thinking {THINK:?}\n"
    ));
    b.line(&format!("*lockguard*: each contender builds its own client (its own pool and lock sessions), as separate processes do; a waiter waits in the server's `GET_LOCK` on a session of its own, granted by the release in queue order, then draws its fencing token in the same call. *lockguard, session leases*: the same, each contender a client of `LockLeases::Session` (a hold records nothing: the wait is `GET_LOCK` and the sequence's next value in one statement, the release the bare `RELEASE_LOCK`). *`GET_LOCK`*: each contender a connection of its own, `SELECT GET_LOCK('{USER_LOCK}', 60)` waiting in the server, hold, `SELECT RELEASE_LOCK(...)`. *polling*: the same connections, `SELECT GET_LOCK('{USER_LOCK}', 0)` and, when refused, a {POLL:?} tokio sleep before trying again. Every variant holds the lock {HOLD:?} (a blocking sleep on tokio's blocking pool) and thinks {THINK:?} after each release. Handoff: from the holder's release call to the next different holder's acquire returning. {rounds} rounds of {run_for:?} runs (after a {:?} warm-up), on fresh clients and connections each run, every variant once a round, the order turning by one each round; each figure is the median over the rounds, and the ratios (the row's acquisitions/s, and its handoff p50, over `GET_LOCK`'s in the same round) come with their range. Min/max: the fewest acquisitions of any contender over the most.\n", run_for / 5));
    b.line("| contenders | variant | acquisitions/s | ratio to `GET_LOCK` (range) | handoff p50 | p50 ratio to `GET_LOCK` (range) | handoff p99 | statements / acquisition | min/max per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let url = server.url();
    for tasks in [4, 16, 64] {
        let runs = turning(rounds, CONTENDED.len(), async |_, variant| {
            if variant == 0 || variant == 3 {
                let leases = if variant == 3 {
                    LockLeases::Session
                } else {
                    LockLeases::Recorded
                };
                let before = questions(server);
                let mut clients = Vec::new();
                for _ in 0..tasks {
                    clients.push(lockguard_of(server, leases).await);
                }
                let c = contend(&clients, tasks, run_for).await;
                drop(clients);
                let per = (questions(server) - before) as f64 / c.acquisitions.max(1) as f64;
                return Run { c, per };
            }
            let wait = variant == 1;
            let before = questions(server);
            let mut conns = Vec::new();
            for _ in 0..tasks {
                conns.push(Some(raw_mysql::connect(&url).await));
            }
            let conns: Vec<_> = conns.into_iter().map(std::sync::Mutex::new).collect();
            let conns = Arc::new(conns);
            let rec = Recorder::new(tasks);
            let rate = throughput(tasks, run_for, |t, stop, done| {
                let mut conn = conns[t].lock().unwrap().take().expect("a connection");
                let (rec, conns) = (rec.clone(), conns.clone());
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        if wait {
                            assert!(raw_mysql::get_lock(&mut conn, USER_LOCK, 60).await);
                        } else {
                            while !raw_mysql::get_lock(&mut conn, USER_LOCK, 0).await {
                                if stop.load(Ordering::Relaxed) {
                                    *conns[t].lock().unwrap() = Some(conn);
                                    return;
                                }
                                tokio::time::sleep(POLL).await;
                            }
                        }
                        rec.acquired(t);
                        hold().await;
                        rec.releasing(t);
                        raw_mysql::release_lock(&mut conn, USER_LOCK).await;
                        done.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(THINK).await;
                    }
                    *conns[t].lock().unwrap() = Some(conn);
                }
            })
            .await;
            for conn in conns.iter() {
                let conn = conn.lock().unwrap().take();
                if let Some(conn) = conn {
                    conn.disconnect().await.expect("disconnect");
                }
            }
            let c = rec.finish(rate);
            let per = (questions(server) - before) as f64 / c.acquisitions.max(1) as f64;
            Run { c, per }
        })
        .await;
        let p50 = |r: &Run| percentile(&r.c.handoffs, 50.0).as_secs_f64();
        let p99 = |r: &Run| percentile(&r.c.handoffs, 99.0).as_secs_f64();
        let against = |v: usize, f: &dyn Fn(&Run) -> f64| {
            Spread::of(
                runs[v]
                    .iter()
                    .zip(&runs[1])
                    .map(|(a, n)| f(a) / f(n))
                    .collect(),
            )
        };
        for (v, variant) in CONTENDED.iter().enumerate() {
            let of = |f: &dyn Fn(&Run) -> f64| median(runs[v].iter().map(f).collect());
            let ratios = if v == 1 {
                ("–".to_owned(), "–".to_owned())
            } else {
                (
                    against(v, &|r| r.c.rate).to_string(),
                    against(v, &p50).to_string(),
                )
            };
            b.line(&format!(
                "| {tasks} | {variant} | {:.0} | {} | {} | {} | {} | {:.2} | {:.2} |",
                of(&|r| r.c.rate),
                ratios.0,
                us(Duration::from_secs_f64(of(&p50))),
                ratios.1,
                us(Duration::from_secs_f64(of(&p99))),
                of(&|r| r.per),
                of(&|r| r.c.evenness),
            ));
        }
        let rate = against(0, &|r| r.c.rate);
        b.target(
            &format!(
                "mysql: acquisitions/s ≥ 0.8x native `GET_LOCK`'s, {tasks} contenders (median of {rounds} rounds' ratios; range)"
            ),
            rate.to_string(),
            rate.median >= 0.8,
        );
        let p50s = against(0, &p50);
        b.target(
            &format!(
                "mysql: handoff p50 ≤ 2x native `GET_LOCK`'s, {tasks} contenders (median of {rounds} rounds' ratios; range)"
            ),
            p50s.to_string(),
            p50s.median <= 2.0,
        );
        let lg_p99 = Duration::from_secs_f64(median(runs[0].iter().map(p99).collect()));
        b.target(
            &format!("mysql: handoff p99 ≤ 5 ms, {tasks} contenders (median of {rounds} rounds)"),
            us(lg_p99),
            lg_p99 <= Duration::from_millis(5),
        );
        let rate = against(3, &|r| r.c.rate);
        b.target(
            &format!(
                "mysql: session leases, acquisitions/s ≥ 0.8x native `GET_LOCK`'s, {tasks} contenders (median of {rounds} rounds' ratios; range)"
            ),
            rate.to_string(),
            rate.median >= 0.8,
        );
        let p50s = against(3, &p50);
        b.target(
            &format!(
                "mysql: session leases, handoff p50 ≤ 2x native `GET_LOCK`'s, {tasks} contenders (median of {rounds} rounds' ratios; range)"
            ),
            p50s.to_string(),
            p50s.median <= 2.0,
        );
        let session_p99 = Duration::from_secs_f64(median(runs[3].iter().map(p99).collect()));
        b.target(
            &format!(
                "mysql: session leases, handoff p99 ≤ 5 ms, {tasks} contenders (median of {rounds} rounds)"
            ),
            us(session_p99),
            session_p99 <= Duration::from_millis(5),
        );
    }
}
