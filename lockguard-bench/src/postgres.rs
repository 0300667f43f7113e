//! The PostgreSQL store beside raw tokio-postgres running the same
//! statements (prepared once per connection) over the same kind of
//! connections, and beside PostgreSQL's own advisory lock, against a
//! server the harness starts.
//!
//! Round trips are counted by the server: the calls of lockguard's
//! statements (`pg_stat_statements`), and the transactions the database
//! committed or rolled back (`pg_stat_database`), read once the clients
//! have closed their connections (a backend reports its counts when it
//! exits); every statement lockguard sends is its own transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use lockguard_core::{Algorithm, Client, Quota};
use lockguard_postgres::{BuilderExt as _, LockLeases};
use lockguard_testing::PostgresServer;

use crate::raw_pg;
use crate::rounds::interleaved;
use crate::stats::{percentile, us};
use crate::{
    Bench, Contention, HOLD, Measured, Recorder, THINK, contend, hold, lockguard_decisions,
    measure, median, range, throughput,
};

async fn lockguard(server: &PostgresServer) -> Client {
    lockguard_of(server, LockLeases::Recorded).await
}

/// A client whose locks' leases are `leases`.
async fn lockguard_of(server: &PostgresServer, leases: LockLeases) -> Client {
    Client::builder()
        .postgres_lock_leases(leases)
        .connect_postgres(&server.url())
        .await
        .expect("connect to postgres")
}

/// What the server counted so far, once every other client has closed its
/// connections (a backend reports its counts as it exits).
#[derive(Debug, Clone, Copy)]
struct Counts {
    /// Calls of the functions a client calls (not those they call).
    statements: u64,
    /// Transactions committed or rolled back.
    transactions: u64,
    /// Handoffs told to a waiter's client: letters written to the mail.
    handoffs: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;

    fn sub(self, before: Counts) -> Counts {
        Counts {
            statements: self.statements - before.statements,
            transactions: self.transactions - before.transactions,
            handoffs: self.handoffs - before.handoffs,
        }
    }
}

async fn counts(server: &PostgresServer) -> Counts {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = server.psql(
        "SELECT (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
                 WHERE query LIKE ANY (ARRAY[ \
                   '%pg_try_advisory_lock(y.hi%', '%pg_advisory_lock(n.hi%', \
                   '%pg_try_advisory_lock(w.hi%', '%pg_advisory_lock(w.hi%', \
                   '%pg_try_advisory_lock(%hashtextextended(%', \
                   '%pg_advisory_lock((hashtextextended(%', \
                   '%pg_advisory_unlock(g.hi%', '%pg_advisory_unlock(y.hi%', '%.lock_take(%', '%.lock_wait_out(%', '%.lock_named(%', \
                   '%.lock_lease(%', '%.lock_keep(%', '%.lock_inspect(%', \
                   '%.gcra(%', '%.fixed_window(%', '%.sliding_window(%'])) \
             || ' ' || \
             (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres') \
             || ' ' || \
             (SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables \
                 WHERE schemaname = 'lockguard' AND relname = 'mail')",
    );
    let mut n = out
        .split(' ')
        .map(|n| n.trim().parse::<u64>().expect("a count"));
    let mut next = || n.next().expect("three counts");
    Counts {
        statements: next(),
        transactions: next(),
        handoffs: next(),
    }
}

pub(crate) async fn section(b: &mut Bench) {
    let mut server = PostgresServer::start();
    // The statements the clients send counted by the server.
    server.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
    server.restart();
    server.psql("CREATE EXTENSION pg_stat_statements");
    // The schema, created once.
    drop(lockguard(&server).await);
    b.line(
        "\n## PostgreSQL: the same statements through lockguard and through raw tokio-postgres\n",
    );
    b.line("A `postgres` server the harness starts (PostgreSQL's defaults but `fsync=off`), on loopback TCP. The yardsticks are raw tokio-postgres sending lockguard's own statements (a lock's on a connection of its own, as each of lockguard's locks is; the rest through the same kind of pool as lockguard's, deadpool-postgres, 16 connections, `RecyclingMethod::Fast`), each statement prepared once per connection, and PostgreSQL's own advisory lock. Statements are counted by the server (`pg_stat_statements`: the calls of lockguard's lock statements, its functions' and the yardsticks' that send them), over the whole run, once the clients have closed their connections.\n");
    uncontended(b, &server).await;
    contention(b, &server).await;
    limiters(b, &server).await;
}

/// Rounds of the uncontended comparison (as on Redis): each side measured
/// in every round, the order alternating, ratios taken round by round.
const UNCONTENDED_ROUNDS: usize = 15;

async fn uncontended(b: &mut Bench, server: &PostgresServer) {
    let rounds = if b.quick { 1 } else { UNCONTENDED_ROUNDS };
    let each = b.run_for / 2;
    b.line("### Uncontended lock + unlock cycles (distinct keys)\n");
    b.line(&format!(
        "{rounds} rounds; in each, for each number of tasks, four sides run for {each:?} each (after a {:?} warm-up), back to back, in an order that turns round by round: lockguard (`try_acquire`, `release`), with its default recorded leases; *session leases*: the same with a client of `LockLeases::Session`; *raw*: tokio-postgres sending lockguard's own two statements (its try and its release, and `lock_take` at a key's first hold, as lockguard does), prepared once, each task on a connection of its own, as each of lockguard's locks is; *native*: PostgreSQL's own `pg_try_advisory_lock($1)` and `pg_advisory_unlock($1)`, each task on a connection of its own. Every run takes keys no run took before. The ratios are the medians over the rounds of lockguard's rate divided by the other side's in the same round, with the lowest and highest. One lockguard client serves every round.\n",
        each / 5
    ));
    b.line("| tasks | lockguard cycles/s (median) | raw cycles/s (median) | native cycles/s (median) | vs raw (median; range) | vs native (median; range) | client CPU µs / cycle, lockguard / raw / native (median) | statements / cycle (lockguard) | session leases cycles/s (median) | session leases vs native (median; range) |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    const TASKS: [usize; 2] = [1, 16];
    let lg = lockguard(server).await;
    let lg_session = lockguard_of(server, LockLeases::Session).await;
    let mut sessions = Vec::new();
    let mut natives = Vec::new();
    for _ in 0..TASKS[TASKS.len() - 1] {
        sessions.push(Arc::new(raw_pg::Session::connect(&server.url()).await));
        natives.push(Arc::new(raw_pg::Native::connect(&server.url()).await));
    }
    let mut rates = [(); TASKS.len()].map(|()| [Vec::new(), Vec::new(), Vec::new(), Vec::new()]);
    let before = counts(server).await;
    let cycles = Arc::new(AtomicU64::new(0));
    let raw_cycles = Arc::new(AtomicU64::new(0));
    for round in 0..rounds {
        for (i, &tasks) in TASKS.iter().enumerate() {
            for side in (0..4).map(|k| (k + round) % 4) {
                let rate = match side {
                    0 | 3 => {
                        // Statements are counted over both lockguard clients.
                        let counted = cycles.clone();
                        let (lg, name) = if side == 0 {
                            (&lg, "u")
                        } else {
                            (&lg_session, "s")
                        };
                        measure(tasks, each, |t, stop, done| {
                            let lock = lg
                                .lock(&format!("r{round}:{tasks}:{name}:{t}"))
                                .lease(Duration::from_secs(30));
                            let counted = counted.clone();
                            async move {
                                while !stop.load(Ordering::Relaxed) {
                                    let g = lock.try_acquire().await.expect("uncontended acquire");
                                    assert!(g.release().await.expect("release"));
                                    done.fetch_add(1, Ordering::Relaxed);
                                    counted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        })
                        .await
                    }
                    1 => {
                        let counted = raw_cycles.clone();
                        let sessions = &sessions;
                        measure(tasks, each, |t, stop, done| {
                            let session = sessions[t].clone();
                            let counted = counted.clone();
                            async move {
                                let key = format!("raw:r{round}:{tasks}:u:{t}");
                                let token = format!("{t:032x}");
                                while !stop.load(Ordering::Relaxed) {
                                    assert!(session.try_lock(&key, &token).await);
                                    session.unlock(&key, &token).await;
                                    done.fetch_add(1, Ordering::Relaxed);
                                    counted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        })
                        .await
                    }
                    2 => {
                        let natives = &natives;
                        measure(tasks, each, |t, stop, done| {
                            let native = natives[t].clone();
                            async move {
                                let key = i64::try_from(1_000_000 * round + 1000 * tasks + t)
                                    .expect("key");
                                while !stop.load(Ordering::Relaxed) {
                                    native.cycle(key).await;
                                    done.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        })
                        .await
                    }
                    _ => unreachable!("four sides"),
                };
                rates[i][side].push(rate);
            }
        }
    }
    drop(lg);
    drop(lg_session);
    drop(sessions);
    drop(natives);
    // The server counts the raw client's calls of the same functions too:
    // two per raw cycle, taken off.
    let counted = counts(server).await - before;
    let lg_cycles = cycles.load(Ordering::Relaxed).max(1);
    let raw = 2 * raw_cycles.load(Ordering::Relaxed);
    let per = counted.statements.saturating_sub(raw) as f64 / lg_cycles as f64;
    for (&tasks, [lgs, raws, natives, session_rates]) in TASKS.iter().zip(&rates) {
        let ratio_to = |other: &[Measured]| {
            let ratios: Vec<f64> = lgs
                .iter()
                .zip(other)
                .map(|(l, r)| l.rate / r.rate)
                .collect();
            let (lo, hi) = range(&ratios);
            (median(ratios), lo, hi)
        };
        let (raw_ratio, raw_lo, raw_hi) = ratio_to(raws);
        let (native_ratio, native_lo, native_hi) = ratio_to(natives);
        let (s_ratio, s_lo, s_hi) = {
            let ratios: Vec<f64> = session_rates
                .iter()
                .zip(natives)
                .map(|(l, r)| l.rate / r.rate)
                .collect();
            let (lo, hi) = range(&ratios);
            (median(ratios), lo, hi)
        };
        let of = |ms: &[Measured], f: fn(&Measured) -> f64| median(ms.iter().map(f).collect());
        let cpu = |m: &Measured| m.cpu_per_cycle.as_secs_f64() * 1e6;
        b.line(&format!(
            "| {tasks} | {:.0} | {:.0} | {:.0} | {raw_ratio:.2}x ({raw_lo:.2}–{raw_hi:.2}x) | {native_ratio:.2}x ({native_lo:.2}–{native_hi:.2}x) | {:.1} / {:.1} / {:.1} | {per:.2} | {:.0} | {s_ratio:.2}x ({s_lo:.2}–{s_hi:.2}x) |",
            of(lgs, |m| m.rate),
            of(raws, |m| m.rate),
            of(natives, |m| m.rate),
            of(lgs, cpu),
            of(raws, cpu),
            of(natives, cpu),
            of(session_rates, |m| m.rate),
        ));
        b.target(
            &format!(
                "postgres, session leases: uncontended lock cycles ≥ 0.5x native `pg_try_advisory_lock`'s, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            format!("{s_ratio:.2}x ({s_lo:.2}–{s_hi:.2}x)"),
            s_ratio >= 0.5,
        );
        b.target(
            &format!(
                "postgres: uncontended lock cycles ≥ 0.95x raw, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            format!("{raw_ratio:.2}x ({raw_lo:.2}–{raw_hi:.2}x)"),
            raw_ratio >= 0.95,
        );
        b.target(
            &format!(
                "postgres: uncontended lock cycles ≥ 0.5x native `pg_try_advisory_lock`'s, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            format!("{native_ratio:.2}x ({native_lo:.2}–{native_hi:.2}x)"),
            native_ratio >= 0.5,
        );
    }
    b.target(
        "postgres: one statement per operation (2 per cycle), 1 and 16 tasks",
        format!("{per:.2}"),
        per <= 2.01,
    );
}

async fn contention(b: &mut Bench, server: &PostgresServer) {
    b.line(&format!(
        "\n### Contention: contenders on one key, each with a client of its own, holding it {HOLD:?} and thinking {THINK:?}\n"
    ));
    b.line("*lockguard*: each contender builds its own client, as separate processes do; a lock is PostgreSQL's own advisory lock on a session of the client's, and a waiter waits in the server (its wait statement blocked in `pg_advisory_lock`), which grants the lock to the first waiter when the holder unlocks. *raw spin*: each contender a connection of its own, retrying lockguard's own try statement (never queued) at once until it wins. *pg_advisory_lock*: PostgreSQL's own session-level advisory lock, each contender a connection of its own (tokio-postgres, statements prepared once), `SELECT pg_advisory_lock($1)` waiting in the server, the hold, `SELECT pg_advisory_unlock($1)`: the same workload, one run after raw spin's at each number of contenders (its statements / acquisition are the two it sends). *pg_advisory_lock + fence from a sequence*: the same, with the lock's statement drawing a fencing token, `nextval` of a sequence, in the same round trip (checked to grow from holder to holder). *lockguard, session leases*: lockguard's contenders again, each a client of `LockLeases::Session` (a hold writes no row; a session's end hands the lock on at once). *raw session-lease statements*: those clients' own wait and release statements sent by tokio-postgres, a connection per contender (the server's part of their handoff, without lockguard's client). Handoff: from the holder's release call to the next different holder's acquire returning.\n");
    b.line("Statements / acquisition: the statements the clients sent (lockguard's try, wait and release, and its functions called: `lock_take`, `lock_wait_out`, `lock_lease`, `lock_keep`). Server transactions / acquisition: every transaction the server ran over the whole run, clients' connecting included. *Marginal*: the same, with each client's fixed cost taken out: lockguard's contenders run twice on fresh clients, for the whole time and for twice as long, and the column is the difference in transactions over the difference in acquisitions.\n");
    b.line("| contenders | variant | acquisitions/s | handoff p50 | handoff p99 | statements / acquisition | server transactions / acquisition | marginal | min/max per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut server_work = Vec::new();
    for tasks in [4, 16, 64] {
        // The whole time on fresh clients, then twice as long on others
        // (what a client costs once, its bell opening, is in both; the
        // first is long enough for every bell to open):
        let mut runs = Vec::new();
        for run_for in [b.run_for, b.run_for * 2] {
            let before = counts(server).await;
            let mut clients = Vec::new();
            for _ in 0..tasks {
                clients.push(lockguard(server).await);
            }
            let c = contend(&clients, tasks, run_for).await;
            drop(clients);
            runs.push((c, counts(server).await - before));
        }
        let (short, short_counted) = runs.remove(0);
        let (c, counted) = runs.remove(0);
        let per = counted.statements as f64 / c.acquisitions.max(1) as f64;
        let more = c.acquisitions.saturating_sub(short.acquisitions).max(1) as f64;
        let marginal = counted
            .transactions
            .saturating_sub(short_counted.transactions) as f64
            / more;
        server_work.push((tasks, marginal));
        row(b, tasks, "lockguard", &c, counted, Some(marginal));
        if tasks == 16 {
            b.target(
                "postgres: ≤ 4 statements per acquisition, 16 contenders",
                format!("{per:.2}"),
                per <= 4.0,
            );
        }

        let before = counts(server).await;
        let mut sessions = Vec::new();
        for _ in 0..tasks {
            sessions.push(Arc::new(raw_pg::Session::connect(&server.url()).await));
        }
        let rec = Recorder::new(tasks);
        let rate = throughput(tasks, b.run_for, |t, stop, done| {
            let session = sessions[t].clone();
            let rec = rec.clone();
            async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let token = format!("{t:016x}{n:016x}");
                    while !session.try_lock("raw:contended", &token).await {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                    rec.acquired(t);
                    hold().await;
                    rec.releasing(t);
                    session.unlock("raw:contended", &token).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(THINK).await;
                }
            }
        })
        .await;
        drop(sessions);
        let raw = rec.finish(rate);
        row(
            b,
            tasks,
            "raw spin",
            &raw,
            counts(server).await - before,
            None,
        );
        if tasks == 16 {
            b.target(
                "postgres: acquisitions/s ≥ 0.9x raw spin's, 16 contenders",
                format!("{:.0}/s vs {:.0}/s", c.rate, raw.rate),
                c.rate >= 0.9 * raw.rate,
            );
            let (p50, raw_p50) = (
                percentile(&c.handoffs, 50.0),
                percentile(&raw.handoffs, 50.0),
            );
            b.target(
                "postgres: handoff p50 ≤ raw spin's, 16 contenders",
                format!("{} vs {}", us(p50), us(raw_p50)),
                p50 <= raw_p50,
            );
        }

        let before = counts(server).await;
        let native = raw_contention(
            server,
            tasks,
            b.run_for,
            RawLock::Advisory { fenced: false },
        )
        .await;
        let mut counted = counts(server).await - before;
        // None of lockguard's statements runs: the statements are the two
        // each acquisition sends (the lock's wait and the unlock).
        counted.statements = 2 * native.acquisitions;
        row(b, tasks, "pg_advisory_lock", &native, counted, None);
        let before = counts(server).await;
        let fenced =
            raw_contention(server, tasks, b.run_for, RawLock::Advisory { fenced: true }).await;
        let mut counted = counts(server).await - before;
        counted.statements = 2 * fenced.acquisitions;
        row(
            b,
            tasks,
            "pg_advisory_lock + fence from a sequence",
            &fenced,
            counted,
            None,
        );
        // Session leases: the same contenders, each a client of its own
        // whose locks record nothing per hold.
        let before = counts(server).await;
        let mut clients = Vec::new();
        for _ in 0..tasks {
            clients.push(lockguard_of(server, LockLeases::Session).await);
        }
        let sc = contend(&clients, tasks, b.run_for).await;
        drop(clients);
        row(
            b,
            tasks,
            "lockguard, session leases",
            &sc,
            counts(server).await - before,
            None,
        );
        // The same statements without lockguard's client: each contender
        // a tokio-postgres connection sending the wait and release of
        // session leases, prepared once.
        let before = counts(server).await;
        let raw_session =
            raw_contention(server, tasks, b.run_for, RawLock::SessionStatements).await;
        let mut counted = counts(server).await - before;
        counted.statements = 2 * raw_session.acquisitions;
        row(
            b,
            tasks,
            "raw session-lease statements",
            &raw_session,
            counted,
            None,
        );
        let native_p50 = percentile(&native.handoffs, 50.0);
        for (c, mode) in [(&c, ""), (&sc, ", session leases")] {
            native_targets(b, tasks, mode, c, &native, native_p50);
        }
    }

    // Server work per acquisition does not grow with the clients: the
    // most (64 clients) within a quarter of the least (4).
    let least = server_work
        .iter()
        .map(|w| w.1)
        .fold(f64::INFINITY, f64::min);
    let most = server_work.iter().map(|w| w.1).fold(0.0, f64::max);
    let each = server_work
        .iter()
        .map(|w| format!("{:.2} at {}", w.1, w.0))
        .collect::<Vec<_>>()
        .join(", ");
    b.target(
        "postgres: marginal server transactions / acquisition do not grow with the clients (4, 16, 64 contenders, a client each: the most ≤ 1.25x the least)",
        each,
        most <= 1.25 * least,
    );
}

/// The targets of issue 56 item 3 for lockguard's contention `c` (locks of
/// `mode`) beside the native lock's `native` at `tasks` contenders.
fn native_targets(
    b: &mut Bench,
    tasks: usize,
    mode: &str,
    c: &Contention,
    native: &Contention,
    native_p50: Duration,
) {
    let (p50, p99) = (percentile(&c.handoffs, 50.0), percentile(&c.handoffs, 99.0));
    b.target(
        &format!(
            "postgres{mode}: acquisitions/s ≥ 0.8x native `pg_advisory_lock`'s, {tasks} contenders"
        ),
        format!(
            "{:.2}x ({:.0}/s vs {:.0}/s)",
            c.rate / native.rate,
            c.rate,
            native.rate
        ),
        c.rate >= 0.8 * native.rate,
    );
    b.target(
        &format!(
            "postgres{mode}: handoff p50 ≤ 2x native `pg_advisory_lock`'s, {tasks} contenders"
        ),
        format!(
            "{:.2}x ({} vs {})",
            p50.as_secs_f64() / native_p50.as_secs_f64(),
            us(p50),
            us(native_p50)
        ),
        p50.as_secs_f64() <= 2.0 * native_p50.as_secs_f64(),
    );
    b.target(
        &format!("postgres{mode}: handoff p99 ≤ 5 ms, {tasks} contenders"),
        us(p99),
        p99 <= Duration::from_millis(5),
    );
}

fn row(
    b: &mut Bench,
    tasks: usize,
    variant: &str,
    c: &Contention,
    counted: Counts,
    marginal: Option<f64>,
) {
    let per = |n: u64| n as f64 / c.acquisitions.max(1) as f64;
    let marginal = marginal.map_or("–".to_owned(), |m| format!("{m:.2}"));
    b.line(&format!(
        "| {tasks} | {variant} | {:.0} | {} | {} | {:.2} | {:.2} | {marginal} | {:.2} |",
        c.rate,
        us(percentile(&c.handoffs, 50.0)),
        us(percentile(&c.handoffs, 99.0)),
        per(counted.statements),
        per(counted.transactions),
        c.evenness,
    ));
}

/// What the raw contenders of [`raw_contention`] send.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RawLock {
    /// PostgreSQL's own session-level advisory lock:
    /// `SELECT pg_advisory_lock($1)` waits in the server; then the hold,
    /// and `SELECT pg_advisory_unlock($1)`. `fenced`: the lock's statement
    /// also draws a fencing token from a sequence (`nextval`, which writes
    /// no WAL for 31 calls in 32), the least a lock on the server's own
    /// that keeps fencing tokens adds to it.
    Advisory { fenced: bool },
    /// lockguard's own wait and release statements of session leases
    /// (`LockLeases::Session`), on connections started as lockguard's are
    /// (`lock_session()`): the server's part of lockguard's handoff,
    /// without its client.
    SessionStatements,
}

/// `tasks` contenders sending `kind`'s statements through tokio-postgres,
/// each on a connection of its own, prepared once; the tokens drawn, where
/// there are some, checked to grow from holder to holder.
async fn raw_contention(
    server: &PostgresServer,
    tasks: usize,
    run_for: Duration,
    kind: RawLock,
) -> Contention {
    const KEY: i64 = 56;
    let (lock_sql, unlock_sql) = match kind {
        RawLock::Advisory { fenced } => {
            let lock = if fenced {
                let conn = raw_pg::connect(&server.url()).await;
                conn.batch_execute("CREATE SEQUENCE IF NOT EXISTS lockguard_bench_fence")
                    .await
                    .expect("create the fence sequence");
                "SELECT pg_advisory_lock($1), nextval('lockguard_bench_fence')"
            } else {
                "SELECT pg_advisory_lock($1)"
            };
            (lock.to_owned(), "SELECT pg_advisory_unlock($1)".to_owned())
        }
        RawLock::SessionStatements => {
            let [_, wait, release] =
                lockguard_postgres::lock_statements_of("lockguard", LockLeases::Session);
            (wait, release)
        }
    };
    let fenced = kind != RawLock::Advisory { fenced: false };
    // The latest holder's fence: each next holder's is greater.
    let latest = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let mut conns = Vec::new();
    for _ in 0..tasks {
        let conn = raw_pg::connect(&server.url()).await;
        if kind == RawLock::SessionStatements {
            conn.batch_execute("SELECT lockguard.lock_session()")
                .await
                .expect("start the session");
        }
        let lock = conn.prepare(&lock_sql).await.expect("prepare");
        let unlock = conn.prepare(&unlock_sql).await.expect("prepare");
        conns.push(Arc::new((conn, lock, unlock)));
    }
    let rec = Recorder::new(tasks);
    let rate = throughput(tasks, run_for, |t, stop, done| {
        let conn = conns[t].clone();
        let rec = rec.clone();
        let latest = latest.clone();
        async move {
            let (conn, lock, unlock) = &*conn;
            let key = "raw:session";
            // Set by a session's first hold, as lockguard sets it once.
            let mut idle = Some(37_500i32);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (locked, fence_column) = if kind == RawLock::SessionStatements {
                    let token = format!("{t:016x}{n:016x}");
                    let row = conn
                        .query_one(lock, &[&key, &idle, &token.as_str()])
                        .await
                        .expect("the wait");
                    idle = None;
                    (row, 0)
                } else {
                    (
                        conn.query_one(lock, &[&KEY])
                            .await
                            .expect("pg_advisory_lock"),
                        1,
                    )
                };
                rec.acquired(t);
                if fenced {
                    let fence: i64 = locked.get(fence_column);
                    let before = latest.swap(fence, Ordering::Relaxed);
                    assert!(fence > before, "fence {fence} after {before}");
                }
                hold().await;
                rec.releasing(t);
                let row = if kind == RawLock::SessionStatements {
                    conn.query_one(unlock, &[&key]).await
                } else {
                    conn.query_one(unlock, &[&KEY]).await
                };
                assert!(
                    row.expect("unlock").get::<_, bool>(0),
                    "unlocked a lock not held"
                );
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(THINK).await;
            }
        }
    })
    .await;
    drop(conns);
    rec.finish(rate)
}

/// Rounds of the rate-limit comparison, as on Redis.
const LIMITER_ROUNDS: usize = 7;

async fn limiters(b: &mut Bench, server: &PostgresServer) {
    let rounds = if b.quick { 1 } else { LIMITER_ROUNDS };
    let each = b.run_for / 2;
    b.line("\n### Rate-limit decisions (16 tasks, distinct keys)\n");
    b.line(&format!(
        "For each algorithm, {rounds} interleaved rounds: in each, lockguard and a raw call of the same function run for {each:?} each (after a {:?} warm-up), back to back, lockguard first in odd rounds and second in even ones, each run on keys no run used before (an updated row leaves a dead version behind until a vacuum). The ratio is the median over the rounds of lockguard's rate divided by raw's in the same round, with the lowest and highest. One lockguard client and one raw pool serve every round.\n",
        each / 5
    ));
    b.line("| algorithm | lockguard decisions/s (median) | raw call of the same function (median) | ratio (median) | range |");
    b.line("|---|---:|---:|---:|---:|");
    let quota = Quota::per_second(1_000_000);
    let lg = lockguard(server).await;
    let pool = raw_pg::pool(&server.url());
    for (algorithm, name) in [
        (Algorithm::Gcra, "GCRA"),
        (Algorithm::FixedWindow, "fixed window"),
        (Algorithm::SlidingWindow, "sliding window log"),
    ] {
        let rates = interleaved(
            rounds,
            async |round| {
                let limiter = lg
                    .rate_limiter(&format!("bench{round}"), quota)
                    .algorithm(algorithm);
                lockguard_decisions(&limiter, each).await
            },
            async |round| {
                throughput(16, each, |t, stop, done| {
                    let pool = pool.clone();
                    async move {
                        let key = format!("raw:rl:{algorithm:?}:{round}:{t}");
                        while !stop.load(Ordering::Relaxed) {
                            raw_decision(&pool, algorithm, &key).await;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await
            },
        )
        .await;
        let ratio = rates.ratio(|r| *r);
        b.line(&format!(
            "| {name} | {:.0} | {:.0} | {} | {} |",
            rates.lockguard_median(|r| *r),
            rates.raw_median(|r| *r),
            ratio.cell(),
            ratio.range_cell(),
        ));
        b.target(
            &format!("postgres: {name} decisions ≥ 0.9x raw (median of {rounds} rounds; range)"),
            ratio.to_string(),
            ratio.median >= 0.9,
        );
    }
}

/// The decision lockguard makes for 1,000,000 per second, cost 1.
async fn raw_decision(pool: &Pool, algorithm: Algorithm, key: &str) {
    let conn = pool.get().await.expect("connection");
    let (sql, params): (&str, Vec<i64>) = match algorithm {
        Algorithm::Gcra => (
            "SELECT * FROM lockguard.gcra($1, $2, $3, $4, false)",
            vec![1, 1_000_000, 1],
        ),
        Algorithm::FixedWindow => (
            "SELECT * FROM lockguard.fixed_window($1, $2, $3, $4, false)",
            vec![1_000_000, 1_000, 1],
        ),
        _ => (
            "SELECT * FROM lockguard.sliding_window($1, $2, $3, $4, false)",
            vec![1_000_000, 1_000_000, 1],
        ),
    };
    let stmt = conn.prepare_cached(sql).await.expect("prepare");
    conn.query_one(&stmt, &[&key, &params[0], &params[1], &params[2]])
        .await
        .expect("decision");
}
