//! Handoff tails under load: 64 contenders on one key, a client each, as
//! tasks of the bench process and as processes of their own, on a quiet
//! machine and beside a neighbour process that keeps one core busy.
//!
//! The child processes are this binary again, told what to be by
//! [`CHILD_ENV`]: a contender (one client, one lock, its acquisitions and
//! releases stamped on the system clock, which every process reads alike)
//! or a burner (one thread spinning until it is killed).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::stats::{Counted, percentile, us};
use crate::{Bench, Contention, THINK, contended_lockguard, hold, median, range};

/// Set in a child's environment: what the child is (`contender` or `burn`).
const CHILD_ENV: &str = "LOCKGUARD_BENCH_CHILD";
/// Set in a contender's environment: the Redis URL, or a Redis Cluster's
/// (`redis+cluster://host:port,host:port,...`).
const URL_ENV: &str = "LOCKGUARD_BENCH_URL";
/// The key the contenders share (the in-process rows use it too).
const KEY: &str = "contended";
/// Contenders in every row.
const CONTENDERS: usize = 64;
/// Rounds: each runs every variant once, in turn.
const ROUNDS: usize = 3;

/// Runs the child this process was started as, if it was started as one;
/// returns `false` in the bench process itself.
pub(crate) async fn run_child() -> bool {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("contender") => {
            contender().await;
            true
        }
        Ok("burn") => burn(),
        Ok(other) => panic!("unknown {CHILD_ENV}={other:?}"),
        Err(_) => false,
    }
}

/// Nanoseconds on the system clock, which every process on the machine
/// reads alike.
fn now_ns() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_nanos(),
    )
    .expect("nanoseconds fit in u64")
}

/// A contender process: takes the lock, holds it, releases it and thinks,
/// like the in-process contenders, until its stdin closes. It prints `up`
/// once it has held the lock, then, when it stops, a line per event:
/// `a NS` (an acquire returned), `r NS` (a release is called) or `d NS`
/// (the release answered).
async fn contender() {
    let url = std::env::var(URL_ENV).expect("LOCKGUARD_BENCH_URL");
    let client = match url.strip_prefix("redis+cluster://") {
        Some(hosts) => Client::connect_cluster(hosts.split(',').map(|h| format!("redis://{h}")))
            .await
            .expect("connect to the cluster"),
        None => Client::connect_redis(&url).await.expect("connect"),
    };
    let lock = client
        .lock(KEY)
        .lease(Duration::from_secs(10))
        .wait(Duration::from_secs(120));
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut rest = Vec::new();
            let _ = tokio::io::stdin().read_to_end(&mut rest).await;
            stop.store(true, Ordering::Relaxed);
        }
    });
    let mut events: Vec<(char, u64)> = Vec::with_capacity(4096);
    while !stop.load(Ordering::Relaxed) {
        let g = lock.acquire().await.expect("acquire");
        events.push(('a', now_ns()));
        if events.len() == 1 {
            println!("up");
        }
        hold().await;
        events.push(('r', now_ns()));
        g.release().await.expect("release");
        events.push(('d', now_ns()));
        tokio::time::sleep(THINK).await;
    }
    let mut out = String::with_capacity(events.len() * 24);
    for (kind, ns) in events {
        out.push_str(&format!("{kind} {ns}\n"));
    }
    print!("{out}");
}

/// A burner process: one thread spinning, a core's worth of work, until
/// it is killed.
fn burn() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// Starts this binary as the child `role`.
fn child(role: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().expect("the bench binary"))
        .env(CHILD_ENV, role)
        .env(URL_ENV, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a child process")
}

/// What a contender recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// An acquire returned.
    Acquired,
    /// A release is called.
    Releasing,
    /// The release answered.
    Released,
}

/// One contender process's events, read from its stdout: when (ns on the
/// system clock) and what.
type Events = Vec<(u64, Event)>;

/// `contenders` contender processes on the key, clients of the Redis at
/// `url`: counting starts once every one has held the lock and a fifth of
/// the run has passed, as in the in-process rows. The commands are counted
/// where `url` is the bench's own server.
pub(crate) async fn contended_processes(
    b: &mut Bench,
    url: &str,
    contenders: usize,
) -> (Contention, Option<Counted>) {
    let counts = url == b.server.url();
    let up = Arc::new(AtomicUsize::new(0));
    let mut children = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..contenders {
        let mut c = child("contender", url);
        let stdout = c.stdout.take().expect("piped stdout");
        let up = up.clone();
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut events = Events::new();
            while let Some(line) = lines.next_line().await.expect("read a contender") {
                if line == "up" {
                    up.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let (kind, ns) = line.split_once(' ').expect("an event");
                let event = match kind {
                    "a" => Event::Acquired,
                    "r" => Event::Releasing,
                    "d" => Event::Released,
                    other => panic!("unknown event {other:?}"),
                };
                events.push((ns.parse().expect("a time"), event));
            }
            events
        }));
        children.push(c);
    }
    let warm = Instant::now();
    tokio::time::sleep(b.run_for / 5).await;
    while up.load(Ordering::Relaxed) < contenders {
        assert!(
            warm.elapsed() < Duration::from_secs(120),
            "not every contender process acquired the lock within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if counts {
        b.log_every_call(true).await;
        b.reset_stats().await;
    }
    let start = now_ns();
    tokio::time::sleep(b.run_for).await;
    let end = now_ns();
    let counted = if counts {
        let counted = b.commands_by_origin().await;
        b.log_every_call(false).await;
        Some(counted)
    } else {
        None
    };
    // Closing their stdin stops them; each prints its events and exits.
    for c in &mut children {
        drop(c.stdin.take());
    }
    let mut all = Vec::new();
    for (who, r) in readers.into_iter().enumerate() {
        all.extend(
            r.await
                .expect("reader")
                .into_iter()
                .map(|(ns, event)| (ns, event, who)),
        );
    }
    for mut c in children {
        assert!(
            c.wait().await.expect("wait").success(),
            "a contender failed"
        );
    }
    (merge(all, contenders, start, end), counted)
}

/// Handoffs, release round trips and acquisitions from every process's
/// events: an acquire in `start..end` after a release by another
/// contender is a handoff; a release called in `start..end` and answered
/// is a round trip.
fn merge(
    mut events: Vec<(u64, Event, usize)>,
    contenders: usize,
    start: u64,
    end: u64,
) -> Contention {
    events.sort_unstable();
    let mut last: Option<(u64, usize)> = None;
    let mut releasing = vec![None; contenders];
    let mut handoffs = Vec::new();
    let mut releases = Vec::new();
    let mut counts = vec![0u64; contenders];
    let within = |ns: u64| (start..end).contains(&ns);
    for (ns, event, who) in events {
        match event {
            Event::Releasing => {
                last = Some((ns, who));
                releasing[who] = Some(ns);
            }
            Event::Released => {
                if let Some(at) = releasing[who].take().filter(|at| within(*at)) {
                    releases.push(Duration::from_nanos(ns.saturating_sub(at)));
                }
            }
            Event::Acquired if within(ns) => {
                counts[who] += 1;
                if let Some((at, by)) = last
                    && by != who
                {
                    handoffs.push(Duration::from_nanos(ns.saturating_sub(at)));
                }
            }
            Event::Acquired => {}
        }
    }
    handoffs.sort();
    releases.sort();
    let total: u64 = counts.iter().sum();
    let (min, max) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    Contention {
        rate: total as f64 / Duration::from_nanos(end - start).as_secs_f64(),
        handoffs,
        releases,
        acquisitions: total,
        evenness: if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        },
    }
}

/// The variants, in the order each round runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    processes: bool,
    neighbour: bool,
}

impl Variant {
    const ALL: [Self; 4] = [
        Self {
            processes: false,
            neighbour: false,
        },
        Self {
            processes: false,
            neighbour: true,
        },
        Self {
            processes: true,
            neighbour: false,
        },
        Self {
            processes: true,
            neighbour: true,
        },
    ];

    fn name(self) -> String {
        format!(
            "{}, {}",
            if self.processes {
                "a process each"
            } else {
                "tasks of one process, a client each"
            },
            if self.neighbour {
                "a core burnt beside"
            } else {
                "quiet"
            }
        )
    }
}

/// One round of one variant.
struct Round {
    c: Contention,
    sent: f64,
}

pub(crate) async fn section(b: &mut Bench) {
    b.line("\n## Handoff tails under load: 64 contenders on one key, a client each\n");
    b.line(&format!("The contention workload (hold ~1 ms, think ~0.5 ms) with {CONTENDERS} contenders, each with its own client: as tasks of the bench process, and as {CONTENDERS} processes of their own (this binary started again, one contender each, its events stamped on the system clock and merged here). *A core burnt beside*: a neighbour process spins one thread for the whole row, a core's worth of other work on the machine's two. {ROUNDS} rounds; each runs every variant once, in turn, for {:?} after every contender has held the lock once and a fifth of that has passed. Percentiles are of each round's handoffs; the table gives their median over the rounds and their range. Release round trip: from the holder's release call to its answer, beside the handoff (from that call to the next holder's acquire returning), so the wake-up's share shows. Scripts: commands the clients sent per acquisition (median of the rounds).\n", b.run_for));
    b.line("| contenders | acquisitions/s | handoff p50 | handoff p99 (range) | handoff max (median) | release round trip p50 / p99 | scripts / acquisition | min/max acquisitions per contender |");
    b.line("|---|---:|---:|---:|---:|---:|---:|---:|");
    let rounds = if b.quick { 1 } else { ROUNDS };
    let mut found: Vec<(Variant, Vec<Round>)> =
        Variant::ALL.iter().map(|v| (*v, Vec::new())).collect();
    for _ in 0..rounds {
        for (v, rs) in &mut found {
            let url = b.server.url();
            let mut burner = v.neighbour.then(|| child("burn", &url));
            let (c, counted) = if v.processes {
                let (c, counted) = contended_processes(b, &url, CONTENDERS).await;
                (c, counted.expect("counted on the bench's server"))
            } else {
                contended_lockguard(b, CONTENDERS, CONTENDERS).await
            };
            if let Some(burner) = &mut burner {
                burner.kill().await.expect("kill the burner");
            }
            let sent = counted.sent as f64 / c.acquisitions.max(1) as f64;
            rs.push(Round { c, sent });
        }
    }
    for (v, rs) in &found {
        let f = Figures::of(rs.iter().map(|r| &r.c));
        let sent = median(rs.iter().map(|r| r.sent).collect());
        b.line(&format!(
            "| {} | {} | {sent:.2} | {:.2} |",
            v.name(),
            f.timing_cells(),
            f.evenness,
        ));
        if *v != Variant::ALL[0] {
            b.target(
                &format!(
                    "handoff p99 < 1 ms, 64 contenders, {} (median of {rounds} rounds; range)",
                    v.name()
                ),
                f.p99_range(),
                f.p99 < Duration::from_millis(1),
            );
        }
    }
}

/// The figures of a row: medians over its rounds (each round's
/// percentiles first), with the range of the handoff p99.
pub(crate) struct Figures {
    pub(crate) rate: f64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    p99_lo: Duration,
    p99_hi: Duration,
    pub(crate) max: Duration,
    pub(crate) release_p50: Duration,
    pub(crate) release_p99: Duration,
    pub(crate) evenness: f64,
}

impl Figures {
    pub(crate) fn of<'a>(rounds: impl Iterator<Item = &'a Contention> + Clone) -> Self {
        let each = |f: &dyn Fn(&Contention) -> f64| median(rounds.clone().map(f).collect());
        let at = |q: f64, releases: bool| {
            let xs: Vec<f64> = rounds
                .clone()
                .map(|c| {
                    let xs = if releases { &c.releases } else { &c.handoffs };
                    percentile(xs, q).as_secs_f64()
                })
                .collect();
            xs
        };
        let secs = Duration::from_secs_f64;
        let p99 = at(99.0, false);
        let (lo, hi) = range(&p99);
        Self {
            rate: each(&|c| c.rate),
            p50: secs(median(at(50.0, false))),
            p99: secs(median(p99)),
            p99_lo: secs(lo),
            p99_hi: secs(hi),
            max: secs(median(at(100.0, false))),
            release_p50: secs(median(at(50.0, true))),
            release_p99: secs(median(at(99.0, true))),
            evenness: each(&|c| c.evenness),
        }
    }

    /// The table cells of the rate, the handoff's p50, p99 (with its
    /// range) and max, and the release round trip's p50 and p99.
    pub(crate) fn timing_cells(&self) -> String {
        format!(
            "{:.0} | {} | {} | {} | {} / {}",
            self.rate,
            us(self.p50),
            self.p99_range(),
            us(self.max),
            us(self.release_p50),
            us(self.release_p99),
        )
    }

    /// The handoff p99 with its range: `1.2 ms (0.9 ms–1.5 ms)`.
    pub(crate) fn p99_range(&self) -> String {
        format!("{} ({}–{})", us(self.p99), us(self.p99_lo), us(self.p99_hi))
    }
}
