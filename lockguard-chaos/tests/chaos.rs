//! The history checker on every store, as tests: `cargo test` builds the
//! `lockguard-chaos` binary with the rest of the workspace, and these run
//! it. `scripts/test.sh` runs them in a pass of their own (the names start
//! with `history_checker_`), one at a time, with nothing else on the
//! machine: a run's workers keep leases of a few hundred ms, which a
//! store's start in a run beside it could starve (see the script).
//!
//! Each run's output is printed whole when it ends, so runs side by side
//! (`--test-threads` above 1) do not interleave their lines: the seed to
//! replay a failure with is on the first line of each.

use std::process::Command;

/// The stores of the first run: every Redis deployment.
const REDIS_STORES: &str = "redis,redlock,sentinel,cluster";
/// The stores of the second run.
const DATABASE_STORES: &str = "postgres,postgres-session,mysql,mysql-session,zookeeper,etcd";

/// Runs the checker with `args`, prints its output, and fails unless it
/// exited with 0.
fn chaos(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockguard-chaos"))
        .args(args)
        .output()
        .expect("run lockguard-chaos");
    println!(
        "$ lockguard-chaos {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The checker's recap of what failed, in the panic's message too: a
    // log cut to its last lines still names the store and the check.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let recap: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("lockguard-chaos: failed: "))
        .collect();
    assert!(
        out.status.success(),
        "lockguard-chaos {} failed ({}); its output above names the check, the operations and the seed\n{}",
        args.join(" "),
        out.status,
        recap.join("\n")
    );
}

/// Worker processes on the Redis stores (one server, Redlock, Sentinel,
/// Cluster) under random faults: every recorded history passes every
/// check.
#[test]
fn history_checker_passes_on_the_redis_stores() {
    chaos(&["--profile", "ci", "--store", REDIS_STORES]);
}

/// Worker processes on the database stores (PostgreSQL, MySQL, ZooKeeper, etcd)
/// under random faults: every recorded history passes every check.
#[test]
fn history_checker_passes_on_the_database_stores() {
    chaos(&["--profile", "ci", "--store", DATABASE_STORES]);
}

/// The self-test breaks the locking on purpose and passes only if the
/// checker catches it on every store: the checks can fail.
#[test]
fn history_checker_self_test_catches_broken_locking() {
    chaos(&["--profile", "ci", "--self-test"]);
}

/// The two runs above cover every store the binary serves: a store added
/// to the binary must join one of them.
#[test]
fn history_checker_runs_cover_every_store() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockguard-chaos"))
        .arg("--help")
        .output()
        .expect("run lockguard-chaos --help");
    let help =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let covered: Vec<&str> = REDIS_STORES
        .split(',')
        .chain(DATABASE_STORES.split(','))
        .collect();
    // The usage's `--store` line: `  --store          redis, redlock, ..., or all (default)`.
    let line = help
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("--store "))
        .unwrap_or_else(|| panic!("no `--store` line in the usage:\n{help}"));
    let listed: Vec<&str> = line
        .split(", ")
        .map(str::trim)
        .filter(|s| !s.starts_with("or "))
        .collect();
    assert!(!listed.is_empty(), "no stores listed in {line:?}");
    for store in &listed {
        assert!(
            covered.contains(store),
            "store {store} is in no history_checker_passes_on_* run"
        );
    }
}
