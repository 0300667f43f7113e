//! The history checker on every store, as tests: `cargo test` builds the
//! `lockguard-chaos` binary with the rest of the workspace, and these run
//! it. `scripts/test.sh` runs them in a pass of their own (the names start
//! with `history_checker_`), with nothing else on the machine, and shows
//! their output: the seed to replay a failure with is printed at the start
//! of each run.

use std::process::Command;

/// Runs the checker with `args`; its exit status must be 0.
fn chaos(args: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_lockguard-chaos"))
        .args(args)
        .status()
        .expect("run lockguard-chaos");
    assert!(
        status.success(),
        "lockguard-chaos {} failed ({status}); its output above names the check, the operations and the seed",
        args.join(" ")
    );
}

/// Worker processes on every store (Redis, Redlock, PostgreSQL, MySQL,
/// ZooKeeper, Sentinel, Cluster) under random faults: every recorded
/// history passes every check.
#[test]
fn history_checker_passes_on_every_store() {
    chaos(&["--profile", "ci"]);
}

/// The self-test breaks the locking on purpose and passes only if the
/// checker catches it on every store: the checks can fail.
#[test]
fn history_checker_self_test_catches_broken_locking() {
    chaos(&["--profile", "ci", "--self-test"]);
}
