//! lockguard's history checker, Jepsen-style, for any store: worker
//! processes drive a real store under random faults, and their recorded
//! histories are checked.
//!
//! A run starts a store ([`Store::start`]), runs worker processes (the
//! same binary again, `worker` subcommand), each with its own lockguard
//! client ([`Store::connect`]), that lock, take multi-locks and semaphore
//! permits, campaign in an election, write fenced values, update counters
//! and ask a rate limiter, and processes that each run a scheduled job
//! once (`at_least`) and exit, while the run pauses, restarts and
//! disconnects the store ([`Deployment::apply`]) and pauses and kills
//! workers on a schedule drawn from a seed. Every operation's invocation
//! and completion is recorded on one monotonic clock; the merged history
//! is then checked: no two holds overlap (a multi-lock holding every key
//! from its return), no more permits held than the semaphore has, fences
//! grow, stale writes are refused, no job runs inside the `at_least` of
//! the run before it, one leader at a time with terms that grow, counters
//! add up exactly, the limiter keeps its quota, no wait outlives its
//! bound, and wake-ups are back after the last fault.
//!
//! The `lockguard-chaos` binary runs lockguard's own stores. A store crate
//! runs its store with a binary of its own that calls [`main`]:
//!
//! ```no_run
//! use lockguard_chaos::{BoxFuture, Deployment, Servers, RESPONSE_TIMEOUT, Store};
//! use lockguard_core::{Client, Result};
//! use lockguard_testing::PostgresServer;
//!
//! /// PostgreSQL, as a store crate outside lockguard would plug in its own.
//! struct MyStore;
//!
//! impl Store for MyStore {
//!     fn name(&self) -> &'static str {
//!         "mine"
//!     }
//!
//!     fn start(&self) -> Box<dyn Deployment> {
//!         let server = PostgresServer::start();
//!         let url = server.url();
//!         Box::new(Servers::one(server, url))
//!     }
//!
//!     /// A client of the store at `addr`, its tables under `namespace`,
//!     /// with RESPONSE_TIMEOUT as its timeouts.
//!     fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
//!         Box::pin(my_store::connect(addr, namespace, RESPONSE_TIMEOUT))
//!     }
//! }
//! # mod my_store {
//! #     pub async fn connect(_: &str, _: &str, _: std::time::Duration)
//! #         -> lockguard_core::Result<lockguard_core::Client> { unimplemented!() }
//! # }
//!
//! fn main() -> std::process::ExitCode {
//!     lockguard_chaos::main(&[&MyStore])
//! }
//! ```
//!
//! ```text
//! BINARY [--profile ci|long] [--store NAME[,NAME...]|all] [--seed N]
//!        [--self-test] [--no-faults] [--target URL] [--out DIR]
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
mod report;
mod run;
mod store;
#[cfg(feature = "stores")]
pub mod stores;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

pub use check::NOT_ACROSS_ASYNC_FAILOVER;
pub use deploy::{Deployment, ServerFault, Servers, server_fault};
pub use store::{BoxFuture, RESPONSE_TIMEOUT, Store};

use deploy::External;
use store::Target;

fn usage(stores: &[&dyn Store]) -> String {
    let names: Vec<&str> = stores.iter().map(|s| s.name()).collect();
    format!(
        "\
usage: {bin} [--profile ci|long] [--store NAME[,NAME...]|all] [--seed N]
       [--self-test] [--no-faults] [--target URL] [--out DIR]

  --profile ci     a few seconds of workload per store (default)
  --profile long   two minutes per store, more workers (for releases)
  --store          {names}, or all (default)
  --seed N         the fault schedule's seed (printed; random when not given)
  --self-test      break the locking on purpose; succeed only if the checker catches it
  --no-faults      the workload alone, no faults (to tell a fault's doing from the client's)
  --target URL     run against your own store (a URL one of the stores serves)
                   with client-side faults only
  --out DIR        keep the histories and report.html in DIR (default: a temporary directory,
                   kept when a check fails)",
        bin = command_name(),
        names = names.join(", ")
    )
}

struct Options<'s> {
    profile: run::Profile,
    stores: Vec<&'s dyn Store>,
    seed: u64,
    self_test: bool,
    no_faults: bool,
    target: Option<String>,
    out: Option<PathBuf>,
}

fn find<'s>(stores: &[&'s dyn Store], name: &str) -> Result<&'s dyn Store, String> {
    stores
        .iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| format!("unknown store {name:?}"))
}

fn parse<'s>(stores: &[&'s dyn Store], args: &[String]) -> Result<Options<'s>, String> {
    let mut o = Options {
        profile: run::CI,
        stores: stores.to_vec(),
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
                    stores.to_vec()
                } else {
                    v.split(',')
                        .map(|name| find(stores, name))
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

/// A worker's command line, its target borrowing from `args`.
fn parse_worker<'a>(
    stores: &[&'a dyn Store],
    args: &'a [String],
) -> Result<worker::WorkerArgs<'a>, String> {
    let get = |name: &str| -> Result<&'a str, String> {
        let i = args
            .iter()
            .position(|a| a == name)
            .ok_or_else(|| format!("worker: {name} missing"))?;
        args.get(i + 1)
            .map(String::as_str)
            .ok_or_else(|| format!("worker: {name} needs a value"))
    };
    let target = Target {
        store: find(stores, get("--store")?)?,
        addr: get("--addr")?,
        namespace: get("--namespace")?,
    };
    let num = |s: &str| s.parse::<u64>().map_err(|e| e.to_string());
    Ok(worker::WorkerArgs {
        id: u32::try_from(num(get("--id")?)?).map_err(|e| e.to_string())?,
        seed: num(get("--seed")?)?,
        until: num(get("--until")?)?,
        target,
        out: PathBuf::from(get("--out")?),
        role: match get("--role") {
            Ok(r) => worker::Role::parse(r).ok_or("worker: bad --role")?,
            Err(_) => worker::Role::Mixed,
        },
        brk: match get("--break") {
            Ok(b) => Some(worker::Break::parse(b).ok_or("worker: bad --break")?),
            Err(_) => None,
        },
    })
}

/// Runs the checker on `stores` as the command line asks (see the crate
/// docs): a run of every store it names, or, when started as a worker by a
/// run, that worker. Call it from the binary's `main`.
pub fn main(stores: &[&dyn Store]) -> ExitCode {
    command(stores, std::env::args().skip(1).collect(), &[])
}

/// The arguments a worker is started with before its own (`worker ...`):
/// the subcommand that leads to the checker, when it is one.
static COMMAND: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The name the usage gives the checker: the binary, and the subcommand.
fn command_name() -> String {
    let bin = std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_owned))
        .unwrap_or_else(|| "lockguard-chaos".into());
    match COMMAND.get() {
        Some(sub) if !sub.is_empty() => format!("{bin} {}", sub.join(" ")),
        _ => bin,
    }
}

/// [`main`] for a binary where the checker is a subcommand: `args` are the
/// arguments after `subcommand` (as [`main`] takes the binary's), and the
/// workers are started as `BINARY SUBCOMMAND... worker ...`, so the binary
/// must hand those to this function as well. The `lockguard` tool's
/// `lockguard chaos` is this.
pub fn command(stores: &[&dyn Store], args: Vec<String>, subcommand: &[&str]) -> ExitCode {
    let _ = COMMAND.set(subcommand.iter().map(|s| (*s).to_owned()).collect());
    if args.first().map(String::as_str) == Some("worker") {
        return match parse_worker(stores, &args[1..]).and_then(worker::run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let o = match parse(stores, &args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{}", usage(stores));
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
    type Start<'s> = (&'s dyn Store, Box<dyn FnOnce() -> Box<dyn Deployment> + 's>);
    let deployments: Vec<Start<'_>> = match &o.target {
        Some(url) => {
            let Some((store, addr)) = stores
                .iter()
                .find_map(|s| s.address_of(url).map(|a| (*s, a)))
            else {
                let names: Vec<&str> = stores.iter().map(|s| s.name()).collect();
                eprintln!(
                    "error: --target {:?}: none of the stores ({}) serves this URL",
                    lockguard_core::store::url::redacted(url),
                    names.join(", ")
                );
                return ExitCode::from(2);
            };
            println!(
                "target {}: a store of yours, so only client-side faults (worker pause and kill); the server is never paused, restarted or disconnected",
                lockguard_core::store::url::redacted(url)
            );
            vec![(
                store,
                Box::new(move || Box::new(External(addr)) as Box<dyn Deployment>),
            )]
        }
        None => o
            .stores
            .iter()
            .map(|s| {
                (
                    *s,
                    Box::new(|| s.start()) as Box<dyn FnOnce() -> Box<dyn Deployment>>,
                )
            })
            .collect(),
    };
    let mut failed = false;
    // What failed, one line each, repeated at the end: a log cut to its
    // last lines (CI's) still names the store and the check.
    let mut recap: Vec<String> = Vec::new();
    let run_started = std::time::Instant::now();
    for (store, start) in deployments {
        let started = std::time::Instant::now();
        // A harness that cannot start or restart a server panics (with the
        // server's log): that store's run fails, the next one still runs,
        // and the servers are killed as the panic unwinds.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut d = start();
            let setup = started.elapsed();
            let dir = out.join(store.name());
            (
                setup,
                run::run(
                    store,
                    d.as_mut(),
                    o.profile,
                    o.seed,
                    o.self_test,
                    o.no_faults,
                    &dir,
                ),
            )
        }));
        match result {
            Err(_) => {
                failed = true;
                let line = format!(
                    "{}: the store's harness failed (its message is above); the run failed",
                    store.name()
                );
                println!("{line}");
                recap.push(line);
            }
            Ok((_, Err(e))) => {
                failed = true;
                let line = format!("{}: the run failed: {e}", store.name());
                println!("{line}");
                recap.push(line);
            }
            Ok((setup, Ok(r))) => {
                let ok = report(&r, o.self_test, setup, started.elapsed(), &mut recap);
                failed |= !ok;
            }
        }
    }
    for line in &recap {
        println!("lockguard-chaos: failed: {line}");
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

/// Prints one store's result; whether it passed. A failure's lines (the
/// checks it failed, or what the self-test did not catch) go to `recap`
/// too.
fn report(
    r: &run::StoreRun,
    self_test: bool,
    setup: std::time::Duration,
    took: std::time::Duration,
    recap: &mut Vec<String>,
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
    println!("  report: {}", r.report.display());
    if let Some(why) = &m.wakeups_unmeasured {
        println!("  wake-ups not measured: {why}");
    }
    if m.session_overlaps > 0 {
        println!(
            "  {} holds overlapped a hold whose session a server fault ended (its lock freed at once; fences and fenced writes checked)",
            m.session_overlaps
        );
    }
    if !r.skipped.is_empty() {
        println!(
            "  not checked across the failover (asynchronous replication loses acknowledged writes, as documented): {}",
            r.skipped.join(", ")
        );
    }
    let ok = if self_test {
        let lock_caught = r.violations.iter().any(|v| v.check == "mutual-exclusion");
        let counter_caught =
            !r.counters || r.violations.iter().any(|v| v.check == "counters-exact");
        let permits_caught = r.violations.iter().any(|v| v.check == "permits");
        let limit_caught = !r.limiter || r.violations.iter().any(|v| v.check == "rate-limit");
        // The self-test's only multi-locks and jobs are the broken ones.
        let multi_caught = r.violations.iter().any(|v| v.check == "multi-lock");
        let job_caught = r.violations.iter().any(|v| v.check == "at-least");
        let schedule_caught = r.violations.iter().any(|v| v.check == "schedule-once");
        let said = |caught: bool| if caught { "caught" } else { "NOT CAUGHT" };
        let line = format!(
            "self-test: overlapping holds {}, lost counter update {}, permits overbooked {}, admissions over the quota {}, multi-lock returned with a key lapsed {}, job run inside at_least {}, scheduled period run twice {}",
            said(lock_caught),
            if counter_caught {
                "caught (or no counters)"
            } else {
                "NOT CAUGHT"
            },
            said(permits_caught),
            if limit_caught {
                "caught (or no limiter)"
            } else {
                "NOT CAUGHT"
            },
            said(multi_caught),
            said(job_caught),
            said(schedule_caught),
        );
        println!("  {line}");
        let ok = lock_caught
            && counter_caught
            && permits_caught
            && limit_caught
            && multi_caught
            && job_caught
            && schedule_caught;
        if !ok {
            recap.push(format!("{}: {line}", r.store));
        }
        ok
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
        if !self_test {
            recap.push(format!("[{}] {}: {}", v.check, r.store, v.what));
        }
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
