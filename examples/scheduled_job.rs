//! A job on a schedule, run once per period by three replica processes:
//! each calls `lg.schedule(name, every, job)`, and in each period the one
//! that takes the job's lock runs it while the others skip (ShedLock's
//! `@Scheduled` with `@SchedulerLock`).
//!
//! ```sh
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example scheduled_job  # three processes
//! cargo run --example scheduled_job   # no URL: three replicas in one process, on the in-memory store
//! ```
//!
//! The parent starts the replicas (this program again, with `--replica N`)
//! and reads what each ran from its output. Exits with status 1 if a
//! period ran twice, or if fewer periods ran than passed.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockguard::prelude::*;
use lockguard::{Client, Error, JobRun, Schedule};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// How often the job is due.
const PERIOD: Duration = Duration::from_secs(1);
/// How many periods the replicas run for.
const PERIODS: u32 = 4;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, replica, job, until] = &args[..]
        && flag == "--replica"
    {
        let lg = Client::from_env().await?;
        let (ran, mut lines) = mpsc::unbounded_channel();
        run_replica(&lg, replica, job, parse_ms(until), ran).await?;
        while let Some(line) = lines.recv().await {
            println!("{line}");
        }
        return Ok(());
    }

    let lg = Client::from_env_or_memory().await?;
    let job = format!("report:{}", std::process::id());
    let until = unix_ms() + u64::try_from((PERIOD * PERIODS).as_millis()).unwrap_or(u64::MAX);
    let (ran, mut lines) = mpsc::unbounded_channel::<String>();
    if lg.store_name() == "memory" {
        println!(
            "store: memory; three replicas in this process (processes need a shared store: set LOCKGUARD_URL)"
        );
        for r in 0..3 {
            let (lg, job, ran) = (lg.peer(), job.clone(), ran.clone());
            tokio::spawn(async move { run_replica(&lg, &r.to_string(), &job, until, ran).await });
        }
    } else {
        println!("store: {}; three replica processes", lg.store_name());
        let exe = std::env::current_exe().expect("this program's path");
        for r in 0..3 {
            let mut child = tokio::process::Command::new(&exe)
                .args(["--replica", &r.to_string(), &job, &until.to_string()])
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start a replica process");
            let stdout = child.stdout.take().expect("the replica's output");
            let ran = ran.clone();
            tokio::spawn(async move {
                let mut out = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    let _ = ran.send(line);
                }
                let status = child.wait().await;
                if !status.as_ref().is_ok_and(|s| s.success()) {
                    let _ = ran.send(format!("replica {r} failed: {status:?}"));
                }
            });
        }
    }
    drop(ran);

    let mut periods = Vec::new();
    while let Some(line) = lines.recv().await {
        println!("  {line}");
        if line.contains("failed") {
            std::process::exit(1);
        }
        if let Some(period) = line.rsplit(' ').next().and_then(|p| p.parse::<u64>().ok()) {
            periods.push(period);
        }
    }
    periods.sort_unstable();
    let runs = periods.len();
    periods.dedup();
    println!(
        "{runs} runs in {} periods of {PERIOD:?} across 3 replicas",
        periods.len()
    );
    if periods.len() != runs {
        eprintln!("a period ran twice");
        std::process::exit(1);
    }
    if runs < PERIODS as usize {
        eprintln!("fewer runs than periods passed");
        std::process::exit(1);
    }
    Ok(())
}

/// Replica `replica`: the job on its schedule until `until` (Unix ms),
/// each run said on `ran`.
async fn run_replica(
    lg: &Client,
    replica: &str,
    job: &str,
    until: u64,
    ran: mpsc::UnboundedSender<String>,
) -> Result<(), Error> {
    let replica = replica.to_owned();
    let scheduled = lg.schedule(job, Schedule::every(PERIOD), move |run: JobRun| {
        let line = format!("replica {replica} ran period {}", run.period());
        let ran = ran.clone();
        async move {
            // The job's work, its writes fenced with run.fencing_token().
            ran.send(line).ok();
            Ok::<_, Error>(())
        }
    })?;
    tokio::time::sleep(Duration::from_millis(until.saturating_sub(unix_ms()))).await;
    scheduled.stop().await;
    Ok(())
}

fn unix_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

fn parse_ms(text: &str) -> u64 {
    text.parse().expect("--replica N JOB UNTIL_MS")
}
