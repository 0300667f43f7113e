//! The etcd store beside etcd's own lock service and its election service,
//! both called through `etcd-client`, against one member the harness
//! starts.
//!
//! etcd's `Lock` RPC (`v3lockpb`) runs the `concurrency` package's mutex
//! inside the server: it creates the caller's key under the lock's prefix
//! on the caller's lease and waits for its predecessors itself, and
//! `Unlock` deletes the key. `Campaign` and `Resign` (`v3electionpb`) do
//! the same for an election. The third yardstick is that mutex run from the
//! client, as the `concurrency` package's `Mutex` does it (etcd 3.5's
//! `Lock` and `Unlock`), sending its requests through `etcd-client`: the
//! raw recipe a user without lockguard writes, waiting in the client.
//!
//! Round trips are counted by the server: `grpc_server_msg_received_total`
//! in its Prometheus metrics counts every request message it read from a
//! client, a unary call's one and each one on a stream (a watch's create
//! and cancel, a lease's keep-alive). What the lock and election services
//! read and write inside the server is not a request, and is not counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, LeaderKey, LockOptions, PutOptions, ResignOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use lockguard_core::Client;
use lockguard_etcd::BuilderExt as _;
use lockguard_etcd::testing::{EtcdServer, etcd_binary};

use crate::counters::{self, RawCounter};
use crate::rounds::{Spread, turning};
use crate::stats::{percentile, us};
use crate::{Bench, Contention, HOLD, Recorder, THINK, contend, hold, measure, median, throughput};

/// Every lease, lockguard's and the yardsticks': long enough for the 10 s
/// lease of the shared contention loop (a renewal counts for two thirds of
/// the client's lease at most), and for a yardstick's run without
/// keep-alives.
const LEASE_TTL: Duration = Duration::from_secs(20);
/// Rounds of the uncontended comparison, as on the other stores.
const UNCONTENDED_ROUNDS: usize = 7;
/// Rounds of the contention comparison: each a run of every variant.
const CONTENTION_ROUNDS: usize = 3;

/// The variants, in the tables' order: lockguard, then the yardsticks.
const VARIANTS: [&str; 4] = ["lockguard", "`Lock` RPC", "election", "`concurrency` mutex"];

/// A yardstick: one of etcd's own services, or the client-side recipe.
#[derive(Debug, Clone, Copy)]
enum Recipe {
    /// `Lock` / `Unlock`.
    Lock,
    /// `Campaign` / `Resign`.
    Election,
    /// The `concurrency` package's `Mutex`, run from the client.
    Mutex,
}

impl Recipe {
    /// The yardstick of variant `v` (none for lockguard's, 0).
    fn of(v: usize) -> Option<Self> {
        match v {
            0 => None,
            1 => Some(Self::Lock),
            2 => Some(Self::Election),
            _ => Some(Self::Mutex),
        }
    }
}

/// What a yardstick holds: the `Lock` RPC's key, the election's leader
/// key, or the `concurrency` mutex's key.
enum Held {
    Lock(Vec<u8>),
    Leader(LeaderKey),
    Key(String),
}

async fn lockguard(server: &EtcdServer) -> Client {
    Client::builder()
        .etcd_lease_ttl(LEASE_TTL)
        .connect_etcd(&server.endpoint())
        .await
        .expect("connect to etcd")
}

async fn raw_client(server: &EtcdServer) -> etcd_client::Client {
    etcd_client::Client::connect([format!("http://{}", server.endpoint())], None)
        .await
        .expect("connect to etcd")
}

/// A lease of [`LEASE_TTL`] for a yardstick's run, not kept alive.
async fn grant(client: &mut etcd_client::Client) -> i64 {
    let ttl = LEASE_TTL.as_secs() as i64;
    client.lease_grant(ttl, None).await.expect("lease").id()
}

/// Takes `name` with `recipe` under `lease`: the call returns once the
/// caller holds (the server waits for the predecessors).
async fn raw_acquire(
    client: &mut etcd_client::Client,
    recipe: Recipe,
    name: &str,
    lease: i64,
) -> Held {
    match recipe {
        Recipe::Lock => {
            let options = LockOptions::new().with_lease(lease);
            let locked = client.lock(name, Some(options)).await.expect("lock");
            Held::Lock(locked.key().to_vec())
        }
        Recipe::Election => {
            let mut won = client.campaign(name, "", lease).await.expect("campaign");
            Held::Leader(won.take_leader().expect("a leader key"))
        }
        Recipe::Mutex => Held::Key(mutex_lock(client, name, lease).await),
    }
}

/// The range read of `response`, an operation's of a transaction.
fn range(response: &TxnOpResponse) -> &etcd_client::GetResponse {
    match response {
        TxnOpResponse::Get(get) => get,
        other => panic!("a range answer expected, got {other:?}"),
    }
}

/// The `concurrency` package's `Mutex.Lock` (etcd 3.5), request for
/// request: one transaction creates the caller's key `name/<lease in hex>`
/// on its lease (or reads it, when it exists) and reads the prefix's first
/// key; a caller not first then waits for the deletion of each key created
/// before its own (`waitDeletes`: read the last such key, watch it from
/// the read's revision until it is deleted, read again until none is
/// left), and reads its own key (its session still lives). Answers the
/// key, held.
async fn mutex_lock(client: &mut etcd_client::Client, name: &str, lease: i64) -> String {
    let prefix = format!("{name}/");
    let key = format!("{prefix}{lease:x}");
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix.as_str(), Some(first.clone())),
        ])
        .or_else([
            TxnOp::get(key.as_str(), None),
            TxnOp::get(prefix.as_str(), Some(first)),
        ]);
    let joined = client.txn(txn).await.expect("txn");
    let answers = joined.op_responses();
    let mine = if joined.succeeded() {
        joined.header().expect("a header").revision()
    } else {
        range(&answers[0]).kvs()[0].create_revision()
    };
    let owner = range(&answers[1]).kvs();
    if owner.is_empty() || owner[0].create_revision() == mine {
        return key;
    }
    let last_before = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1)
        .with_max_create_revision(mine - 1);
    loop {
        let read = client
            .get(prefix.as_str(), Some(last_before.clone()))
            .await
            .expect("get");
        let Some(last) = read.kvs().first() else {
            break;
        };
        let from = read.header().expect("a header").revision();
        let options = WatchOptions::new().with_start_revision(from);
        let mut watch = client
            .watch(last.key(), Some(options))
            .await
            .expect("watch");
        // Until the deletion; then the stream is dropped, its one watch
        // with it (Go's client, too, closes a stream whose last watch is
        // cancelled rather than send the cancel).
        'deleted: loop {
            let answer = watch.message().await.expect("watch").expect("watch ended");
            if answer
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                break 'deleted;
            }
        }
    }
    let own = client.get(key.as_str(), None).await.expect("get");
    assert!(!own.kvs().is_empty(), "the session's key is gone");
    key
}

/// Gives up what [`raw_acquire`] took, awaiting the answer.
async fn raw_release(client: &mut etcd_client::Client, held: Held) {
    match held {
        Held::Lock(key) => {
            client.unlock(key).await.expect("unlock");
        }
        Held::Leader(leader) => {
            let options = ResignOptions::new().with_leader(leader);
            client.resign(Some(options)).await.expect("resign");
        }
        Held::Key(key) => {
            client.delete(key, None).await.expect("delete");
        }
    }
}

/// What the server has counted: the request messages it read from
/// clients, by gRPC method; its write-ahead log's fsyncs; and the CPU time
/// its threads ran.
#[derive(Debug, Clone, Default)]
struct Counts {
    requests: BTreeMap<String, u64>,
    fsyncs: u64,
    fsync_time: Duration,
    cpu: Duration,
}

impl Counts {
    /// What the server's metrics (`GET /metrics` on its client port) say
    /// so far, `grpc_server_msg_received_total` summed over services and
    /// call types for each method, `etcd_disk_wal_fsync_duration_seconds`,
    /// and the scheduler's accounting of its threads
    /// (`/proc/PID/task/*/schedstat`).
    fn read(server: &EtcdServer) -> Self {
        let metrics = server
            .request("GET", "/metrics", None, Duration::from_secs(5))
            .expect("GET /metrics");
        assert_eq!(metrics.status, 200, "GET /metrics: {}", metrics.body);
        let mut counts = Self::default();
        for line in metrics.body.lines() {
            if let Some(sample) = line.strip_prefix("grpc_server_msg_received_total{") {
                let (labels, value) = sample.rsplit_once("} ").expect("a sample");
                let method = labels
                    .split(',')
                    .find_map(|l| l.strip_prefix("grpc_method=\"")?.strip_suffix('"'))
                    .expect("grpc_method");
                *counts.requests.entry(method.to_owned()).or_default() +=
                    sample_value(value) as u64;
            } else if let Some(value) =
                line.strip_prefix("etcd_disk_wal_fsync_duration_seconds_count ")
            {
                counts.fsyncs = sample_value(value) as u64;
            } else if let Some(value) =
                line.strip_prefix("etcd_disk_wal_fsync_duration_seconds_sum ")
            {
                counts.fsync_time = Duration::from_secs_f64(sample_value(value));
            }
        }
        assert!(
            !counts.requests.is_empty(),
            "no grpc_server_msg_received_total in etcd's /metrics"
        );
        counts.cpu = server.pid().map_or(Duration::ZERO, process_cpu);
        counts
    }

    /// What the server has counted since `self` was read.
    fn since(&self, server: &EtcdServer) -> Self {
        let now = Self::read(server);
        Self {
            requests: now
                .requests
                .into_iter()
                .map(|(m, n)| {
                    let before = self.requests.get(&m).copied().unwrap_or(0);
                    (m, n - before)
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            fsyncs: now.fsyncs - self.fsyncs,
            fsync_time: now.fsync_time.saturating_sub(self.fsync_time),
            cpu: now.cpu.saturating_sub(self.cpu),
        }
    }

    fn add(&mut self, other: &Self) {
        for (m, n) in &other.requests {
            *self.requests.entry(m.clone()).or_default() += n;
        }
        self.fsyncs += other.fsyncs;
        self.fsync_time += other.fsync_time;
        self.cpu += other.cpu;
    }

    /// Every request message.
    fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Requests per `cycles`, method by method, the most sent first:
    /// `Txn 1.00 + DeleteRange 1.00`.
    fn per(&self, cycles: u64) -> String {
        let mut by_method: Vec<(&String, &u64)> = self.requests.iter().collect();
        by_method.sort_by(|a, b| b.1.cmp(a.1));
        let parts: Vec<String> = by_method
            .iter()
            .map(|(m, n)| format!("{m} {:.2}", **n as f64 / cycles.max(1) as f64))
            .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(" + ")
        }
    }
}

/// A sample's value in Prometheus's text format (`217`, `1.5e+06`).
fn sample_value(text: &str) -> f64 {
    text.trim().parse().expect("a sample's value")
}

/// The CPU time every thread of process `pid` has run.
fn process_cpu(pid: u32) -> Duration {
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

/// The version line of the `etcd` binary the harness runs.
fn etcd_version() -> String {
    std::process::Command::new(etcd_binary())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            let line = out.lines().find(|l| l.starts_with("etcd Version:"))?;
            Some(line.trim_start_matches("etcd Version:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown version".to_owned())
}

/// The etcd section: a member of its own, the uncontended cycles, then the
/// contention.
pub(crate) async fn section(b: &mut Bench) {
    let server = EtcdServer::start();
    let started = Counts::read(&server);
    b.line("\n## etcd: lockguard beside etcd's own `Lock` RPC, its election and the `concurrency` mutex\n");
    b.line(&format!("One etcd member ({}, `lockguard_etcd::testing::EtcdServer`: `--heartbeat-interval=50 --election-timeout=500`) the harness starts, on loopback TCP. etcd 3.4 has no way to skip its write-ahead log's fsync, so every write, on every side, waits for the disk (the Redis, PostgreSQL and ZooKeeper sections run their servers without durable writes); the fsyncs per cycle are in the tables, and their mean time at the end of the section. lockguard connects with `Client::builder().etcd_lease_ttl({LEASE_TTL:?}).connect_etcd(...)`. Three yardsticks through `etcd-client`, each on a lease of {LEASE_TTL:?} granted before its run (and not kept alive, the runs being shorter): etcd's lock service, `Lock(name, lease)` (the server creates the caller's key under the name's prefix and waits for its predecessors itself) then `Unlock(key)`; its election service, `Campaign(name, \"\", lease)` then `Resign(leader)`, the same recipe for an election; and the raw recipe, the `concurrency` package's `Mutex` (etcd 3.5's `Lock` and `Unlock`, what the `Lock` RPC runs inside the server) run from the client request for request: a transaction creates the caller's key on its lease and reads the prefix's first key; a caller not first reads the last key created before its own, watches it from that read's revision until it is deleted and reads again until none is left, then reads its own key (its session lives); the release deletes the key. Requests are what the server read from clients (`grpc_server_msg_received_total` in its `/metrics`: a unary call counts once, a stream each message on it, a watch's create and cancel, a lease's keep-alive); the reads, writes and watches the lock and election services make inside the server are not requests and are not counted (their writes' fsyncs are). etcd CPU is the member's threads' (`/proc/PID/task/*/schedstat`).\n", etcd_version()));
    uncontended(b, &server).await;
    contention(b, &server).await;
    let all = started.since(&server);
    let mean = all.fsync_time / u32::try_from(all.fsyncs.max(1)).unwrap_or(u32::MAX);
    b.line(&format!(
        "\nThe member's write-ahead log fsyncs over this section: {}, {} each on average (`etcd_disk_wal_fsync_duration_seconds`).",
        all.fsyncs,
        us(mean)
    ));
}

/// One run of a variant: its rate and client CPU per cycle (measured after
/// the warm-up), its cycles and what the server counted (the warm-up's
/// included).
struct Block {
    rate: f64,
    client_cpu: Duration,
    cycles: u64,
    counts: Counts,
}

async fn uncontended(b: &mut Bench, server: &EtcdServer) {
    let rounds = if b.quick { 1 } else { UNCONTENDED_ROUNDS };
    let each = b.run_for / 2;
    b.line("### Uncontended lock + unlock cycles (distinct keys)\n");
    b.line(&format!(
        "{rounds} rounds; in each, for each number of tasks, lockguard (`lock(name).acquire()`, `release()`), the `Lock` RPC, the election and the `concurrency` mutex run for {each:?} each (after a {:?} warm-up), one after the other, the order turning by one each round. Every run takes names no run took before. Ratios are medians over the rounds of lockguard's rate divided by the yardstick's in the same round, with the lowest and highest. One lockguard client and one `etcd-client` client serve every round (a yardstick's tasks share its lease, each on a name of its own).\n",
        each / 5
    ));
    b.line("| tasks | lockguard cycles/s (median) | `Lock` RPC (median) | election (median) | `concurrency` mutex (median) | ratio to `Lock` RPC | range | ratio to election | range | ratio to mutex | range | requests / cycle, lockguard / `Lock` RPC / election / mutex |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let lg = lockguard(server).await;
    let raw = raw_client(server).await;
    let mut costs = Vec::new();
    for tasks in [1, 16] {
        let blocks = turning(rounds, VARIANTS.len(), async |round, variant| {
            let recipe = Recipe::of(variant);
            let lease = match recipe {
                Some(_) => grant(&mut raw.clone()).await,
                None => 0,
            };
            let cycles = Arc::new(AtomicU64::new(0));
            let before = Counts::read(server);
            let m = measure(tasks, each, |t, stop, done| {
                let name = format!("r{round}:{tasks}:v{variant}:u:{t}");
                let lock = lg.lock(&name);
                let (mut raw, cycles) = (raw.clone(), cycles.clone());
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        match recipe {
                            None => {
                                let g = lock.acquire().await.expect("uncontended acquire");
                                assert!(g.release().await.expect("release"));
                            }
                            Some(recipe) => {
                                let held = raw_acquire(&mut raw, recipe, &name, lease).await;
                                raw_release(&mut raw, held).await;
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .await;
            let counts = before.since(server);
            if recipe.is_some() {
                raw.clone().lease_revoke(lease).await.expect("revoke");
            }
            Block {
                rate: m.rate,
                client_cpu: m.cpu_per_cycle,
                cycles: cycles.load(Ordering::Relaxed),
                counts,
            }
        })
        .await;
        // What the server counted and the cycles, each variant's, over
        // every round.
        let totals: Vec<(Counts, u64)> = blocks
            .iter()
            .map(|runs| {
                let mut counts = Counts::default();
                for r in runs {
                    counts.add(&r.counts);
                }
                (counts, runs.iter().map(|r| r.cycles).sum())
            })
            .collect();
        let per: Vec<f64> = totals
            .iter()
            .map(|(c, n)| c.total() as f64 / (*n).max(1) as f64)
            .collect();
        let rates = |v: usize| median(blocks[v].iter().map(|r| r.rate).collect());
        let against = |v: usize| {
            Spread::of(
                blocks[0]
                    .iter()
                    .zip(&blocks[v])
                    .map(|(l, r)| l.rate / r.rate)
                    .collect(),
            )
        };
        let (lock_rpc, election, mutex) = (against(1), against(2), against(3));
        b.line(&format!(
            "| {tasks} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} / {:.2} / {:.2} |",
            rates(0),
            rates(1),
            rates(2),
            rates(3),
            lock_rpc.cell(),
            lock_rpc.range_cell(),
            election.cell(),
            election.range_cell(),
            mutex.cell(),
            mutex.range_cell(),
            per[0],
            per[1],
            per[2],
            per[3],
        ));
        for (v, (counts, cycles)) in totals.iter().enumerate() {
            let n = (*cycles).max(1) as f64;
            let client = median(
                blocks[v]
                    .iter()
                    .map(|r| r.client_cpu.as_secs_f64() * 1e6)
                    .collect(),
            );
            costs.push(format!(
                "| {tasks} | {} | {} | {:.2} | {:.1} | {client:.1} |",
                VARIANTS[v],
                counts.per(*cycles),
                counts.fsyncs as f64 / n,
                counts.cpu.as_secs_f64() * 1e6 / n,
            ));
        }
        b.target(
            &format!(
                "etcd: uncontended lock cycles ≥ 0.9x the `Lock` RPC, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            lock_rpc.to_string(),
            lock_rpc.median >= 0.9,
        );
        b.target(
            &format!(
                "etcd: no more requests per cycle than the raw recipe (the `concurrency` mutex), {tasks} tasks (the `Lock` RPC's beside it)"
            ),
            format!("{:.2} vs {:.2} ({:.2})", per[0], per[3], per[1]),
            per[0] <= per[3] + 0.05,
        );
    }
    b.line("\nWhat a cycle cost: requests by method, the member's WAL fsyncs and its CPU time, over every round, warm-ups included (the lockguard client's lease keep-alives, a few a minute on its own schedule, fall in whichever run is going); the bench process's CPU time (the client and the loop), the median of the rounds after the warm-up.\n");
    b.line("| tasks | variant | requests / cycle, by method | WAL fsyncs / cycle | etcd CPU µs / cycle | client CPU µs / cycle |");
    b.line("|---:|---|---|---:|---:|---:|");
    for line in costs {
        b.line(&line);
    }
}

/// One contention run: what the contenders did, and what the server
/// counted meanwhile.
struct Run {
    c: Contention,
    counts: Counts,
}

impl Run {
    /// Requests per acquisition.
    fn per(&self) -> f64 {
        self.counts.total() as f64 / self.c.acquisitions.max(1) as f64
    }

    /// WAL fsyncs per acquisition.
    fn fsyncs(&self) -> f64 {
        self.counts.fsyncs as f64 / self.c.acquisitions.max(1) as f64
    }
}

/// The contention variants, as indices of [`VARIANTS`]: lockguard, the
/// `Lock` RPC and the `concurrency` mutex.
const CONTENDED: [usize; 3] = [0, 1, 3];

async fn contention(b: &mut Bench, server: &EtcdServer) {
    let rounds = if b.quick { 1 } else { CONTENTION_ROUNDS };
    let run_for = b.run_for;
    b.line(&format!(
        "\n### Contention: contenders on one key, each with a client of its own, holding it {HOLD:?} and thinking {THINK:?}\n"
    ));
    b.line(&format!("Both sides queue in the key's prefix (the keys in the order etcd created them), and each waiter watches only its predecessor's key, so a release wakes one waiter; lockguard's waiters and the `concurrency` mutex's read and watch from the client, the `Lock` RPC's inside the server. Each contender has a client and a lease of its own (lockguard: its own `Client`; the `Lock` RPC and the `concurrency` mutex: its own `etcd-client` client), as separate processes do. Handoff: from the holder's release call to the next different holder's acquire returning. {rounds} rounds of {run_for:?} runs (after a {:?} warm-up), on fresh clients each run, the order of the three variants turning by one each round; each figure is the median over the rounds, and the ratios (lockguard's acquisitions/s, and its handoff p50, over the yardstick's of the row in the same round) come with their range. Requests and fsyncs per acquisition are over the whole run, warm-up included, connecting and granting leases not. Min/max: the fewest acquisitions of any contender over the most.\n", run_for / 5));
    b.line("etcd hands a watch that starts at a revision it has already reached its events on a 100 ms tick (the watchable store's `syncWatchersLoop`), not as they happen: a waiter whose predecessor goes before that tick hears of it at the tick. The `Lock` RPC's waiter (and the `concurrency` mutex's, the same code run from the client) watches from the revision of its own read of the queue, always such a watch: with 4 contenders its turn comes a few milliseconds after it queued, mostly before the next tick, and with 64 after a tick has passed, which is why 4 contenders take fewer turns a second than 16 and 64 on that side, and why its p99s are tens of milliseconds. lockguard's waiter watches from the current revision, where events come as they happen, and then reads once whether its predecessor changed before the watch began, unless the watch's answer shows that no write came since the waiter's own read; a waiter further back also watches the key ahead of its predecessor, reads when it goes whether its predecessor now heads the queue, and then watches its predecessor again from that read when its first watch of it may stand behind the store (docs/etcd.md says why), so that its predecessor's deletion hands it the lock with no read on the way.\n");
    b.line("| contenders | variant | acquisitions/s | lockguard's over this (range) | handoff p50 | lockguard's p50 over this (range) | handoff p99 | requests / acquisition | WAL fsyncs / acquisition | min/max per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut by_method = Vec::new();
    for tasks in [4, 16, 64] {
        let runs = turning(rounds, CONTENDED.len(), async |round, variant| {
            let Some(recipe) = Recipe::of(CONTENDED[variant]) else {
                let mut clients = Vec::new();
                for _ in 0..tasks {
                    clients.push(lockguard(server).await);
                }
                let before = Counts::read(server);
                let c = contend(&clients, tasks, run_for).await;
                let counts = before.since(server);
                drop(clients);
                return Run { c, counts };
            };
            let mut raws = Vec::new();
            for _ in 0..tasks {
                let mut raw = raw_client(server).await;
                let lease = grant(&mut raw).await;
                raws.push((raw, lease));
            }
            let name = format!("raw/{tasks}/r{round}/v{variant}");
            let rec = Recorder::new(tasks);
            let before = Counts::read(server);
            let rate = throughput(tasks, run_for, |t, stop, done| {
                let (mut raw, lease) = raws[t].clone();
                let (rec, name) = (rec.clone(), name.clone());
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        let held = raw_acquire(&mut raw, recipe, &name, lease).await;
                        rec.acquired(t);
                        hold().await;
                        rec.releasing(t);
                        raw_release(&mut raw, held).await;
                        done.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(THINK).await;
                    }
                }
            })
            .await;
            let counts = before.since(server);
            for (raw, lease) in &raws {
                raw.clone().lease_revoke(*lease).await.expect("revoke");
            }
            Run {
                c: rec.finish(rate),
                counts,
            }
        })
        .await;
        let p50 = |r: &Run| percentile(&r.c.handoffs, 50.0).as_secs_f64();
        let p99 = |r: &Run| percentile(&r.c.handoffs, 99.0).as_secs_f64();
        // lockguard's `f` over variant `v`'s, round by round.
        let against = |v: usize, f: &dyn Fn(&Run) -> f64| {
            Spread::of(
                runs[0]
                    .iter()
                    .zip(&runs[v])
                    .map(|(l, r)| f(l) / f(r))
                    .collect(),
            )
        };
        for (v, &variant) in CONTENDED.iter().enumerate() {
            let variant = VARIANTS[variant];
            let of = |f: &dyn Fn(&Run) -> f64| median(runs[v].iter().map(f).collect());
            let ratios = if v == 0 {
                ("–".to_owned(), "–".to_owned())
            } else {
                (
                    against(v, &|r| r.c.rate).to_string(),
                    against(v, &p50).to_string(),
                )
            };
            b.line(&format!(
                "| {tasks} | {variant} | {:.0} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                of(&|r| r.c.rate),
                ratios.0,
                us(Duration::from_secs_f64(of(&p50))),
                ratios.1,
                us(Duration::from_secs_f64(of(&p99))),
                of(&Run::per),
                of(&Run::fsyncs),
                of(&|r| r.c.evenness),
            ));
        }
        by_method.push(format!(
            "- {tasks} contenders: {}.",
            CONTENDED
                .iter()
                .map(|&v| VARIANTS[v])
                .zip(&runs)
                .map(|(v, runs)| {
                    let mut counts = Counts::default();
                    for r in runs {
                        counts.add(&r.counts);
                    }
                    let acquisitions = runs.iter().map(|r| r.c.acquisitions).sum();
                    format!("{v} {}", counts.per(acquisitions))
                })
                .collect::<Vec<_>>()
                .join("; ")
        ));
        let p50s = against(1, &p50);
        b.target(
            &format!(
                "etcd: handoff p50 ≤ 1.2x the `Lock` RPC's, {tasks} contenders (median of {rounds} rounds' ratios; range)"
            ),
            p50s.to_string(),
            p50s.median <= 1.2,
        );
        let per = |v: usize| median(runs[v].iter().map(Run::per).collect());
        let (lg_per, rpc_per, recipe_per) = (per(0), per(1), per(2));
        b.target(
            &format!(
                "etcd: requests per acquisition ≤ the raw recipe's (the `concurrency` mutex), {tasks} contenders (medians; the `Lock` RPC's beside it)"
            ),
            format!("{lg_per:.2} vs {recipe_per:.2} ({rpc_per:.2})"),
            lg_per <= recipe_per + 0.05,
        );
    }
    b.line("\nRequests per acquisition by method, over the rounds:\n");
    for line in by_method {
        b.line(&line);
    }
}

/// Counters under contention on a member of its own (the `counters`
/// section).
pub(crate) async fn contended_counters(b: &mut Bench) {
    let server = EtcdServer::start();
    let mut raws = Vec::new();
    for _ in 0..counters::CLIENTS {
        raws.push(raw_client(&server).await);
    }
    counters::compare(
        b,
        "etcd",
        "lockguard's `incr_by(1)` and the raw loop beside it are both a compare-and-set, a transaction that writes the new value only if the key's `mod_revision` is still the one read, again from what the transaction's `else` read when another write came first (the raw loop: `etcd-client`'s `get`, then `txn` until it holds, as etcd's own STM does)",
        async || lockguard(&server).await,
        raws,
        || Counts::read(&server).total(),
    )
    .await;
}

/// The raw read-modify-write of a counter through `etcd-client`, as a
/// user without lockguard writes it (etcd's own STM does the same): read
/// the key, write `value + 1` in a transaction that holds only if its
/// `mod_revision` is still the one read, and when another write came
/// first, again from the value the transaction's `else` read.
impl RawCounter for etcd_client::Client {
    async fn increment(&mut self, key: &str) {
        let read = self.get(key, None).await.expect("get");
        let mut seen = read
            .kvs()
            .first()
            .map(|kv| (counted(kv), kv.mod_revision()));
        loop {
            let (value, revision) = seen.unwrap_or((0, 0));
            let txn = Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Equal, revision)])
                .and_then([TxnOp::put(key, (value + 1).to_string(), None)])
                .or_else([TxnOp::get(key, None)]);
            let answer = self.txn(txn).await.expect("txn");
            if answer.succeeded() {
                return;
            }
            seen = answer
                .op_responses()
                .first()
                .and_then(|r| range(r).kvs().first())
                .map(|kv| (counted(kv), kv.mod_revision()));
        }
    }

    async fn read(&mut self, key: &str) -> i64 {
        let read = self.get(key, None).await.expect("get");
        read.kvs().first().map_or(0, counted)
    }
}

/// A raw counter's value.
fn counted(kv: &etcd_client::KeyValue) -> i64 {
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("a counter in decimal")
}
