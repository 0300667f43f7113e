//! The lockguard load benchmark: lock cycles, contention, rate limiting and
//! the in-memory store, each beside raw redis-rs doing the same Redis
//! commands in the same run, against a `redis-server` it starts itself;
//! and the PostgreSQL store beside raw tokio-postgres running the same
//! statements, against a server it starts; the MySQL/MariaDB store beside
//! raw `mysql_async` sending the same calls and beside the server's own
//! user locks (`GET_LOCK`); the ZooKeeper store beside the raw
//! `zookeeper-client` lock recipe; and the etcd store beside etcd's own
//! `Lock` RPC and election.
//!
//! ```sh
//! cargo run --release -p lockguard-bench                      # print the tables
//! cargo run --release -p lockguard-bench -- --write BENCHMARKS.md
//! cargo run --release -p lockguard-bench -- --charts BENCHMARKS.md  # the charts again
//! cargo run --release -p lockguard-bench -- --quick           # a smoke run
//! cargo run --release -p lockguard-bench -- --only http       # one section
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockguard_core::{Algorithm, Client, Quota};
use lockguard_redis::ClientExt as _;
use lockguard_testing::RedisServer;
use redis::aio::ConnectionManager;

mod apps;
mod charts;
mod cluster;
mod counters;
mod etcd;
mod floor;
mod footprint;
mod http;
mod leader;
mod multi;
mod mysql;
mod postgres;
mod raw;
mod raw_mysql;
mod raw_pg;
mod rounds;
mod rw;
mod stats;
mod tails;
mod zookeeper;

use rounds::Spread;

use stats::{
    Counted, SlowlogEntry, parse_commandstats, percentile, script_calls, split, split_by_origin, us,
};

/// Room in the slowlog for every call of one lockguard contention run.
const SLOWLOG_LEN: usize = 5_000_000;
/// Commands the raw client sends.
pub(crate) const RAW_SENT: &[&str] = &["set", "evalsha", "eval", "script|load"];

struct Bench {
    server: RedisServer,
    admin: ConnectionManager,
    run_for: Duration,
    /// A smoke run (`--quick`): short measurements, one round.
    quick: bool,
    out: String,
    /// The performance targets, checked against this run's figures.
    targets: Vec<String>,
}

impl Bench {
    async fn reset_stats(&mut self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.admin)
            .await
            .expect("CONFIG RESETSTAT");
    }

    /// Logs every call in the slowlog (threshold 0), or none; either way
    /// empties it.
    async fn log_every_call(&mut self, on: bool) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(if on { 0 } else { -1 })
            .arg("slowlog-max-len")
            .arg(SLOWLOG_LEN)
            .query_async(&mut self.admin)
            .await
            .expect("CONFIG SET slowlog");
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut self.admin)
            .await
            .expect("SLOWLOG RESET");
    }

    /// Commands since the last reset, split by who made each call: a client
    /// or a script (every call logged, see [`Bench::log_every_call`]).
    async fn commands_by_origin(&mut self) -> Counted {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.admin)
            .await
            .expect("INFO");
        let logged: Vec<SlowlogEntry> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut self.admin)
            .await
            .expect("SLOWLOG GET");
        assert!(
            logged.len() < SLOWLOG_LEN,
            "the slowlog filled up: calls were dropped"
        );
        split_by_origin(&parse_commandstats(&info), &script_calls(&logged))
    }

    async fn commands(&mut self, sent_by_client: &[&str]) -> Counted {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.admin)
            .await
            .expect("INFO");
        split(&parse_commandstats(&info), sent_by_client)
    }

    async fn lockguard(&self) -> Client {
        Client::connect_redis(&self.server.url())
            .await
            .expect("connect")
    }

    fn target(&mut self, what: &str, measured: String, met: bool) {
        let verdict = if met { "met" } else { "missed" };
        self.targets
            .push(format!("| {what} | {measured} | {verdict} |"));
    }

    fn line(&mut self, s: &str) {
        println!("{s}");
        self.out.push_str(s);
        self.out.push('\n');
    }
}

/// Runs `tasks` copies of `body` for `run_for`; returns completed cycles/s.
async fn throughput<F, Fut>(tasks: usize, run_for: Duration, body: F) -> f64
where
    F: Fn(usize, Arc<AtomicBool>, Arc<AtomicU64>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    measure(tasks, run_for, body).await.rate
}

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Completed cycles per second of wall time.
    rate: f64,
    /// CPU time the whole process spent (every thread, user and system)
    /// per completed cycle.
    cpu_per_cycle: Duration,
    /// CPU time of the threads named [`SERVER_THREADS`] alone per
    /// completed cycle: the server's share, where a benchmark runs its
    /// server on a runtime of its own (zero elsewhere).
    server_cpu_per_cycle: Duration,
    /// CPU time of the bench's `redis-server` per completed cycle.
    redis_cpu_per_cycle: Duration,
}

/// The name of the threads of a server under test, counted apart from its
/// load generator's.
const SERVER_THREADS: &str = "bench-server";

/// The CPU time this process's live threads have run, all of them and
/// those named [`SERVER_THREADS`] (`/proc/self/task/*/schedstat`, the
/// scheduler's own accounting).
fn process_cpu() -> (Duration, Duration) {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let (mut all, mut server) = (0, 0);
    for task in tasks.filter_map(Result::ok) {
        let Some(ns) = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += ns;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == SERVER_THREADS {
            server += ns;
        }
    }
    (Duration::from_nanos(all), Duration::from_nanos(server))
}

/// The bench's `redis-server`, whose CPU time [`measure`] counts too.
static REDIS_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The CPU time the bench's `redis-server` has run, every thread
/// (`/proc/PID/task/*/schedstat`); zero before the server is known.
fn redis_cpu() -> Duration {
    let Some(pid) = REDIS_PID.get() else {
        return Duration::ZERO;
    };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| {
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Duration::from_nanos(ns)
}

/// Runs `tasks` copies of `body` for `run_for` after a warm-up of a fifth
/// of it; returns completed cycles per second and the CPU time per cycle.
pub(crate) async fn measure<F, Fut>(tasks: usize, run_for: Duration, body: F) -> Measured
where
    F: Fn(usize, Arc<AtomicBool>, Arc<AtomicU64>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(body(t, stop.clone(), done.clone())))
        .collect();
    // Warm up, then measure.
    tokio::time::sleep(run_for / 5).await;
    let start_count = done.load(Ordering::Relaxed);
    let (started, cpu_started, redis_started) = (Instant::now(), process_cpu(), redis_cpu());
    tokio::time::sleep(run_for).await;
    let count = done.load(Ordering::Relaxed) - start_count;
    let (elapsed, cpu_ended, redis_ended) = (started.elapsed(), process_cpu(), redis_cpu());
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.expect("task");
    }
    let cycles = u32::try_from(count.max(1)).unwrap_or(u32::MAX);
    Measured {
        rate: count as f64 / elapsed.as_secs_f64(),
        cpu_per_cycle: cpu_ended.0.saturating_sub(cpu_started.0) / cycles,
        server_cpu_per_cycle: cpu_ended.1.saturating_sub(cpu_started.1) / cycles,
        redis_cpu_per_cycle: redis_ended.saturating_sub(redis_started) / cycles,
    }
}

/// Rounds of the uncontended comparison: lockguard and raw redis-rs
/// measured back to back in each, so a drift of the machine's speed hits
/// both alike, and the median of the rounds' ratios reported with their
/// range, so a change can be told from noise.
const UNCONTENDED_ROUNDS: usize = 9;

async fn uncontended(b: &mut Bench) {
    const TASKS: [usize; 3] = [1, 16, 64];
    let rounds = if b.quick { 1 } else { UNCONTENDED_ROUNDS };
    let each = b.run_for / 2;
    b.line("\n## Uncontended lock + unlock cycles (distinct keys)\n");
    b.line(&format!(
        "{rounds} rounds; in each, for each number of tasks, lockguard and raw redis-rs run for {each:?} each (after a {:?} warm-up), back to back, lockguard first in odd rounds and second in even ones. The ratio is the median over the rounds of lockguard's rate divided by raw's in the same round; the range is the lowest and highest of those ratios. One lockguard client and one raw connection serve every round.\n",
        each / 5
    ));
    b.line("CPU per cycle (medians): the bench process's (the client: lockguard or redis-rs, and the loop) and the `redis-server`'s, from the scheduler's accounting (`/proc/PID/task/*/schedstat`). Client and server share the two cores, so the cycle rate follows their sum.\n");
    b.line("| tasks | lockguard cycles/s (median) | raw redis-rs cycles/s (median) | ratio (median) | range | client CPU µs / cycle, lockguard / raw | redis-server CPU µs / cycle, lockguard / raw |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|");
    let lg = b.lockguard().await;
    let conn = raw::connect(&b.server.url()).await;
    let mut rates = [(); TASKS.len()].map(|()| (Vec::new(), Vec::new()));
    for round in 0..rounds {
        for (i, &tasks) in TASKS.iter().enumerate() {
            for lockguard in [round % 2 == 0, round % 2 == 1] {
                if lockguard {
                    let m = measure(tasks, each, |t, stop, done| {
                        let lock = lg.lock(&format!("u:{t}")).lease(Duration::from_secs(30));
                        async move {
                            while !stop.load(Ordering::Relaxed) {
                                let g = lock.try_acquire().await.expect("uncontended acquire");
                                assert!(g.release().await.expect("release"));
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                    .await;
                    rates[i].0.push(m);
                } else {
                    let m = measure(tasks, each, |t, stop, done| {
                        let mut conn = conn.clone();
                        async move {
                            let key = format!("raw:u:{t}");
                            let mut n = 0u64;
                            while !stop.load(Ordering::Relaxed) {
                                n += 1;
                                let token = format!("{t}-{n}");
                                assert!(raw::try_lock(&mut conn, &key, &token).await);
                                raw::unlock(&mut conn, &key, &token).await;
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                    .await;
                    rates[i].1.push(m);
                }
            }
        }
    }
    for (&tasks, (lgs, raws)) in TASKS.iter().zip(&rates) {
        let ratios: Vec<f64> = lgs.iter().zip(raws).map(|(l, r)| l.rate / r.rate).collect();
        let (lo, hi) = range(&ratios);
        let ratio = median(ratios);
        let of = |ms: &[Measured], f: fn(&Measured) -> f64| median(ms.iter().map(f).collect());
        fn us(d: Duration) -> f64 {
            d.as_secs_f64() * 1e6
        }
        b.line(&format!(
            "| {tasks} | {:.0} | {:.0} | {ratio:.2}x | {lo:.2}–{hi:.2}x | {:.1} / {:.1} | {:.1} / {:.1} |",
            of(lgs, |m| m.rate),
            of(raws, |m| m.rate),
            of(lgs, |m| us(m.cpu_per_cycle)),
            of(raws, |m| us(m.cpu_per_cycle)),
            of(lgs, |m| us(m.redis_cpu_per_cycle)),
            of(raws, |m| us(m.redis_cpu_per_cycle)),
        ));
        b.target(
            &format!(
                "uncontended lock cycles ≥ 0.95x raw, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            format!("{ratio:.2}x ({lo:.2}–{hi:.2}x)"),
            ratio >= 0.95,
        );
    }
}

/// The median of `xs` (the upper one of an even count).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The lowest and the highest of `xs`.
fn range(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)))
}

/// How long a contender holds the lock.
const HOLD: Duration = Duration::from_millis(1);

/// Holds the lock for [`HOLD`]: a blocking sleep on tokio's blocking pool,
/// like a call into a database, precise to tens of microseconds whatever the
/// runtime does. A tokio timer would end on the runtime's millisecond ticks,
/// later still when the runtime had parked, so its length would depend on
/// how busy the contenders keep the runtime, and spinning keeps it busiest.
pub(crate) async fn hold() {
    tokio::task::spawn_blocking(|| std::thread::sleep(HOLD))
        .await
        .expect("hold");
}
/// How long a contender thinks after a release before asking again.
const THINK: Duration = Duration::from_micros(500);

/// Who contends for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contenders {
    /// lockguard tasks sharing 4 client handles.
    SharedClients,
    /// lockguard tasks with a client each (its own connections and
    /// pub/sub connection), as separate processes have.
    ClientEach,
    /// Raw redis-rs tasks over 4 connections, retrying `SET NX` at once.
    RawSpin,
}

impl Contenders {
    const ALL: [Self; 3] = [Self::SharedClients, Self::ClientEach, Self::RawSpin];

    fn name(self) -> &'static str {
        match self {
            Self::SharedClients => "lockguard, 4 clients",
            Self::ClientEach => "lockguard, client per contender",
            Self::RawSpin => "raw spin",
        }
    }
}

/// Handoff latencies and acquisitions of contenders on one key.
struct Contention {
    rate: f64,
    handoffs: Vec<Duration>,
    /// Release round trips (from the call to its answer), sorted, where
    /// the contenders recorded them.
    releases: Vec<Duration>,
    acquisitions: u64,
    /// The fewest acquisitions of any contender over the most.
    evenness: f64,
}

/// What the contenders record as they go.
struct Recorder {
    /// When and by whom the lock was last released.
    last: Mutex<Option<(Instant, usize)>>,
    handoffs: Mutex<Vec<Duration>>,
    releases: Mutex<Vec<Duration>>,
    /// Acquisitions per contender.
    acquisitions: Vec<AtomicU64>,
}

impl Recorder {
    fn new(contenders: usize) -> Arc<Self> {
        Arc::new(Self {
            last: Mutex::default(),
            handoffs: Mutex::default(),
            releases: Mutex::default(),
            acquisitions: (0..contenders).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Contender `t`'s acquire returned.
    fn acquired(&self, t: usize) {
        let now = Instant::now();
        if let Some((at, who)) = *self.last.lock().unwrap()
            && who != t
        {
            self.handoffs.lock().unwrap().push(now - at);
        }
        self.acquisitions[t].fetch_add(1, Ordering::Relaxed);
    }

    /// Contender `t` is about to release; returns when, for
    /// [`Recorder::released`].
    fn releasing(&self, t: usize) -> Instant {
        let now = Instant::now();
        *self.last.lock().unwrap() = Some((now, t));
        now
    }

    /// The release called at `at` was answered.
    fn released(&self, at: Instant) {
        self.releases.lock().unwrap().push(at.elapsed());
    }

    /// Whether every contender has acquired the lock at least once.
    fn everyone_acquired(&self) -> bool {
        self.acquisitions
            .iter()
            .all(|a| a.load(Ordering::Relaxed) > 0)
    }

    /// Forgets what was recorded so far (the warm-up).
    fn restart(&self) {
        self.handoffs.lock().unwrap().clear();
        self.releases.lock().unwrap().clear();
        for a in &self.acquisitions {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Acquisitions of every contender since the start or the last restart.
    fn total(&self) -> u64 {
        self.acquisitions
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }

    fn finish(&self, rate: f64) -> Contention {
        let mut handoffs = std::mem::take(&mut *self.handoffs.lock().unwrap());
        handoffs.sort();
        let mut releases = std::mem::take(&mut *self.releases.lock().unwrap());
        releases.sort();
        let counts: Vec<u64> = self
            .acquisitions
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let (min, max) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        Contention {
            rate,
            handoffs,
            releases,
            acquisitions: counts.iter().sum(),
            evenness: if max == 0 {
                0.0
            } else {
                min as f64 / max as f64
            },
        }
    }
}

/// `tasks` lockguard contenders over `clients` clients (task `t` uses
/// client `t % clients`), with the commands they sent. Counting starts
/// once every contender has held the lock (so every client has made its
/// first wait, which tries once more and subscribes) and at least a fifth
/// of the run has passed: the figures are the steady state's, whatever
/// the number of contenders.
async fn contended_lockguard(b: &mut Bench, tasks: usize, clients: usize) -> (Contention, Counted) {
    let mut handles = Vec::new();
    for _ in 0..clients {
        handles.push(b.lockguard().await);
    }
    let rec = Recorder::new(tasks);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = handles[t % handles.len()]
                .lock("contended")
                .lease(Duration::from_secs(10))
                .wait(Duration::from_secs(120));
            let (rec, stop) = (rec.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let g = lock.acquire().await.expect("acquire");
                    rec.acquired(t);
                    hold().await;
                    let at = rec.releasing(t);
                    g.release().await.expect("release");
                    rec.released(at);
                    tokio::time::sleep(THINK).await;
                }
            })
        })
        .collect();
    let warm = Instant::now();
    tokio::time::sleep(b.run_for / 5).await;
    while !rec.everyone_acquired() {
        assert!(
            warm.elapsed() < Duration::from_secs(120),
            "not every contender acquired the lock within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.log_every_call(true).await;
    b.reset_stats().await;
    rec.restart();
    // Long enough for every contender to take several turns.
    let run_for = b.run_for.max(Duration::from_millis(10) * tasks as u32);
    let started = Instant::now();
    tokio::time::sleep(run_for).await;
    let rate = rec.total() as f64 / started.elapsed().as_secs_f64();
    let c = rec.finish(rate);
    let counted = b.commands_by_origin().await;
    b.log_every_call(false).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("contender");
    }
    (c, counted)
}

/// `tasks` contenders over `handles` (task `t` uses handle `t % len`), each
/// taking the lock, holding it for [`HOLD`] and thinking for [`THINK`].
async fn contend(handles: &[Client], tasks: usize, run_for: Duration) -> Contention {
    let rec = Recorder::new(tasks);
    let rate = throughput(tasks, run_for, |t, stop, done| {
        let lock = handles[t % handles.len()]
            .lock("contended")
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(60));
        let rec = rec.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                let g = lock.acquire().await.expect("acquire");
                rec.acquired(t);
                hold().await;
                rec.releasing(t);
                g.release().await.expect("release");
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(THINK).await;
            }
        }
    })
    .await;
    rec.finish(rate)
}

async fn contended_raw(b: &Bench, tasks: usize) -> Contention {
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(raw::connect(&b.server.url()).await);
    }
    let rec = Recorder::new(tasks);
    let rate = throughput(tasks, b.run_for, |t, stop, done| {
        let mut conn = conns[t % 4].clone();
        let rec = rec.clone();
        async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let token = format!("{t}-{n}");
                // The spin loop: retry SET NX at once until it succeeds.
                while !raw::try_lock(&mut conn, "raw:contended", &token).await {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
                rec.acquired(t);
                hold().await;
                rec.releasing(t);
                raw::unlock(&mut conn, "raw:contended", &token).await;
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(THINK).await;
            }
        }
    })
    .await;
    rec.finish(rate)
}

/// One contention run's figures.
#[derive(Debug, Clone, Copy)]
struct ContentionRun {
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// Commands per acquisition: sent by the clients, and run inside scripts.
    sent: f64,
    internal: f64,
    evenness: f64,
}

/// One row of the contention table: the medians of its runs' figures, and
/// for lockguard's variants, the ratio of their acquisitions/s to raw
/// spin's, round by round.
struct ContentionRow {
    tasks: usize,
    contenders: Contenders,
    runs: Vec<ContentionRun>,
    ratio: Option<Spread>,
}

impl ContentionRow {
    fn median(&self, figure: fn(&ContentionRun) -> f64) -> f64 {
        median(self.runs.iter().map(figure).collect())
    }

    fn rate(&self) -> f64 {
        self.median(|r| r.rate)
    }

    fn p99(&self) -> Duration {
        Duration::from_secs_f64(self.median(|r| r.p99.as_secs_f64()))
    }

    fn sent(&self) -> f64 {
        self.median(|r| r.sent)
    }

    fn evenness(&self) -> f64 {
        self.median(|r| r.evenness)
    }
}

/// Rounds of the contention comparison: in each, every variant runs once,
/// in an order that turns by one each round.
const CONTENTION_ROUNDS: usize = 3;

/// One run of `contenders`, `tasks` of them.
async fn contention_run(b: &mut Bench, tasks: usize, contenders: Contenders) -> ContentionRun {
    let (c, counted) = if contenders == Contenders::RawSpin {
        b.reset_stats().await;
        let c = contended_raw(b, tasks).await;
        (c, b.commands(RAW_SENT).await)
    } else {
        let clients = if contenders == Contenders::SharedClients {
            4
        } else {
            tasks
        };
        contended_lockguard(b, tasks, clients).await
    };
    let per = |n: u64| n as f64 / c.acquisitions.max(1) as f64;
    ContentionRun {
        rate: c.rate,
        p50: percentile(&c.handoffs, 50.0),
        p99: percentile(&c.handoffs, 99.0),
        sent: per(counted.sent),
        internal: per(counted.internal),
        evenness: c.evenness,
    }
}

async fn contention(b: &mut Bench) {
    let rounds = if b.quick { 1 } else { CONTENTION_ROUNDS };
    b.line(
        "\n## Contention: contenders on one key, each holding it ~1 ms, then thinking ~0.5 ms\n",
    );
    b.line("Variants: *lockguard, 4 clients*: the contenders are tasks sharing 4 client handles. *lockguard, client per contender*: each contender builds its own client (its own connections, its own pub/sub connection), as separate processes do. *raw spin*: raw redis-rs tasks over 4 connections retrying `SET NX` at once.");
    b.line("Every variant, raw spin included, holds the lock for 1 ms (a blocking sleep on tokio's blocking pool, like a database call: a tokio timer would end on the runtime's millisecond ticks, later when the runtime had parked, so the hold would depend on how busy the variant keeps the runtime) and, after each release, thinks for a 500 µs tokio sleep (rounded up to the timer's milliseconds) before asking again.");
    b.line("Handoff: from the holder's release call to the next *different* holder's acquire returning.");
    b.line("The lockguard rows count from the moment every contender has held the lock once (so every client has made its first wait, which subscribes) and a fifth of the run has passed, for a run's length (10 ms per contender where that is longer, so that each takes several turns): the steady state, whatever the number of contenders. 256 and 1,000 contenders run one client each only.");
    b.line(&format!("Rounds: at 4, 16 and 64 contenders, {rounds} rounds, each running every variant once, the order turning by one each round (so each goes first, second and third once in three rounds); at 256 and 1,000, one run each. Every figure is the median over the rounds; the ratio is lockguard's acquisitions/s over raw spin's in the same round, median and range."));
    b.line("Commands per acquisition: commands the clients sent (script-internal calls in brackets), over the measured part of the run. For lockguard the server tells the two apart: every call goes to the slowlog, a script's calls under no client address, so a `PUBLISH` or `PEXPIRE` sent directly counts as sent, one inside a script as internal, and `SUBSCRIBE`/`UNSUBSCRIBE` count as sent; connection handshakes are not counted.");
    b.line("Min/max: the fewest acquisitions any contender made over the run divided by the most (1.00 = perfectly even).\n");
    b.line(
        "| tasks | variant | acquisitions/s | ratio to raw spin (range) | handoff p50 | handoff p99 | commands / acquisition | min/max acquisitions per contender |",
    );
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for tasks in [4, 16, 64] {
        let mut runs = Contenders::ALL.map(|_| Vec::new());
        for round in 0..rounds {
            for turn in 0..Contenders::ALL.len() {
                let i = (round + turn) % Contenders::ALL.len();
                runs[i].push(contention_run(b, tasks, Contenders::ALL[i]).await);
            }
        }
        let raw = runs[Contenders::ALL.len() - 1].clone();
        for (contenders, runs) in Contenders::ALL.into_iter().zip(runs) {
            let ratio = (contenders != Contenders::RawSpin).then(|| {
                Spread::of(
                    runs.iter()
                        .zip(&raw)
                        .map(|(l, r)| l.rate / r.rate)
                        .collect(),
                )
            });
            rows.push(ContentionRow {
                tasks,
                contenders,
                runs,
                ratio,
            });
        }
    }
    // Long queues, one client per contender, as many processes run them.
    for tasks in [256, 1000] {
        let run = contention_run(b, tasks, Contenders::ClientEach).await;
        rows.push(ContentionRow {
            tasks,
            contenders: Contenders::ClientEach,
            runs: vec![run],
            ratio: None,
        });
    }
    for row in &rows {
        b.line(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {:.2} ({:.2}) | {:.2} |",
            row.tasks,
            row.contenders.name(),
            row.rate(),
            row.ratio.map(|r| r.to_string()).unwrap_or_default(),
            us(Duration::from_secs_f64(row.median(|r| r.p50.as_secs_f64()))),
            us(row.p99()),
            row.sent(),
            row.median(|r| r.internal),
            row.evenness(),
        ));
    }
    contention_targets(b, &rows);
}

fn contention_targets(b: &mut Bench, rows: &[ContentionRow]) {
    let row = |tasks: usize, contenders: Contenders| {
        rows.iter()
            .find(|r| r.tasks == tasks && r.contenders == contenders)
    };
    if let Some(r) = row(16, Contenders::SharedClients) {
        let p99 = r.p99();
        b.target(
            "handoff p99 < 2 ms at 16 contenders (median of the rounds)",
            us(p99),
            p99 < Duration::from_millis(2),
        );
        b.target(
            "≤ 4 commands sent per acquisition at 16 contenders",
            format!("{:.2}", r.sent()),
            r.sent() <= 4.0,
        );
    }
    let each: Vec<&ContentionRow> = rows
        .iter()
        .filter(|r| r.contenders == Contenders::ClientEach)
        .collect();
    // One target per row on the commands sent (all scripts in the steady
    // state): 3.5, tighter than the earlier 4.
    for r in &each {
        b.target(
            &format!(
                "≤ 3.5 scripts sent per acquisition, client per contender, {} contenders",
                r.tasks
            ),
            format!("{:.2}", r.sent()),
            r.sent() <= 3.5,
        );
    }
    if let Some(r) = row(64, Contenders::ClientEach) {
        let p99 = r.p99();
        b.target(
            "handoff p99 < 1 ms, client per contender, 64 contenders (median of the rounds)",
            us(p99),
            p99 < Duration::from_millis(1),
        );
    }
    for r in &each {
        b.target(
            &format!(
                "min/max acquisitions per client ≥ 0.67, client per contender, {} contenders",
                r.tasks
            ),
            format!("{:.2}", r.evenness()),
            r.evenness() >= 0.67,
        );
    }
    for tasks in [16, 64] {
        if let Some(ratio) = row(tasks, Contenders::ClientEach).and_then(|r| r.ratio) {
            b.target(
                &format!(
                    "acquisitions/s ≥ raw spin's, client per contender, {tasks} contenders (median of the rounds' ratios; range)"
                ),
                ratio.to_string(),
                ratio.median >= 1.0,
            );
        }
    }
}

/// Rounds of the rate-limit comparison, as for the uncontended cycles.
const LIMITER_ROUNDS: usize = 7;

/// Decisions per second of `limiter` from 16 tasks on distinct keys.
async fn lockguard_decisions(limiter: &lockguard_core::RateLimiter, run_for: Duration) -> f64 {
    throughput(16, run_for, |t, stop, done| {
        let limiter = limiter.clone();
        async move {
            let key = format!("k{t}");
            while !stop.load(Ordering::Relaxed) {
                limiter.check(&key).await.expect("decision");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await
}

/// Decisions per second of raw `EVALSHA`s of the same script, 16 tasks
/// on distinct keys.
async fn raw_decisions(conn: &ConnectionManager, algorithm: Algorithm, run_for: Duration) -> f64 {
    throughput(16, run_for, |t, stop, done| {
        let mut conn = conn.clone();
        async move {
            let key = format!("raw:rl:{algorithm:?}:{{k{t}}}");
            let sum = format!("{key}:sum");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut call = match algorithm {
                    Algorithm::Gcra => raw::GCRA.prepare_invoke(),
                    Algorithm::FixedWindow => raw::FIXED_WINDOW.prepare_invoke(),
                    _ => raw::SLIDING_WINDOW.prepare_invoke(),
                };
                match algorithm {
                    Algorithm::Gcra => call.key(&key).arg(1).arg(1_000_000).arg(1).arg(""),
                    Algorithm::FixedWindow => call.key(&key).arg(1_000_000).arg(1000).arg(1),
                    _ => call
                        .key(&key)
                        .key(&sum)
                        .arg(1_000_000)
                        .arg(1_000_000)
                        .arg(1)
                        .arg(format!("{t}-{n}"))
                        .arg(""),
                };
                let _: redis::Value = call.invoke_async(&mut conn).await.expect("raw decision");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await
}

async fn limiters(b: &mut Bench) {
    let rounds = if b.quick { 1 } else { LIMITER_ROUNDS };
    let each = b.run_for / 2;
    b.line("\n## Rate-limit decisions (16 tasks, distinct keys)\n");
    b.line(&format!(
        "For each algorithm, {rounds} interleaved rounds: in each, lockguard and raw redis-rs (an `EVALSHA` of the same script) run for {each:?} each (after a {:?} warm-up), back to back, lockguard first in odd rounds and second in even ones. The ratio is the median over the rounds of lockguard's rate divided by raw's in the same round, with the lowest and highest. One lockguard client and one raw connection serve every round.\n",
        each / 5
    ));
    b.line("| algorithm | lockguard decisions/s (median) | raw EVALSHA of the same script (median) | ratio (median) | range |");
    b.line("|---|---:|---:|---:|---:|");
    let quota = Quota::per_second(1_000_000);
    let algorithms = [
        (Algorithm::Gcra, "GCRA"),
        (Algorithm::FixedWindow, "fixed window"),
        (Algorithm::SlidingWindow, "sliding window log"),
    ];
    let lg = b.lockguard().await;
    let conn = raw::connect(&b.server.url()).await;
    for (algorithm, name) in algorithms {
        let limiter = lg.rate_limiter("bench", quota).algorithm(algorithm);
        let rates = rounds::interleaved(
            rounds,
            async |_| lockguard_decisions(&limiter, each).await,
            async |_| raw_decisions(&conn, algorithm, each).await,
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
            &format!("{name} decisions ≥ 0.9x raw (median of {rounds} rounds; range)"),
            ratio.to_string(),
            ratio.median >= 0.9,
        );
    }
}

/// Shadow mode (`RateLimiter::shadow`) against the same limiter enforcing,
/// with every request over the quota: a shadowed decision is the same
/// store step, its answer let through in the client, so it should cost
/// what a refusal costs (one round trip, and the same rate).
async fn shadow(b: &mut Bench) {
    let rounds = if b.quick { 1 } else { LIMITER_ROUNDS };
    let each = b.run_for / 2;
    b.line(
        "\n## Shadow mode (GCRA 1/s per key, 16 tasks on 16 keys, every request over the quota)\n",
    );
    b.line(&format!(
        "{rounds} interleaved rounds of {each:?} each: the limiter in shadow mode (every request let through, marked shadowed) against the same quota enforcing (every request refused), neither caching refusals. Then each alone for {each:?} with the server's command count reset, for its round trips per decision.\n"
    ));
    b.line("| limiter | decisions/s (median) | let through | round trips per decision |");
    b.line("|---|---:|---:|---:|");
    let lg = b.lockguard().await;
    let quota = Quota::per_second(1);
    let shadowed = lg.rate_limiter("shadow-on", quota).shadow(true);
    let enforced = lg.rate_limiter("shadow-off", quota);
    let rates = rounds::interleaved(
        rounds,
        async |_| lockguard_decisions(&shadowed, each).await,
        async |_| lockguard_decisions(&enforced, each).await,
    )
    .await;
    let mut per_decision = Vec::new();
    for (name, limiter, median) in [
        ("shadow mode", &shadowed, rates.lockguard_median(|r| *r)),
        ("enforcing", &enforced, rates.raw_median(|r| *r)),
    ] {
        b.reset_stats().await;
        let (decided, allowed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        throughput(16, each, |t, stop, done| {
            let (limiter, decided, allowed) = (limiter.clone(), decided.clone(), allowed.clone());
            async move {
                let key = format!("k{t}");
                while !stop.load(Ordering::Relaxed) {
                    let d = limiter.check(&key).await.expect("decision");
                    decided.fetch_add(1, Ordering::Relaxed);
                    allowed.fetch_add(u64::from(d.allowed), Ordering::Relaxed);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await;
        let sent = b.commands(RAW_SENT).await.sent;
        let (decided, allowed) = (
            decided.load(Ordering::Relaxed),
            allowed.load(Ordering::Relaxed),
        );
        let per = sent as f64 / decided.max(1) as f64;
        per_decision.push(per);
        b.line(&format!(
            "| {name} | {median:.0} | {:.1}% | {per:.3} |",
            100.0 * allowed as f64 / decided.max(1) as f64
        ));
    }
    let ratio = rates.ratio(|r| *r);
    b.line(&format!(
        "\nShadow mode's rate over enforcing's: {} (range {}).",
        ratio.cell(),
        ratio.range_cell()
    ));
    b.target(
        "a shadow decision costs what a refusal costs: ≥ 0.9x its rate, the same round trips",
        format!(
            "{ratio}; {:.2} against {:.2} round trips",
            per_decision[0], per_decision[1]
        ),
        ratio.median >= 0.9 && (per_decision[0] - per_decision[1]).abs() < 0.01,
    );
}

/// A flood of requests from clients over their limit: 16 tasks, each on
/// its own key, checking as fast as they can for `run_for` after spending
/// the key's budget. Without the refusal cache every refused request is a
/// round trip; with it, one per `retry_after`.
async fn flood(b: &mut Bench) {
    b.line("\n## A flood of refused requests (GCRA 10/s per key, 16 tasks on 16 keys over their limit)\n");
    b.line("| limiter | checks/s | refused | store round trips | round trips per 1000 refused checks | admitted beyond the quota |");
    b.line("|---|---:|---:|---:|---:|---:|");
    let mut per_refusal = Vec::new();
    for (name, cache) in [("store only", false), ("`cache_refusals(10_000)`", true)] {
        let lg = b.lockguard().await;
        let mut limiter = lg.rate_limiter(&format!("flood-{cache}"), Quota::per_second(10));
        if cache {
            limiter = limiter.cache_refusals(10_000);
        }
        b.reset_stats().await;
        let admitted = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let started = std::time::Instant::now();
        let rate = throughput(16, b.run_for, |t, stop, done| {
            let (limiter, admitted, refused) = (limiter.clone(), admitted.clone(), refused.clone());
            async move {
                let key = format!("k{t}");
                while !stop.load(Ordering::Relaxed) {
                    let d = limiter.check(&key).await.expect("decision");
                    if d.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await;
        let elapsed = started.elapsed().as_secs_f64();
        let sent = b.commands(RAW_SENT).await.sent;
        let (admitted, refused) = (
            admitted.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
        );
        // GCRA 10/s with a burst of 10: what the store admits at most, per
        // key, over the whole run (warm-up included).
        let quota_allows = 16.0 * (10.0 + 10.0 * elapsed);
        let beyond = (admitted as f64 - quota_allows).max(0.0);
        let per = sent.saturating_sub(admitted) as f64 / refused.max(1) as f64;
        per_refusal.push(per);
        b.line(&format!(
            "| {name} | {rate:.0} | {refused} | {sent} | {:.3} | {beyond:.0} |",
            per * 1000.0
        ));
        b.target(
            &format!("flood, {name}: admits no more than the quota"),
            format!("{admitted} admitted, quota {quota_allows:.0}"),
            beyond == 0.0,
        );
    }
    let fewer = per_refusal[0] / per_refusal[1].max(f64::MIN_POSITIVE);
    b.target(
        "refusal cache: ≥ 10x fewer round trips per refused request",
        format!("{fewer:.0}x fewer"),
        fewer >= 10.0,
    );
}

async fn memory(b: &mut Bench) {
    b.line("\n## In-memory store (one task)\n");
    b.line("| operation | per second |");
    b.line("|---|---:|");
    let lg = Client::memory();
    let lock = lg.lock("m").lease(Duration::from_secs(30));
    let rate = throughput(1, b.run_for, |_, stop, done| {
        let lock = lock.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                let g = lock.try_acquire().await.expect("acquire");
                assert!(g.release().await.expect("release"));
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    b.line(&format!("| lock + unlock cycle | {rate:.0} |"));
    b.target(
        "in-memory lock cycles > 1,000,000/s on one core",
        format!("{rate:.0}/s"),
        rate > 1_000_000.0,
    );
    for (algorithm, name) in [
        (Algorithm::Gcra, "GCRA decision"),
        (Algorithm::FixedWindow, "fixed-window decision"),
        (Algorithm::SlidingWindow, "sliding-window decision"),
    ] {
        let limiter = lg
            .rate_limiter("m", Quota::per_second(1_000_000))
            .algorithm(algorithm);
        let rate = throughput(1, b.run_for, |_, stop, done| {
            let limiter = limiter.clone();
            async move {
                while !stop.load(Ordering::Relaxed) {
                    limiter.check("k").await.expect("decision");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await;
        b.line(&format!("| {name} | {rate:.0} |"));
    }
}

/// Rounds of the in-memory HTTP comparison: every variant once per round,
/// in turn, so a drift of the machine's speed hits them alike. Many short
/// rounds rather than a few long ones: a round's ratio is only as good as
/// the machine's speed was steady over it, and the median of many such
/// ratios moves less between runs.
const HTTP_ROUNDS: usize = 25;

async fn http_layers(b: &mut Bench) {
    b.line("\n## HTTP: an axum hello-world with each layer (in-memory store), 32 keep-alive connections\n");
    let rounds = if b.quick { 1 } else { HTTP_ROUNDS };
    let each = b.run_for * 2 / 5;
    b.line(&format!(
        "{rounds} rounds; in each, every row runs for {each:?} (after a {:?} warm-up), one after the other, so a drift of the machine's speed hits every row alike. The server runs on a runtime of its own (two workers); the load generator, in the same process, on another. Three figures per row, each the median over the rounds of the row's value divided by the hello-world's in the same round (the range is the lowest and highest of those ratios):\n\n- *server CPU*: the hello-world server's CPU time per request divided by the row's, counting the server's threads only, as the kernel's scheduler accounts them. This is the throughput ratio of a server whose cores are its bottleneck, and it does not move when another tenant or the load generator takes the cores. The targets are judged on it;\n- *throughput*: requests per second of wall time;\n- *process CPU*: the same as server CPU, counting the load generator's threads too, as earlier versions of this section did. The load generator's share is the same in every row, so it dilutes a layer's cost.\n\nEach connection comes from a loopback address of its own (127.0.0.2 to 127.0.0.33), so the rows keyed per client IP (served with `into_make_service_with_connect_info::<SocketAddr>()`, as those extractors need) spend 32 keys.\n",
        each / 5
    ));
    b.line("| layer | requests/s (median) | server CPU µs / request (median) | server CPU ratio | range | throughput ratio | range | process CPU ratio |");
    b.line("|---|---:|---:|---:|---:|---:|---:|---:|");
    let variants = [
        http::Variant::None,
        http::Variant::RateLimit,
        http::Variant::Lock,
        http::Variant::ConcurrencyLimit,
        http::Variant::Governor,
        http::Variant::RateLimitPerIp,
        http::Variant::GovernorPerIp,
        http::Variant::RateLimitDecision,
    ];
    let mut runs: Vec<Vec<Measured>> = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, v) in variants.iter().enumerate() {
            let (m, _) = http::requests_per_second(*v, Client::memory(), 32, each).await;
            runs[i].push(m);
        }
    }
    // Row `of` against row `to`, round by round, each the right way up so
    // that more is better: server CPU per request, throughput, process CPU
    // per request.
    let ratios = |of: usize, to: usize| -> [Vec<f64>; 3] {
        let pairs = || runs[of].iter().zip(&runs[to]);
        let per = |cpu: fn(&Measured) -> Duration| {
            pairs()
                .map(|(a, b)| cpu(b).as_secs_f64() / cpu(a).as_secs_f64())
                .collect()
        };
        [
            per(|m| m.server_cpu_per_cycle),
            pairs().map(|(a, b)| a.rate / b.rate).collect(),
            per(|m| m.cpu_per_cycle),
        ]
    };
    let mut server_ratio = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let [server, tput, process] = ratios(i, 0);
        let ((slo, shi), (tlo, thi)) = (range(&server), range(&tput));
        let (s, t, p) = (median(server), median(tput), median(process));
        server_ratio.push((s, t));
        let rate = median(runs[i].iter().map(|m| m.rate).collect());
        let per = median(
            runs[i]
                .iter()
                .map(|m| m.server_cpu_per_cycle.as_secs_f64() * 1e6)
                .collect(),
        );
        b.line(&format!(
            "| {} | {rate:.0} | {per:.1} | {s:.2}x | {slo:.2}–{shi:.2}x | {t:.2}x | {tlo:.2}–{thi:.2}x | {p:.2}x |",
            v.name(),
        ));
    }
    for (i, v) in variants.iter().enumerate().skip(1).take(3) {
        let (s, t) = server_ratio[i];
        b.target(
            &format!(
                "{} costs < 10% of hello-world throughput (server CPU ratio; throughput ratio beside it)",
                v.name()
            ),
            format!("{:.0}% ({:.0}%)", (1.0 - s) * 100.0, (1.0 - t) * 100.0),
            s > 0.9,
        );
    }
    // Against tower_governor, with a global key and with a key per client
    // IP (each crate's own peer-IP extractor): each measure and its range
    // over the rounds.
    for (what, of, to) in [("global key", 1, 4), ("a key per client IP", 5, 6)] {
        let [server, tput, _] = ratios(of, to);
        let ((slo, shi), (tlo, thi)) = (range(&server), range(&tput));
        let (s, t) = (median(server), median(tput));
        b.target(
            &format!(
                "in-memory RateLimitLayer ≥ 1.05x tower_governor, {what}: server CPU per request (median; range over the rounds)"
            ),
            format!("{s:.2}x ({slo:.2}–{shi:.2}x)"),
            s >= 1.05,
        );
        b.target(
            &format!(
                "in-memory RateLimitLayer ≥ 1.05x tower_governor, {what}: requests per second (median; range over the rounds)"
            ),
            format!("{t:.2}x ({tlo:.2}–{thi:.2}x)"),
            t >= 1.05,
        );
    }
    // Row `of` against tower_governor's row `to`, as a sentence.
    let against_governor = |what: &str, of: usize, to: usize| {
        let [server, tput, _] = ratios(of, to);
        let ((slo, shi), (tlo, thi)) = (range(&server), range(&tput));
        format!(
            "{what}, RateLimitLayer against tower_governor: {:.2}x on server CPU per request (range {slo:.2}–{shi:.2}x), {:.2}x on requests per second (range {tlo:.2}–{thi:.2}x).",
            median(server),
            median(tput)
        )
    };
    b.line(&format!(
        "\n{}",
        against_governor("With a global key", 1, 4)
    ));
    // Limits are mostly per client: the same comparison with a key per
    // client IP (32 connections, each from a loopback address of its own).
    b.line(&against_governor("With a key per client IP", 5, 6));
    // What passing the `Decision` on to the handler costs.
    b.line(&against_governor("With `decision_extension(true)`", 7, 4));
}

/// Rounds of the HTTP comparison on Redis (see [`HTTP_ROUNDS`]).
const REDIS_HTTP_ROUNDS: usize = 9;

/// The layers on Redis against the hello-world, and the concurrency limit
/// against the lock layer, in interleaved rounds.
async fn http_on_redis(b: &mut Bench) {
    let rounds = if b.quick { 1 } else { REDIS_HTTP_ROUNDS };
    let each = b.run_for / 2;
    b.line("\n## HTTP: the same layers on Redis, 32 keep-alive connections\n");
    b.line(&format!(
        "{rounds} rounds; in each, every row runs for {each:?} (after a {:?} warm-up), one after the other (the hello-world with no layer among them), on one lockguard client per row. Ratios are medians over the rounds of the row's requests/s divided by the hello-world's in the same round, with their range. Commands sent: what the layer's client sent to Redis over the rounds, warm-ups included, per request served (script-internal calls in brackets).\n",
        each / 5
    ));
    b.line("| layer | requests/s (median) | ratio to no layer | range | commands sent / request |");
    b.line("|---|---:|---:|---:|---:|");
    let variants = [
        http::Variant::None,
        http::Variant::RateLimit,
        http::Variant::Lock,
        http::Variant::ConcurrencyLimit,
    ];
    let mut clients = Vec::new();
    for v in variants {
        clients.push(match v {
            http::Variant::None => Client::memory(),
            _ => b.lockguard().await,
        });
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut counted = vec![(0u64, 0u64, 0u64); variants.len()];
    for _ in 0..rounds {
        for (i, v) in variants.iter().enumerate() {
            b.reset_stats().await;
            let (measured, served) =
                http::requests_per_second(*v, clients[i].clone(), 32, each).await;
            let c = b.commands(&["evalsha", "eval", "script|load"]).await;
            rates[i].push(measured.rate);
            counted[i].0 += c.sent;
            counted[i].1 += c.internal;
            counted[i].2 += served;
        }
    }
    let against = |of: usize, to: usize| -> Vec<f64> {
        rates[of]
            .iter()
            .zip(&rates[to])
            .map(|(a, b)| a / b)
            .collect()
    };
    for (i, v) in variants.iter().enumerate() {
        let ratios = against(i, 0);
        let (lo, hi) = range(&ratios);
        let (sent, internal, served) = counted[i];
        let per = |n: u64| n as f64 / served.max(1) as f64;
        b.line(&format!(
            "| {} | {:.0} | {:.2}x | {lo:.2}–{hi:.2}x | {:.2} ({:.2}) |",
            v.name(),
            median(rates[i].clone()),
            median(ratios),
            per(sent),
            per(internal),
        ));
    }
    let ratios = against(3, 2);
    let (lo, hi) = range(&ratios);
    let ratio = median(ratios);
    b.target(
        "ConcurrencyLimitLayer on Redis ≥ 0.8x LockLayer's requests/s (median of the rounds; range)",
        format!("{ratio:.2}x ({lo:.2}–{hi:.2}x)"),
        ratio >= 0.8,
    );
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let redis = std::process::Command::new(lockguard_testing::redis_server_binary())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores; {redis}; loopback TCP")
}

/// The sections `--only` can name, in the order a full run takes them.
const SECTIONS: [&str; 20] = [
    "uncontended",
    "floor",
    "contention",
    "tails",
    "cluster",
    "multi",
    "rw",
    "leader",
    "limiters",
    "shadow",
    "flood",
    "memory",
    "footprint",
    "http",
    "http-redis",
    "postgres",
    "mysql",
    "zookeeper",
    "etcd",
    "counters",
];

/// What `--help` prints.
const USAGE: &str = "\
usage: lockguard-bench [--quick] [--only SECTION] [--write FILE]
       lockguard-bench --charts FILE

  --quick         a smoke run: short measurements, one round
  --only SECTION  run one section: uncontended, floor, contention, tails, cluster,
                  multi, rw, leader, limiters, shadow, flood, memory, footprint, http,
                  http-redis, postgres, mysql, zookeeper, etcd, counters
  --write FILE    also write the report (with the notes) to FILE, its main
                  figures as SVG charts in benchmarks/ beside it, linked under
                  their tables (not with --only: the report would hold one
                  section); paragraphs of FILE's measured part the run does
                  not write (added by hand) are kept in FILE.kept
  --charts FILE   draw the charts of a report already written (no run)
  --help          print this
";

/// Checks the command line: `Err` with what is wrong (empty for `--help`).
fn check_args(args: &[String]) -> Result<(), String> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--quick" => {}
            "--help" | "-h" => return Err(String::new()),
            "--write" => {
                rest.next().ok_or("--write needs a file name\n")?;
            }
            "--charts" => {
                rest.next().ok_or("--charts needs a file name\n")?;
            }
            "--only" => {
                let section = rest.next().ok_or("--only needs a section name\n")?;
                if !SECTIONS.contains(&section.as_str()) {
                    return Err(format!("no section {section:?}\n"));
                }
            }
            other => return Err(format!("unknown argument {other:?}\n")),
        }
    }
    if args.iter().any(|a| a == "--only") && args.iter().any(|a| a == "--write") {
        return Err(
            "--write with --only would replace the whole report with one section: \
             run the section alone and copy its tables in\n"
                .into(),
        );
    }
    Ok(())
}

/// The paragraphs of `old`'s measured part (before the notes) that `new`
/// lacks, tables, charts and headings aside: text written into a report
/// by hand (a section's own run, its analysis), which a run would drop,
/// and prose the run words otherwise.
fn unwritten_paragraphs<'a>(old: &'a str, new: &str) -> Vec<&'a str> {
    let measured = old
        .split("\n## What bounds each figure")
        .next()
        .unwrap_or(old);
    measured
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with(['|', '#', '!']))
        .filter(|p| !new.contains(p))
        .collect()
}

#[tokio::main]
async fn main() {
    // A contender or burner process of the `tails` section.
    if tails::run_child().await {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match check_args(&args) {
        Ok(()) => {}
        Err(e) if e.is_empty() => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprint!("{e}{USAGE}");
            std::process::exit(2);
        }
    }
    if let Some(path) = args
        .iter()
        .position(|a| a == "--charts")
        .and_then(|i| args.get(i + 1))
    {
        let report = std::fs::read_to_string(path).expect("read the report");
        let drawn = charts::draw(&report, Path::new(path)).expect("draw the charts");
        std::fs::write(path, drawn).expect("write the report");
        eprintln!("drew the charts of {path}");
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let write = args
        .iter()
        .position(|a| a == "--write")
        .and_then(|i| args.get(i + 1).cloned());
    let server = RedisServer::start();
    if let Some(pid) = server.pid() {
        let _ = REDIS_PID.set(pid);
    }
    let admin = raw::connect(&server.url()).await;
    let mut b = Bench {
        server,
        admin,
        quick,
        run_for: if quick {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(2)
        },
        out: String::new(),
        targets: Vec::new(),
    };
    let mut head = String::new();
    let _ = writeln!(head, "# Benchmarks\n");
    let _ = writeln!(
        head,
        "Generated by `cargo run --release -p lockguard-bench -- --write BENCHMARKS.md`; every number in the sections before \"What bounds each figure\" comes from that run; the notes from there on name the command behind each figure of their own. The charts (SVG, in `benchmarks/`, each under the table it is drawn from) are drawn from the tables by the same command, or again from the file by `--charts BENCHMARKS.md`. Each lockguard figure stands beside raw redis-rs sending the same Redis commands on the same kind of connection (a reconnecting `ConnectionManager`, `TCP_NODELAY`), against the same `redis-server` the harness starts, in the same process. A round trip is one command the client sends; an `EVALSHA` is one round trip whatever it calls inside.\n"
    );
    let _ = writeln!(head, "Machine: {}.\n", machine());
    let _ = writeln!(
        head,
        "Each figure is a {:?} measurement after a {:?} warm-up; the client and the server share the machine's cores.",
        b.run_for,
        b.run_for / 5
    );
    print!("{head}");
    b.out.push_str(&head);
    // `--only NAME` runs one section (for profiling).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if run("uncontended") {
        uncontended(&mut b).await;
    }
    if run("floor") {
        floor::floor(&mut b).await;
    }
    if run("contention") {
        contention(&mut b).await;
    }
    if run("tails") {
        tails::section(&mut b).await;
    }
    if run("cluster") {
        cluster::section(&mut b).await;
    }
    if run("multi") {
        multi::section(&mut b).await;
    }
    if run("rw") {
        rw::section(&mut b).await;
    }
    if run("leader") {
        leader::section(&mut b).await;
    }
    if run("limiters") {
        limiters(&mut b).await;
    }
    if run("shadow") {
        shadow(&mut b).await;
    }
    if run("flood") {
        flood(&mut b).await;
    }
    if run("memory") {
        memory(&mut b).await;
    }
    if run("footprint") {
        footprint::section(&mut b).await;
    }
    if run("http") {
        http_layers(&mut b).await;
    }
    if run("http-redis") {
        http_on_redis(&mut b).await;
    }
    if run("postgres") {
        postgres::section(&mut b).await;
    }
    if run("mysql") {
        mysql::section(&mut b).await;
    }
    if run("zookeeper") {
        zookeeper::section(&mut b).await;
    }
    if run("etcd") {
        etcd::section(&mut b).await;
    }
    if run("counters") {
        counters::heading(&mut b);
        etcd::contended_counters(&mut b).await;
        zookeeper::contended_counters(&mut b).await;
    }
    b.line("\n## Targets, checked against this run\n");
    b.line("| target | measured | |");
    b.line("|---|---:|---|");
    for t in std::mem::take(&mut b.targets) {
        b.line(&t);
    }
    if let Some(path) = write {
        let notes = include_str!("notes.md");
        let report = format!("{}\n{notes}", b.out);
        if let Ok(old) = std::fs::read_to_string(&path) {
            let unwritten = unwritten_paragraphs(&old, &report);
            if !unwritten.is_empty() {
                let kept = format!("{path}.kept");
                std::fs::write(&kept, unwritten.join("\n\n") + "\n")
                    .expect("write the kept paragraphs");
                eprintln!(
                    "{} paragraphs of {path}'s measured part are not in this run's report (added by hand, or worded otherwise): kept in {kept}",
                    unwritten.len()
                );
            }
        }
        let report = charts::draw(&report, Path::new(&path)).expect("draw the charts");
        std::fs::write(&path, report).expect("write the report");
        eprintln!("wrote {path}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_with_only_is_refused() {
        let args: Vec<String> = ["--only", "mysql", "--write", "BENCHMARKS.md"]
            .map(String::from)
            .into();
        let err = check_args(&args).unwrap_err();
        assert!(err.contains("one section"), "{err}");
        let args: Vec<String> = ["--write", "BENCHMARKS.md"].map(String::from).into();
        assert!(check_args(&args).is_ok());
    }

    #[test]
    fn paragraphs_added_by_hand_are_found_and_tables_are_not() {
        let old = "# Benchmarks\n\nMachine: a.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n**2026-12-06: a run of its own.** Figures.\n\n## What bounds each figure\n\n- a note\n";
        let new = "# Benchmarks\n\nMachine: a.\n\n| a | b |\n|---|---|\n| 3 | 4 |\n\n## What bounds each figure\n\n- a note\n";
        assert_eq!(
            unwritten_paragraphs(old, new),
            ["**2026-12-06: a run of its own.** Figures."]
        );
        assert!(unwritten_paragraphs(new, new).is_empty());
    }

    /// `--write` appends `notes.md` to the report it generates: a note
    /// added to BENCHMARKS.md alone would go with the next run.
    #[test]
    fn benchmarks_md_ends_with_the_notes() {
        let report = include_str!("../../BENCHMARKS.md");
        let notes = include_str!("notes.md");
        assert!(
            report.ends_with(notes),
            "BENCHMARKS.md does not end with lockguard-bench/src/notes.md: write a note in both"
        );
    }
}
