//! `lockguard-chaos`: lockguard's own Jepsen-style history checker.
//!
//! It starts a real store (Redis, Redlock on three masters, a Redis
//! Cluster, Redis under Sentinel, PostgreSQL, MySQL on MariaDB, ZooKeeper) with
//! lockguard-testing's harnesses, runs worker processes (this binary
//! again, `worker` subcommand), each with its own lockguard client, that
//! lock, write fenced values, update counters and ask a rate limiter while
//! the run pauses, restarts and disconnects the store and pauses and kills
//! workers on a schedule drawn from a seed. Every operation's invocation
//! and completion is recorded on one monotonic clock; the merged history
//! is then checked: no two holds overlap, fences grow, stale writes are
//! refused, counters add up exactly, the limiter keeps its quota, no wait
//! outlives its bound, and wake-ups are back after the last fault.
//!
//! ```text
//! lockguard-chaos [--profile ci|long] [--store NAME[,NAME...]|all] [--seed N]
//!                 [--self-test] [--target URL] [--out DIR]
//! ```
//!
//! The exit status is 0 when every check passed (with `--self-test`: when
//! every deliberate violation was caught), 1 otherwise, 2 for bad usage.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod check;
mod clock;
mod deploy;
mod history;
mod run;
mod store;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use deploy::Deployment;
use store::{Kind, Target};

const USAGE: &str = "\
usage: lockguard-chaos [--profile ci|long] [--store NAME[,NAME...]|all] [--seed N]
                       [--self-test] [--target URL] [--out DIR]

  --profile ci     a few seconds of workload per store (default)
  --profile long   two minutes per store, more workers (for releases)
  --store          redis, redlock, postgres, mysql, zookeeper, sentinel, cluster, or all (default)
  --seed N         the fault schedule's seed (printed; random when not given)
  --self-test      break the locking on purpose; succeed only if the checker catches it
  --no-faults      the workload alone, no faults (to tell a fault's doing from the client's)
  --target URL     run against your own store (redis://, rediss://, postgres://, mysql://,
                   zookeeper://HOST:PORT,...) with client-side faults only
  --out DIR        keep the histories in DIR (default: a temporary directory,
                   kept when a check fails)";

#[derive(Debug)]
struct Options {
    profile: run::Profile,
    stores: Vec<Kind>,
    seed: u64,
    self_test: bool,
    no_faults: bool,
    target: Option<String>,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        profile: run::CI,
        stores: store::ALL.to_vec(),
        seed: fastrand::u64(..),
        self_test: false,
        no_faults: false,
        target: None,
        out: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--profile" => {
                o.profile = match value()?.as_str() {
                    "ci" => run::CI,
                    "long" => run::LONG,
                    p => return Err(format!("unknown profile {p:?}: ci or long")),
                }
            }
            "--store" => {
                let v = value()?;
                o.stores = if v == "all" {
                    store::ALL.to_vec()
                } else {
                    v.split(',')
                        .map(|s| Kind::parse(s).ok_or_else(|| format!("unknown store {s:?}")))
                        .collect::<Result<_, _>>()?
                };
            }
            "--seed" => o.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--self-test" => o.self_test = true,
            "--no-faults" => o.no_faults = true,
            "--target" => o.target = Some(value()?),
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn parse_worker(args: &[String]) -> Result<worker::WorkerArgs, String> {
    let get = |name: &str| -> Result<String, String> {
        let i = args
            .iter()
            .position(|a| a == name)
            .ok_or_else(|| format!("worker: {name} missing"))?;
        args.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("worker: {name} needs a value"))
    };
    let kind = Kind::parse(&get("--store")?).ok_or("worker: bad --store")?;
    let target = Target {
        kind,
        addr: get("--addr")?,
        namespace: get("--namespace")?,
    };
    let num = |s: String| s.parse::<u64>().map_err(|e| e.to_string());
    Ok(worker::WorkerArgs {
        id: u32::try_from(num(get("--id")?)?).map_err(|e| e.to_string())?,
        seed: num(get("--seed")?)?,
        until: num(get("--until")?)?,
        target,
        out: PathBuf::from(get("--out")?),
        brk: match get("--break") {
            Ok(b) => Some(worker::Break::parse(&b).ok_or("worker: bad --break")?),
            Err(_) => None,
        },
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        return match parse_worker(&args[1..]).and_then(worker::run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let out = match &o.out {
        Some(d) => d.clone(),
        None => match tempfile::Builder::new()
            .prefix("lockguard-chaos-")
            .tempdir()
        {
            Ok(d) => d.keep(),
            Err(e) => {
                eprintln!("error: cannot make a temporary directory: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    println!(
        "lockguard-chaos: profile {}, seed {}{} (replay with --seed {})",
        o.profile.name,
        o.seed,
        if o.self_test { ", self-test" } else { "" },
        o.seed
    );
    let deployments: Vec<Box<dyn FnOnce() -> Deployment>> = match &o.target {
        Some(url) => {
            let t = match Target::from_url(url, String::new()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            println!(
                "target {url}: a store of yours, so only client-side faults (worker pause and kill); the server is never paused, restarted or disconnected"
            );
            vec![Box::new(move || Deployment::External(t))]
        }
        None => o
            .stores
            .iter()
            .map(|k| {
                let k = *k;
                Box::new(move || Deployment::start(k)) as Box<dyn FnOnce() -> Deployment>
            })
            .collect(),
    };
    let mut failed = false;
    let run_started = std::time::Instant::now();
    for start in deployments {
        let started = std::time::Instant::now();
        // A harness that cannot start or restart a server panics (with the
        // server's log): that store's run fails, the next one still runs,
        // and the servers are killed as the panic unwinds.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut d = start();
            let setup = started.elapsed();
            let kind = d.kind();
            let dir = out.join(kind.name());
            (
                kind,
                setup,
                run::run(&mut d, o.profile, o.seed, o.self_test, o.no_faults, &dir),
            )
        }));
        match result {
            Err(_) => {
                failed = true;
                println!("a store's harness failed (its message is above); the run failed");
            }
            Ok((kind, _, Err(e))) => {
                failed = true;
                println!("{}: the run failed: {e}", kind.name());
            }
            Ok((_, setup, Ok(r))) => {
                let ok = report(&r, o.self_test, setup, started.elapsed());
                failed |= !ok;
            }
        }
    }
    println!(
        "lockguard-chaos: {}{} in {:.1} s; seed {}; histories in {}",
        if o.self_test { "self-test " } else { "" },
        if failed { "FAILED" } else { "passed" },
        run_started.elapsed().as_secs_f64(),
        o.seed,
        out.display()
    );
    if failed {
        ExitCode::FAILURE
    } else {
        if o.out.is_none() {
            let _ = std::fs::remove_dir_all(&out);
        }
        ExitCode::SUCCESS
    }
}

/// Prints one store's result; whether it passed.
fn report(
    r: &run::StoreRun,
    self_test: bool,
    setup: std::time::Duration,
    took: std::time::Duration,
) -> bool {
    let m = &r.measures;
    println!(
        "{}: {} ops ({} with unknown outcome), {} holds, {} faults, {} handoffs after the last fault{}; {:.1} s ({:.1} s to start the store)",
        r.store,
        m.ops,
        m.unknown,
        m.holds,
        r.faults.len(),
        m.handoffs,
        m.handoff_median_ms
            .map(|x| format!(" (median {x:.1} ms)"))
            .unwrap_or_default(),
        took.as_secs_f64(),
        setup.as_secs_f64()
    );
    for f in &r.faults {
        println!("  fault {f}");
    }
    if let Some(why) = &m.wakeups_unmeasured {
        println!("  wake-ups not measured: {why}");
    }
    if !r.skipped.is_empty() {
        println!(
            "  not checked across the failover (asynchronous replication loses acknowledged writes, as documented): {}",
            r.skipped.join(", ")
        );
    }
    let ok = if self_test {
        let lock_caught = r.violations.iter().any(|v| v.check == "mutual-exclusion");
        let counter_caught = !crate::store::Kind::parse(r.store).is_some_and(Kind::has_counters)
            || r.violations.iter().any(|v| v.check == "counters-exact");
        println!(
            "  self-test: overlapping holds {}, lost counter update {}",
            if lock_caught { "caught" } else { "NOT CAUGHT" },
            if counter_caught {
                "caught (or no counters)"
            } else {
                "NOT CAUGHT"
            }
        );
        lock_caught && counter_caught
    } else {
        r.violations.is_empty()
    };
    // The first few of each check: enough to act on, short enough to read.
    let label = if self_test { "caught" } else { "VIOLATION" };
    let mut shown: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for v in &r.violations {
        let n = shown.entry(v.check).or_default();
        *n += 1;
        if *n > 3 {
            continue;
        }
        println!("  {label} [{}] {}: {}", v.check, r.store, v.what);
        for o in v.ops.iter().take(6) {
            println!("      {o}");
        }
    }
    for (check, n) in shown {
        if n > 3 {
            println!("  ... and {} more [{check}]", n - 3);
        }
    }
    if !ok {
        println!("  {}: FAILED; histories in {}", r.store, r.dir.display());
    }
    ok
}
