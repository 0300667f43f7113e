//! A worker process: one client of the store, one operation at a time,
//! every invocation and completion recorded.

use std::collections::HashMap;
use std::time::Duration;

use lockguard_core::{Client, FencingToken, LockGuard, Quota};

use crate::clock::now_ns;
use crate::history::{Call, Outcome, Recorder};
use crate::store::Target;

mod job;
mod leader;
mod multi;
mod rw;
mod schedule;
mod semaphore;
mod upgradeable;

/// The locks the workers contend for: few, so most acquisitions wait and
/// most releases hand over.
pub(crate) const LOCK_KEYS: [&str; 2] = ["a", "b"];
/// The stock counter: taken from with `decr_if_at_least`, restocked with
/// `incr_by`.
pub(crate) const STOCK: &str = "stock";
/// The stock at the start of a run: small, so the bounded decrement often
/// meets an empty stock.
pub(crate) const STOCK_START: i64 = 20;
/// The counter updated both with `incr_by` and compare-and-set.
pub(crate) const CAS: &str = "cas";
/// The limiter's name and the one key the workers check.
pub(crate) const LIMITER: &str = "api";
pub(crate) const LIMITER_KEY: &str = "k";
/// The limiter's quota: below what the workers ask for, so it refuses.
pub(crate) const QUOTA: Quota = Quota::per_second(40).burst(5);
/// How long an acquisition waits.
pub(crate) const WAIT: Duration = Duration::from_secs(2);
/// The fixed lease of most acquisitions.
pub(crate) const LEASE: Duration = Duration::from_millis(1000);
/// The watchdog's lease for the long holds: below the client's waiter
/// timeout (1 s), the case where a handed-over lock once lost its lease.
pub(crate) const WATCHDOG_LEASE: Duration = Duration::from_millis(600);
/// A long hold: past the watchdog lease, so renewals must keep it.
const LONG_HOLD: Duration = Duration::from_millis(900);

/// A way to break the locking on purpose (`--self-test`), which the
/// checker must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Break {
    /// Holds a short fixed lease for twice its length and never asks
    /// `is_held()`: it believes it holds the lock to the end, as a client
    /// that ignores leases does. Another worker takes the lock meanwhile.
    StaleHold,
    /// Adds 1 to the counters and records 2: a lost update, as the store
    /// would show one.
    Miscount,
    /// Takes one permit more than the semaphore has (it asks for a
    /// semaphore of one permit more) and records its holds as the shared
    /// semaphore's: three holds at once of two permits, as a store that
    /// overbooks would show them.
    Overbook,
    /// A multi-lock worker that takes its keys one by one with a short
    /// lease, lets the first run out while "waiting" for the next (and
    /// another owner take it), and returns without checking the first
    /// again: the multi-lock that returns with a key lapsed.
    UncheckedMulti,
    /// A job worker that records `at_least` but does not ask for it: its
    /// release frees the lock at once, and the next run starts inside the
    /// window.
    IgnoreAtLeast,
    /// A scheduled job's replica that runs every period itself, without
    /// the schedule: two such replicas run each period twice.
    EveryPeriod,
    /// Checks the shared limiter at every step and records every decision
    /// as an admission: a client that goes ahead when refused, as a
    /// limiter that admits past its quota would show it.
    Overadmit,
}

impl Break {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Break::StaleHold => "stale-hold",
            Break::Miscount => "miscount",
            Break::Overbook => "overbook",
            Break::UncheckedMulti => "unchecked-multi",
            Break::IgnoreAtLeast => "ignore-at-least",
            Break::EveryPeriod => "every-period",
            Break::Overadmit => "overadmit",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            Break::StaleHold,
            Break::Miscount,
            Break::Overbook,
            Break::UncheckedMulti,
            Break::IgnoreAtLeast,
            Break::EveryPeriod,
            Break::Overadmit,
        ]
        .into_iter()
        .find(|b| b.name() == s)
    }
}

/// What a worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Locks, semaphores, read-write locks, elections, counters and the
    /// limiter, one operation after another until the end.
    Mixed,
    /// Multi-locks with fixed leases shorter than their waits, on keys
    /// the mixed workers lock too, until the end.
    Multi,
    /// One run of a scheduled job (`at_least`), then the process exits,
    /// as a replica's job process does: the next run is another process's.
    Job,
    /// A replica of a job on a schedule (`Client::schedule`), recording
    /// its runs until the end.
    Schedule,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Mixed => "mixed",
            Role::Multi => "multi",
            Role::Job => "job",
            Role::Schedule => "schedule",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [Role::Mixed, Role::Multi, Role::Job, Role::Schedule]
            .into_iter()
            .find(|r| r.name() == s)
    }
}

/// What a worker is told on its command line.
#[derive(Debug)]
pub(crate) struct WorkerArgs<'s> {
    pub(crate) id: u32,
    pub(crate) seed: u64,
    /// Stop starting operations at this time (shared clock, ns).
    pub(crate) until: u64,
    pub(crate) target: Target<'s>,
    pub(crate) out: std::path::PathBuf,
    pub(crate) role: Role,
    pub(crate) brk: Option<Break>,
}

struct Worker {
    client: Client,
    rec: Recorder,
    rng: fastrand::Rng,
    counters: bool,
    limiter: bool,
    /// Whether the store offers read-write locks.
    rw: bool,
    brk: Option<Break>,
    /// The fence of this worker's previous hold of each lock, for the
    /// stale-write probe.
    last_fence: HashMap<String, u64>,
    /// This worker's observer of the election, once it observed.
    observer: Option<lockguard_core::LeaderObserver>,
}

/// Runs a worker until `args.until`; the history goes to `args.out`.
pub(crate) fn run(args: WorkerArgs<'_>) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .map_err(|e| format!("cannot open {}: {e}", args.out.display()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        // The store may be paused or restarting when a worker starts (a
        // replacement for a killed one): retry the connection.
        let mut tries = 0;
        let client = loop {
            match args.target.connect().await {
                Ok(c) => break c,
                Err(e) if tries < 50 && now_ns() < args.until => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(format!("worker {} cannot connect: {e}", args.id)),
            }
        };
        let mut w = Worker {
            client,
            rec: Recorder::new(args.id, Box::new(std::io::BufWriter::new(file))),
            rng: fastrand::Rng::with_seed(args.seed),
            counters: args.target.store.offers_counters(),
            limiter: args.target.store.offers_limiter(),
            rw: args.target.store.offers_rw_locks(),
            brk: args.brk,
            last_fence: HashMap::new(),
            observer: None,
        };
        match args.role {
            Role::Job => {
                w.job_run(args.until).await;
                // Ends as a job process ends: the client dropped, and a
                // moment for its tasks to close its connections (a
                // ZooKeeper session ends here), then the exit.
                drop(w);
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
            Role::Schedule => {
                w.schedule_runs(args.until).await;
                return Ok(());
            }
            Role::Multi => {
                while now_ns() < args.until {
                    let failed = w.multi_op().await;
                    let pause = if failed {
                        w.rng.u64(50..100)
                    } else {
                        w.rng.u64(0..4)
                    };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                return Ok(());
            }
            Role::Mixed => {}
        }
        while now_ns() < args.until {
            let failed = w.step().await;
            // A short breath between operations, so waiters queue up; a
            // longer one after an error, as a client backs off, so a store
            // that is down does not fill the history with updates of
            // unknown outcome.
            let pause = if failed {
                w.rng.u64(50..100)
            } else {
                w.rng.u64(0..4)
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        Ok(())
    })
}

impl Worker {
    /// One operation (or a few that belong together); whether one of
    /// them failed with an error.
    async fn step(&mut self) -> bool {
        let roll = self.rng.u32(0..100);
        self.rec.errors = 0;
        if self.brk == Some(Break::Overbook) {
            self.overbook_op().await;
            return self.rec.errors > 0;
        }
        if self.brk == Some(Break::Overadmit) {
            self.limiter_op().await;
            return self.rec.errors > 0;
        }
        let lock_share = if self.brk == Some(Break::Miscount) {
            30
        } else {
            60
        };
        if roll < lock_share || !self.counters {
            // One lock operation in five is an election's instead, one in
            // five a semaphore's, and on a store with read-write locks,
            // one in five a read-write lock's.
            let other = self.rng.u32(0..5);
            if other == 0 && self.brk.is_none() {
                self.leader_op().await;
            } else if other == 1 && self.rw && self.brk.is_none() {
                // Half of them on the upgradeable read-write lock.
                if self.rng.bool() {
                    self.rw_op().await;
                } else {
                    self.upgradeable_op().await;
                }
            } else if other == 2 && self.brk.is_none() {
                self.semaphore_op().await;
            } else {
                self.lock_op().await;
            }
        } else if roll < 90 || !self.limiter {
            self.counter_op().await;
        } else {
            self.limiter_op().await;
        }
        self.rec.errors > 0
    }

    /// `is_held()`, recorded with the time taken before the call: when it
    /// says true, the lease was ours at least until that time.
    fn is_held(&mut self, key: &str, guard: &LockGuard) -> bool {
        let t = now_ns();
        let yes = guard.is_held();
        let t2 = now_ns();
        let call = Call::IsHeld {
            key: key.to_owned(),
            fence: guard.fencing_token().get(),
        };
        self.rec.record(call, t, t2, Outcome::Held { yes });
        yes
    }

    async fn lock_op(&mut self) {
        let key = LOCK_KEYS[self.rng.usize(..LOCK_KEYS.len())].to_owned();
        // Every lock operation of the broken worker is a stale hold: with
        // one in three, a run of a few seconds (the self-test against a
        // target) could make a single one, late, that nobody overlapped,
        // and the self-test failed for want of a broken history.
        if self.brk == Some(Break::StaleHold) {
            return self.stale_hold(key).await;
        }
        let long = self.rng.u32(0..100) < 3;
        let (lease, hold) = if long {
            (WATCHDOG_LEASE, LONG_HOLD)
        } else {
            (LEASE, Duration::from_millis(self.rng.u64(4..14)))
        };
        let lock = self.client.lock(&key).wait(WAIT);
        let lock = if long {
            lock.watchdog(lease)
        } else {
            lock.lease(lease)
        };
        let op = self.rec.invoke(Call::Acquire {
            key: key.clone(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: lease.as_millis() as u64,
            watchdog: long,
            read: false,
            permits: None,
            multi: false,
            at_least_ms: None,
        });
        let guard = match lock.acquire().await {
            Ok(g) => {
                self.rec.complete(
                    op,
                    Outcome::Acquired {
                        fence: g.fencing_token().get(),
                    },
                );
                g
            }
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let fence = guard.fencing_token().get();
        if self.is_held(&key, &guard) && self.counters {
            self.fenced_write(&key, fence).await;
            // A write with this worker's previous token for the lock, now
            // older than one the resource accepted: it must be refused.
            if let Some(prev) = self.last_fence.get(&key).copied()
                && prev < fence
            {
                self.fenced_write(&key, prev).await;
            }
        }
        tokio::time::sleep(hold).await;
        self.is_held(&key, &guard);
        self.last_fence.insert(key.clone(), fence);
        let op = self.rec.invoke(Call::Release { key, fence });
        match guard.release().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }

    async fn fenced_write(&mut self, key: &str, fence: u64) {
        let resource = format!("res-{key}");
        let op = self.rec.invoke(Call::FencedWrite {
            key: resource.clone(),
            fence,
        });
        let result = self
            .client
            .fenced(&resource)
            .write(FencingToken::new(fence), fence.to_string())
            .await;
        let out = match result {
            Ok(()) => Outcome::Written,
            Err(e) if e.is_stale_fencing_token() => Outcome::Stale,
            Err(e) => Outcome::error(&e),
        };
        self.rec.complete(op, out);
    }

    /// The broken holder of the self-test: a short fixed lease, held for
    /// twice its length without asking `is_held()`, recorded as held to
    /// the end.
    async fn stale_hold(&mut self, key: String) {
        let lease = Duration::from_millis(300);
        let op = self.rec.invoke(Call::Acquire {
            key: key.clone(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: lease.as_millis() as u64,
            watchdog: false,
            read: false,
            permits: None,
            multi: false,
            at_least_ms: None,
        });
        let guard = match self
            .client
            .lock(&key)
            .wait(WAIT)
            .lease(lease)
            .acquire()
            .await
        {
            Ok(g) => g,
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let fence = guard.fencing_token().get();
        self.rec.complete(op, Outcome::Acquired { fence });
        tokio::time::sleep(lease * 2).await;
        // The broken part: "held" without asking.
        let t = now_ns();
        self.rec.record(
            Call::IsHeld {
                key: key.clone(),
                fence,
            },
            t,
            t,
            Outcome::Held { yes: true },
        );
        let op = self.rec.invoke(Call::Release { key, fence });
        match guard.release().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }

    async fn counter_op(&mut self) {
        if self.brk == Some(Break::Miscount) {
            // Every counter operation of the broken worker miscounts, so
            // even a short run on a slow machine has some.
            let key = if self.rng.bool() { STOCK } else { CAS };
            return self.incr(key, 1).await;
        }
        match self.rng.u32(0..100) {
            0..40 => {
                let n = self.rng.i64(1..=3);
                let op = self.rec.invoke(Call::Take {
                    key: STOCK.into(),
                    n,
                });
                let out = match self.client.counter(STOCK).decr_if_at_least(n).await {
                    Ok(v) => Outcome::Taken { v },
                    Err(e) => Outcome::error(&e),
                };
                self.rec.complete(op, out);
            }
            40..55 => {
                let n = self.rng.i64(1..=2);
                self.incr(STOCK, n).await;
            }
            55..62 => {
                self.get(STOCK).await;
            }
            62..70 => self.incr(CAS, 1).await,
            _ => {
                let Some((read, version)) = self.get(CAS).await else {
                    return;
                };
                let new = read + 1;
                let op = self.rec.invoke(Call::Cas {
                    key: CAS.into(),
                    version,
                    read,
                    new,
                });
                let counter = self.client.counter(CAS);
                let cas = async {
                    let out = match counter.compare_and_set(version, new).await {
                        Ok(ok) => Outcome::Swapped { ok },
                        Err(e) => Outcome::error(&e),
                    };
                    (out, now_ns())
                };
                // Half the time an increment races the compare-and-set
                // from this same process (two requests in flight at once),
                // so the two meet inside the store as often as possible.
                if self.rng.bool() {
                    let incr = self.rec.invoke(Call::Incr {
                        key: CAS.into(),
                        n: 1,
                    });
                    let add = async {
                        let out = match counter.incr_by(1).await {
                            Ok(v) => Outcome::Value { v, version: None },
                            Err(e) => Outcome::error(&e),
                        };
                        (out, now_ns())
                    };
                    let ((cas_out, t1), (add_out, t2)) = tokio::join!(cas, add);
                    self.rec.complete_at(op, t1, cas_out);
                    self.rec.complete_at(incr, t2, add_out);
                } else {
                    let (out, t) = cas.await;
                    self.rec.complete_at(op, t, out);
                }
            }
        }
    }

    async fn incr(&mut self, key: &str, n: i64) {
        let miscount = self.brk == Some(Break::Miscount);
        // The broken worker records twice what it adds.
        let recorded = if miscount { n * 2 } else { n };
        let op = self.rec.invoke(Call::Incr {
            key: key.into(),
            n: recorded,
        });
        let out = match self.client.counter(key).incr_by(n).await {
            Ok(v) => Outcome::Value { v, version: None },
            Err(e) => Outcome::error(&e),
        };
        self.rec.complete(op, out);
    }

    async fn get(&mut self, key: &str) -> Option<(i64, u64)> {
        let op = self.rec.invoke(Call::Get { key: key.into() });
        match self.client.counter(key).get_versioned().await {
            Ok(v) => {
                self.rec.complete(
                    op,
                    Outcome::Value {
                        v: v.value,
                        version: Some(v.version),
                    },
                );
                Some((v.value, v.version))
            }
            Err(e) => {
                self.rec.complete(op, Outcome::error(&e));
                None
            }
        }
    }

    async fn limiter_op(&mut self) {
        let op = self.rec.invoke(Call::Check {
            key: LIMITER_KEY.into(),
        });
        let out = match self
            .client
            .rate_limiter(LIMITER, QUOTA)
            .check(LIMITER_KEY)
            .await
        {
            Ok(d) => Outcome::Decided {
                // The broken part: admitted whatever the limiter said.
                allowed: d.is_allowed() || self.brk == Some(Break::Overadmit),
            },
            Err(e) => Outcome::error(&e),
        };
        self.rec.complete(op, out);
    }
}
