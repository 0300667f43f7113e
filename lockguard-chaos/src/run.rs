//! One store's run: start it, start the workers, inject faults on a
//! schedule drawn from the seed, collect and check the histories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::check::{self, Bounds, Measures, Violation};
use crate::clock::{ms, now_ns};
use crate::deploy::{Deployment, ServerFault};
use crate::history::{Call, Outcome, Recorder};
use crate::store::{RESPONSE_TIMEOUT, Store, Target};
use crate::worker::{Break, CAS, LEASE, Role, STOCK, STOCK_START};

/// How long a run lasts and how hard it is pushed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Profile {
    pub(crate) name: &'static str,
    /// Mixed workers at once.
    pub(crate) workers: u32,
    /// Multi-lock workers at once.
    pub(crate) multi_workers: u32,
    /// Replicas of the job on a schedule.
    pub(crate) schedule_workers: u32,
    /// Scheduled-job processes at once (each one run of the job).
    pub(crate) job_slots: u32,
    /// Workload length.
    pub(crate) duration: Duration,
    /// The quiet tail after the last fault may begin: long enough for a
    /// dead holder's lease and a dead waiter's place to lapse, then for
    /// handoffs to be measured.
    pub(crate) quiet: Duration,
}

pub(crate) const CI: Profile = Profile {
    name: "ci",
    workers: 4,
    multi_workers: 2,
    schedule_workers: 2,
    job_slots: 2,
    // The quiet tail leaves four and a half seconds after the settle time
    // to measure handoffs: a slow store (Sentinel waiting for its replica),
    // or a target run with worker faults only, makes only a few a second
    // (three seconds left as few as 2 in one run). Faults end 5.5 s in,
    // so a 5 s failover still fits.
    duration: Duration::from_millis(11_500),
    quiet: Duration::from_secs(6),
};

pub(crate) const LONG: Profile = Profile {
    name: "long",
    workers: 6,
    multi_workers: 2,
    schedule_workers: 3,
    job_slots: 2,
    duration: Duration::from_secs(120),
    quiet: Duration::from_millis(4000),
};

/// The self-test's runs: short, no faults.
const SELF_TEST: Profile = Profile {
    name: "self-test",
    workers: 4,
    multi_workers: 1,
    schedule_workers: 2,
    job_slots: 2,
    duration: Duration::from_secs(3),
    quiet: Duration::from_secs(3),
};

/// How long after the end a worker may take to finish before it is
/// killed.
const WORKER_GRACE: Duration = Duration::from_secs(10);

/// What one store's run found.
#[derive(Debug)]
pub(crate) struct StoreRun {
    pub(crate) store: &'static str,
    /// Whether the store offers counters (the self-test breaks them too).
    pub(crate) counters: bool,
    /// Whether the store offers rate limiters.
    pub(crate) limiter: bool,
    pub(crate) violations: Vec<Violation>,
    pub(crate) measures: Measures,
    pub(crate) faults: Vec<String>,
    /// Checks not made, because a fault of the run voids them by design.
    pub(crate) skipped: Vec<&'static str>,
    pub(crate) dir: PathBuf,
    /// The run's pictures (`report.html` beside the histories).
    pub(crate) report: PathBuf,
}

/// A worker fault: done by the runner to one of its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Server(ServerFault),
    PauseWorker,
    KillWorker,
}

/// How the runner starts a worker process: the binary, the target's
/// arguments, where the histories go, the run's end and seed.
#[derive(Debug, Clone)]
struct Spawner {
    exe: PathBuf,
    target: Vec<String>,
    dir: PathBuf,
    until: u64,
    seed: u64,
}

impl Spawner {
    /// Starts worker `id` in `role`, broken as `brk` says.
    fn spawn(&self, id: u32, role: Role, brk: Option<Break>) -> Result<Child, String> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(crate::COMMAND.get().into_iter().flatten())
            .arg("worker")
            .args(&self.target)
            .args(["--id", &id.to_string()])
            .args(["--seed", &(self.seed ^ (u64::from(id) << 32)).to_string()])
            .args(["--until", &self.until.to_string()])
            .args(["--role", role.name()])
            .arg("--out")
            .arg(self.dir.join(format!("w{id:03}.jsonl")))
            .stdin(Stdio::null());
        if let Some(b) = brk {
            cmd.args(["--break", b.name()]);
        }
        cmd.spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))
    }
}

struct Workers {
    spawner: Spawner,
    next_id: u32,
    /// The running workers: id, process, role.
    live: Vec<(u32, Child, Role)>,
}

impl Workers {
    fn spawn(&mut self, role: Role, brk: Option<Break>) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let child = self.spawner.spawn(id, role, brk)?;
        self.live.push((id, child, role));
        Ok(())
    }

    /// Kills the `i`th live worker (SIGKILL) and starts a replacement in
    /// its role, which keeps the contention up, unless the run is nearly
    /// over.
    fn kill(&mut self, i: usize) -> Result<(), String> {
        let (_, mut child, role) = self.live.remove(i);
        let _ = child.kill();
        let _ = child.wait();
        if now_ns() + 1_000_000_000 < self.spawner.until {
            self.spawn(role, None)?;
        }
        Ok(())
    }

    /// Waits for every worker to finish, killing those still running
    /// `grace` after the end; returns the ids that had to be killed and
    /// those that failed.
    fn finish(&mut self, grace: Duration) -> Vec<String> {
        let deadline = self.spawner.until + grace.as_nanos() as u64;
        let mut problems = Vec::new();
        for (id, child, _) in &mut self.live {
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            problems.push(format!("worker {id} exited with {status}"));
                        }
                        break;
                    }
                    Ok(None) if now_ns() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        problems.push(format!(
                            "worker {id} was still running {grace:?} after the end and was killed"
                        ));
                        break;
                    }
                }
            }
        }
        problems
    }
}

/// The first id of the job workers: far above the other workers' ids.
const FIRST_JOB_ID: u32 = 1000;

/// Runs the scheduled job, `slots` processes at a time, on a thread of its
/// own: each process is one run (it exits after its release), and a slot
/// whose process exited gets a new one until the end, so every run is a
/// new client in a new process. The thread ends `grace` after the end at
/// the latest, with the problems it met (a worker that failed or had to be
/// killed).
fn run_jobs(
    spawner: Spawner,
    slots: u32,
    brk: Option<Break>,
    grace: Duration,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut problems = Vec::new();
        let mut live: Vec<(u32, Child)> = Vec::new();
        let mut next_id = FIRST_JOB_ID;
        let deadline = spawner.until + grace.as_nanos() as u64;
        loop {
            live.retain_mut(|(id, child)| match child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    if !status.success() {
                        problems.push(format!("job worker {id} exited with {status}"));
                    }
                    false
                }
                Err(e) => {
                    problems.push(format!("job worker {id}: {e}"));
                    false
                }
            });
            let now = now_ns();
            if now < spawner.until {
                while live.len() < slots as usize {
                    match spawner.spawn(next_id, Role::Job, brk) {
                        Ok(child) => live.push((next_id, child)),
                        Err(e) => {
                            problems.push(e);
                            return problems;
                        }
                    }
                    next_id += 1;
                }
            } else if live.is_empty() {
                return problems;
            } else if now > deadline {
                for (id, mut child) in live {
                    let _ = child.kill();
                    let _ = child.wait();
                    problems.push(format!(
                        "job worker {id} was still running {grace:?} after the end and was killed"
                    ));
                }
                return problems;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

fn signal(pid: u32, sig: &str) {
    // The kill(1) program: signalling our own child needs no unsafe code.
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs `profile` on `deploy`, a deployment of `store`, histories in `dir`.
pub(crate) fn run(
    store: &dyn Store,
    deploy: &mut dyn Deployment,
    profile: Profile,
    seed: u64,
    self_test: bool,
    no_faults: bool,
    dir: &Path,
) -> Result<StoreRun, String> {
    let profile = if self_test { SELF_TEST } else { profile };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let namespace = format!(
        "chaos_{}_{}",
        seed % 1_000_000_000,
        if self_test { "selftest" } else { "run" }
    );
    let addr = deploy.address();
    let target = Target {
        store,
        addr: &addr,
        namespace: &namespace,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = connect_retrying(&rt, &target)?;
    let file = std::fs::File::create(dir.join("w000.jsonl")).map_err(|e| e.to_string())?;
    let mut rec = Recorder::new(0, Box::new(std::io::BufWriter::new(file)));
    if store.offers_counters() {
        for (key, n) in [(STOCK, STOCK_START), (CAS, 0)] {
            let op = rec.invoke(Call::Set { key: key.into(), n });
            let out = match rt.block_on(client.counter(key).set(n)) {
                Ok(()) => Outcome::Value {
                    v: n,
                    version: None,
                },
                Err(e) => return Err(format!("cannot set {key} to start: {e}")),
            };
            rec.complete(op, out);
        }
    }

    let start = now_ns();
    let end = start + profile.duration.as_nanos() as u64;
    let spawner = Spawner {
        exe: std::env::current_exe().map_err(|e| e.to_string())?,
        target: target.to_args(),
        dir: dir.to_owned(),
        until: end,
        seed,
    };
    let mut workers = Workers {
        spawner: spawner.clone(),
        next_id: 1,
        live: Vec::new(),
    };
    for i in 0..profile.workers {
        let brk = match (self_test, i) {
            (true, 0) => Some(Break::StaleHold),
            (true, 1) if store.offers_counters() => Some(Break::Miscount),
            (true, 2) => Some(Break::Overbook),
            (true, 3) if store.offers_limiter() => Some(Break::Overadmit),
            _ => None,
        };
        workers.spawn(Role::Mixed, brk)?;
    }
    // The self-test's multi-lock worker is the broken one, and every job
    // run ignores its `at_least`: the only multi-locks and jobs there are
    // the broken ones, so what the checks find there is theirs.
    for _ in 0..profile.multi_workers {
        workers.spawn(Role::Multi, self_test.then_some(Break::UncheckedMulti))?;
    }
    // Likewise every replica of the scheduled job in the self-test.
    for _ in 0..profile.schedule_workers {
        workers.spawn(Role::Schedule, self_test.then_some(Break::EveryPeriod))?;
    }
    let jobs = run_jobs(
        spawner,
        profile.job_slots,
        self_test.then_some(Break::IgnoreAtLeast),
        WORKER_GRACE,
    );

    let mut leader = deploy.leader();

    // Faults, one at a time, until the quiet tail.
    let mut rng = fastrand::Rng::with_seed(seed ^ salt(store.name()));
    let mut kinds: Vec<Fault> = deploy.faults().into_iter().map(Fault::Server).collect();
    kinds.extend([Fault::PauseWorker, Fault::KillWorker]);
    let faults_until = end.saturating_sub(profile.quiet.as_nanos() as u64);
    let mut done_faults = Vec::new();
    let mut next = start + 500_000_000;
    // A fault starts only if it can heal before the quiet tail.
    while !self_test && !no_faults && next < faults_until {
        let fits: Vec<Fault> = kinds
            .iter()
            .copied()
            .filter(|f| match f {
                Fault::Server(f) => deploy.offers(*f),
                _ => !workers.live.is_empty(),
            })
            .filter(|f| {
                let longest = match f {
                    Fault::Server(f) => deploy.longest(*f),
                    _ => LEASE + Duration::from_millis(700),
                };
                next + longest.as_nanos() as u64 <= faults_until
            })
            .collect();
        if fits.is_empty() {
            break;
        }
        let fault = fits[rng.usize(..fits.len())];
        sleep_until(next);
        let pick = rng.usize(..1000);
        let down = Duration::from_millis(rng.u64(..=deploy.longest_downtime().as_millis() as u64));
        let (what, mut target_name) = match fault {
            Fault::Server(f) => (f.name(), format!("server {}", pick)),
            Fault::PauseWorker | Fault::KillWorker => {
                let id = workers.live[pick % workers.live.len()].0;
                let what = if fault == Fault::PauseWorker {
                    "pause-worker"
                } else {
                    "kill-worker"
                };
                (what, format!("worker {id}"))
            }
        };
        let began = rec_time(start);
        let op = rec.invoke(Call::Fault {
            what: what.into(),
            target: target_name.clone(),
        });
        let result = match fault {
            Fault::Server(f) => deploy
                .apply(f, pick, deploy.pause_length(LEASE), down)
                .map(|server| target_name = server),
            Fault::PauseWorker => {
                // Past its lease: it must find the lock lost.
                let pid = workers.live[pick % workers.live.len()].1.id();
                signal(pid, "-STOP");
                std::thread::sleep(LEASE + Duration::from_millis(300));
                signal(pid, "-CONT");
                Ok(())
            }
            Fault::KillWorker => workers.kill(pick % workers.live.len()),
        };
        rec.complete(
            op,
            match &result {
                Ok(()) => Outcome::Healed,
                Err(e) => Outcome::Error {
                    kind: "fault".into(),
                    msg: e.clone(),
                },
            },
        );
        done_faults.push(format!(
            "at {:.0} ms for {:.0} ms: {what} {target_name}{}",
            ms(began),
            ms(rec_time(start) - began),
            result
                .err()
                .map(|e| format!(" (failed: {e})"))
                .unwrap_or_default()
        ));
        if fault == Fault::Server(ServerFault::Failover) {
            leader = deploy.leader();
        }
        watch_leader(deploy, &mut leader, &mut rec, &mut done_faults, start);
        next = now_ns() + rng.u64(200_000_000..700_000_000);
    }
    // The quiet tail, watching for a failover the sentinels start on
    // their own.
    while now_ns() < end {
        sleep_until((now_ns() + 100_000_000).min(end));
        watch_leader(deploy, &mut leader, &mut rec, &mut done_faults, start);
    }
    let mut problems = workers.finish(WORKER_GRACE);
    problems.extend(
        jobs.join()
            .unwrap_or_else(|_| vec!["the job workers' thread panicked".to_owned()]),
    );

    // The final values, once the store answers, through a new client: the
    // first one's runtime stood still through the run (a ZooKeeper
    // session cannot live through that).
    drop(client);
    if store.offers_counters() {
        let client = connect_retrying(&rt, &target)?;
        for key in [STOCK, CAS] {
            let deadline = now_ns() + 10_000_000_000;
            loop {
                let op = rec.invoke(Call::Get { key: key.into() });
                match rt.block_on(client.counter(key).get_versioned()) {
                    Ok(v) => {
                        rec.complete(
                            op,
                            Outcome::Value {
                                v: v.value,
                                version: Some(v.version),
                            },
                        );
                        break;
                    }
                    Err(e) => {
                        rec.complete(op, Outcome::error(&e));
                        if now_ns() > deadline {
                            return Err(format!("cannot read {key} after the run: {e}"));
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
    }
    drop(rec);

    let ops = crate::history::load(dir).map_err(|e| format!("cannot read the histories: {e}"))?;
    let bounds = Bounds {
        // The last attempt of a wait may start just before the wait ends
        // and take a connect and a response timeout; a busy machine adds
        // scheduling delays.
        wait_slack_ns: (RESPONSE_TIMEOUT * 2 + Duration::from_millis(750)).as_nanos() as u64,
        settle_ns: 1_500_000_000,
        handoff_median_ns: 50_000_000,
        // Three tell a store whose waiters are woken (a few ms) from one
        // whose waiters find the lock on their timed refreshes (a hundred
        // ms and more): the median of three is slow only if two are.
        min_handoffs: 3,
        min_window_ns: 1_000_000_000,
    };
    let (mut violations, measures) =
        check::check(&ops, bounds, end, store.session_end_frees_locks());
    if self_test {
        // Liveness of a deliberately broken run is not the point.
        violations.retain(|v| v.check != "wake-ups");
    }
    let mut skipped = Vec::new();
    let voided = deploy.not_checked_across_failover();
    if !voided.is_empty() && done_faults.iter().any(|f| f.contains(" failover ")) {
        skipped = voided.to_vec();
        violations.retain(|v| !skipped.contains(&v.check));
    }
    for p in problems {
        violations.push(Violation {
            check: "workers",
            what: p,
            ops: vec![],
        });
    }
    let report = crate::report::write(dir, store.name(), &ops, &violations)
        .map_err(|e| format!("cannot write the report: {e}"))?;
    Ok(StoreRun {
        report,
        store: store.name(),
        counters: store.offers_counters(),
        limiter: store.offers_limiter(),
        violations,
        measures,
        faults: done_faults,
        skipped,
        dir: dir.to_owned(),
    })
}

/// Notices a failover the store started on its own (Sentinel: a master
/// paused or restarted for what looked like the sentinels' 1 s on a busy
/// machine), and records it as a fault of the run: the checks treat it as
/// the failover it is, and wake-ups are measured only after it.
fn watch_leader(
    deploy: &dyn Deployment,
    master: &mut Option<u16>,
    rec: &mut Recorder,
    done_faults: &mut Vec<String>,
    start: u64,
) {
    if master.is_none() {
        return;
    }
    let now = deploy.leader();
    if now.is_none() || now == *master {
        return;
    }
    let op = rec.invoke(Call::Fault {
        what: "failover".into(),
        target: "by the store".into(),
    });
    // In effect until the old master replicates the new one.
    deploy.reunite();
    rec.complete(op, Outcome::Healed);
    done_faults.push(format!(
        "at {:.0} ms: failover by the store on its own, port {} to port {}",
        ms(rec_time(start)),
        master.unwrap_or_default(),
        now.unwrap_or_default()
    ));
    *master = now;
}

/// A client of `target`, retried for a while: the store may still be
/// coming back from the last fault.
fn connect_retrying(
    rt: &tokio::runtime::Runtime,
    target: &Target<'_>,
) -> Result<lockguard_core::Client, String> {
    let deadline = now_ns() + 10_000_000_000;
    loop {
        match rt.block_on(target.connect()) {
            Ok(c) => return Ok(c),
            Err(e) if now_ns() > deadline => {
                return Err(format!(
                    "the runner cannot connect to {}: {e}",
                    target.store.name()
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn rec_time(start: u64) -> u64 {
    now_ns().saturating_sub(start)
}

/// A store's own share of the fault schedule's seed (FNV-1a of its name):
/// stores in one run get different schedules.
fn salt(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}
