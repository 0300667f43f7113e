//! A job on a schedule, run by three replicas whose clocks differ a little:
//! each replica tries it every period, and `at_least` keeps the lock past
//! the job's quick end, so each period's job runs once (ShedLock's
//! `lockAtLeastFor`; the fixed lease is its `lockAtMostFor`).
//!
//! ```sh
//! cargo run --example scheduled_job                                  # in-memory store
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example scheduled_job  # real Redis
//! ```
//!
//! Exits with status 1 if a period's job ran other than once. (It imports
//! the attribute from `lockguard_macros`, a dev-dependency of this package;
//! applications use `lockguard::distributed_lock` with the `macros`
//! feature.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockguard::prelude::*;
use lockguard::{Client, Error};
use lockguard_macros::distributed_lock;
use tokio::time::Instant;

/// How often the job is due.
const PERIOD: Duration = Duration::from_secs(2);
/// How many periods the example runs.
const PERIODS: u32 = 3;
/// How far apart the replicas' clocks are: replica `r` starts its periods
/// `r * SKEW` late.
const SKEW: Duration = Duration::from_millis(150);

/// The job: every replica calls it each period; while one's lock is kept
/// (at least 1.5 s, at most 1 min), the others skip it.
#[distributed_lock(key = "{job}", ttl = "1m", at_least = "1500ms", skip_if_busy, client = lg)]
async fn nightly_report(lg: &Client, job: &str, replica: usize) -> Result<Option<()>, Error> {
    println!("  replica {replica} runs {job}");
    Ok(Some(()))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let lg = Client::from_env_or_memory().await?;
    println!(
        "store: {}; {PERIODS} periods of {PERIOD:?}, 3 replicas",
        lg.store_name()
    );
    let job: Arc<str> = format!("report:{}", std::process::id()).into();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        // Each replica a client of its own, as separate processes have.
        let client = if lg.store_name() == "memory" {
            lg.peer()
        } else {
            Client::from_env().await?
        };
        replicas.push(client);
    }
    let start = Instant::now();
    let runs = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for (r, client) in replicas.into_iter().enumerate() {
        let (job, runs) = (job.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            for period in 0..PERIODS {
                tokio::time::sleep_until(start + PERIOD * period + SKEW * r as u32).await;
                if nightly_report(&client, &job, r).await?.is_some() {
                    runs.fetch_add(1, Ordering::Relaxed);
                } else {
                    println!("  replica {r} skips period {period}: already run");
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("a replica panicked")?;
    }
    let runs = runs.load(Ordering::Relaxed);
    println!("the job ran {runs} times in {PERIODS} periods");
    if runs != PERIODS {
        eprintln!("expected once per period");
        std::process::exit(1);
    }
    Ok(())
}
