//! `lockguard chaos --target URL`: the history checker run from the tool
//! against a store of the user's (here a Redis with a password, started by
//! the test), with client-side faults only.

#![cfg(feature = "chaos")]

use std::path::Path;
use std::process::{Command, Output};

use lockguard_testing::RedisServer;

const PASSWORD: &str = "s3cret-chaos-pw";

/// Runs `lockguard chaos` with `args`, its histories in `out`.
fn chaos(args: &[&str], out: &Path) -> (Output, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_lockguard"))
        .arg("chaos")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("start the lockguard tool");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        !text.contains(PASSWORD),
        "the output shows the password:\n{text}"
    );
    (run, text)
}

/// The checker runs its workers (`lockguard chaos worker ...`) against the
/// target, passes, writes its report, and never prints the password; in
/// self-test mode, where the workers break the locking on purpose, it
/// catches them (and says so with a success), so the passing run checked
/// real histories.
#[test]
fn history_checker_runs_from_the_tool_against_a_target() {
    let server = RedisServer::start_with_args(&["--requirepass", PASSWORD]);
    let url = server
        .url()
        .replacen("redis://", &format!("redis://:{PASSWORD}@"), 1);
    let dir = tempfile::tempdir().unwrap();

    let (run, text) = chaos(&["--target", &url], &dir.path().join("run"));
    assert!(run.status.success(), "{text}");
    assert!(text.contains("passed"), "{text}");
    assert!(text.contains("client-side faults"), "{text}");
    let report = dir.path().join("run").join("redis").join("report.html");
    let html = std::fs::read_to_string(&report).expect("the report is written");
    assert!(html.contains("<svg"), "the report has its timeline");
    assert!(!html.contains(PASSWORD), "the report shows the password");

    let (run, text) = chaos(
        &["--target", &url, "--self-test"],
        &dir.path().join("self-test"),
    );
    assert!(
        run.status.success(),
        "the checker missed the broken workers:\n{text}"
    );
}

/// Without `--target` the tool refuses, saying what it needs (the test
/// servers are the `lockguard-chaos` binary's business).
#[test]
fn chaos_without_a_target_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (run, text) = chaos(&[], dir.path());
    assert_eq!(run.status.code(), Some(2), "{text}");
    assert!(text.contains("--target URL"), "{text}");
}
