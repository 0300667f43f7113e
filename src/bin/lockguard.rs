//! The `lockguard` tool.
//!
//! - `lockguard check URL`: the deployment check of the store behind `URL`
//!   (see `lockguard::check`). Prints one line per finding; the exit status
//!   is 0 when nothing fails, 1 on a FAIL, 2 when the check could not run.
//! - `lockguard chaos --target URL [...]`: the history checker
//!   (`lockguard-chaos`) against the store behind `URL`, with client-side
//!   faults only (feature `chaos`, in `full`). The exit status is 0 when
//!   every check passed, 1 otherwise, 2 for bad usage.

use std::process::ExitCode;

const USAGE: &str = "usage: lockguard check URL
       lockguard chaos --target URL [--seed N] [--profile ci|long] [--self-test] [--out DIR]

check  Connects to the store at URL (redis://, redis+redlock://,
       redis+cluster://, redis+sentinel://, postgres://, mysql:// or
       mariadb://, zookeeper://, etcd://) and says, line by line, whether
       this deployment provides what a lock's guarantees depend on (OK, WARN
       or FAIL, with the guarantee it affects). Exit status: 0 when nothing
       fails, 1 on a FAIL, 2 when the check could not run.
chaos  Runs the history checker against the store at URL: worker processes
       take locks, permits, counters and limits on it while some are paused
       and killed (the server is never touched), and what they recorded is
       checked (no two holders, fences that only grow, no lost update, ...).
       Writes report.html beside the histories. Exit status: 0 when every
       check passed, 1 otherwise, 2 for bad usage. Use a database or key
       prefix of its own: the workers write keys there.

`cargo install lockguard --features full` builds the tool with every store
and the chaos command.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") if args.len() == 2 => check(&args[1]),
        Some("chaos") => chaos(args[1..].to_vec()),
        Some("-h" | "--help") if args.len() == 1 => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn check(url: &str) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(lockguard::check::deployment(url)) {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `lockguard chaos ...`: the checker with the arguments after `chaos`
/// (a worker it starts comes back here as `lockguard chaos worker ...`).
/// Only against a store of the user's (`--target`): the harnesses that
/// start lockguard's own test servers are `lockguard-chaos`'s.
#[cfg(feature = "chaos")]
fn chaos(args: Vec<String>) -> ExitCode {
    let worker = args.first().map(String::as_str) == Some("worker");
    if !worker && !args.iter().any(|a| a == "--target") && !args.iter().any(|a| a == "--help") {
        eprintln!(
            "error: lockguard chaos needs --target URL: the store to run against (the \
             `lockguard-chaos` binary of a checkout starts its own test servers)\n\n{USAGE}"
        );
        return ExitCode::from(2);
    }
    lockguard_chaos::command(&lockguard_chaos::stores::ALL, args, &["chaos"])
}

#[cfg(not(feature = "chaos"))]
fn chaos(_args: Vec<String>) -> ExitCode {
    eprintln!(
        "error: this lockguard was built without the chaos command; \
         `cargo install lockguard --features full` builds it with every store and the command"
    );
    ExitCode::from(2)
}
