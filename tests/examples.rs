//! The main example, `flash_sale`, on each store's URL, run as a child
//! process with `LOCKGUARD_URL` against servers the test starts
//! (`scripts/test.sh` runs it on memory, Redis and PostgreSQL). And
//! `scheduled_job` (three replica processes) and `transfer` on Redis.
//!
//! The examples are built by `cargo test` when it runs every target, but
//! not by `cargo test --test examples`: a test that finds an example
//! missing, or older than its source, builds them itself, with the same
//! cargo, profile, target directory and features as this test.
#![cfg(all(feature = "redis", feature = "zookeeper", feature = "mysql"))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use lockguard_testing::{MariaDbServer, RedisServer, ZooKeeperServer};

/// The examples these tests run.
const EXAMPLES: [&str; 3] = ["flash_sale", "scheduled_job", "transfer"];

/// The facade's features this test was built with, which the examples are
/// built with too (`full` is the sum of the others).
const FEATURES: &[(&str, bool)] = &[
    ("redis", cfg!(feature = "redis")),
    ("macros", cfg!(feature = "macros")),
    ("tower", cfg!(feature = "tower")),
    ("axum", cfg!(feature = "axum")),
    ("cluster", cfg!(feature = "cluster")),
    ("sentinel", cfg!(feature = "sentinel")),
    ("metrics", cfg!(feature = "metrics")),
    ("serde", cfg!(feature = "serde")),
    ("postgres", cfg!(feature = "postgres")),
    ("sqlx", cfg!(feature = "sqlx")),
    ("zookeeper", cfg!(feature = "zookeeper")),
    ("mysql", cfg!(feature = "mysql")),
    ("tls-rustls", cfg!(feature = "tls-rustls")),
    ("tls-native-tls", cfg!(feature = "tls-native-tls")),
];

/// `target/debug/examples/flash_sale`.
fn flash_sale() -> PathBuf {
    example("flash_sale")
}

/// `<target dir>/<profile>/examples/NAME`, beside this test's own binary
/// (`<target dir>/<profile>/deps/examples-HASH`); the examples are built
/// first when one is missing or older than its source.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <target dir>/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if EXAMPLES
            .iter()
            .any(|e| !is_fresh(&profile_dir.join("examples").join(e), e))
        {
            build_examples(profile_dir);
        }
    });
    assert!(
        path.is_file(),
        "{} is missing after building it",
        path.display()
    );
    path
}

/// Whether the example's binary exists and is no older than its source.
fn is_fresh(binary: &Path, name: &str) -> bool {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.rs"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(binary), modified(&source)) {
        (Some(built), Some(written)) => built >= written,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// `cargo build --example ...` of this package, with the cargo that runs
/// the tests, into the target directory and profile this test was built
/// in, with this test's features. (A build for another `--target` puts
/// the profile one directory deeper; the path assertion then says so.)
fn build_examples(profile_dir: &Path) {
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let target_dir = profile_dir.parent().expect("the target directory");
    let features: Vec<&str> = FEATURES
        .iter()
        .filter(|(_, on)| *on)
        .map(|(f, _)| *f)
        .collect();
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--no-default-features", "--features", &features.join(",")]);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    for e in EXAMPLES {
        cmd.args(["--example", e]);
    }
    eprintln!("building the examples: {cmd:?}");
    let status = cmd.status().expect("run cargo to build the examples");
    assert!(status.success(), "building the examples failed: {cmd:?}");
}

/// Runs the example on `url`; its exit status and what it printed.
fn run(url: &str) -> (Output, String) {
    let out = Command::new(flash_sale())
        .env("LOCKGUARD_URL", url)
        .env_remove("REDIS_URL")
        .env("NO_COLOR", "1")
        .output()
        .expect("run flash_sale");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// On ZooKeeper, which offers no rate limiting, the sale runs without its
/// rate limits and every other check passes.
#[test]
fn flash_sale_runs_on_zookeeper() {
    let zk = ZooKeeperServer::start();
    let (out, text) = run(&format!("zookeeper://{}", zk.hosts()));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("on the zookeeper store"), "{text}");
    assert!(
        text.contains("the sale runs without its rate limits"),
        "{text}"
    );
    assert!(!text.contains("[FAILED]"), "{text}");
}

/// On MySQL (MariaDB), every check passes, rate limits included.
#[test]
fn flash_sale_runs_on_mysql() {
    let (out, text) = run(&MariaDbServer::shared().url());
    assert!(out.status.success(), "{text}");
    assert!(text.contains("on the mysql store"), "{text}");
    assert!(
        text.contains("[ok] rate limits refused the bots and the impatient"),
        "{text}"
    );
}

/// Redlock offers no counters, which the sale keeps its stock in: the
/// example says so and exits with status 2, before serving anything.
#[test]
fn flash_sale_on_redlock_says_what_it_needs() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let (out, text) = run(&lockguard_testing::redlock_url(&nodes));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("counters") && text.contains("redlock"),
        "{text}"
    );
}

/// `scheduled_job`: three replica processes run the job once per period
/// on Redis (the example checks that no period ran twice and none was
/// missed).
#[test]
fn scheduled_job_runs_once_per_period_on_redis() {
    let redis = RedisServer::start();
    let out = Command::new(example("scheduled_job"))
        .env("LOCKGUARD_URL", redis.url())
        .env_remove("REDIS_URL")
        .output()
        .expect("run scheduled_job");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("store: redis; three replica processes"),
        "{text}"
    );
    assert!(text.contains("across 3 replicas"), "{text}");
}

/// `transfer`: four replicas, one client each, move money between accounts
/// under multi-locks, in memory and on Redis; no money appears or vanishes
/// (the example checks the total itself).
#[test]
fn transfer_keeps_the_total_in_memory_and_on_redis() {
    let redis = RedisServer::start();
    for (url, store) in [(None, "memory"), (Some(redis.url()), "redis")] {
        let mut cmd = Command::new(example("transfer"));
        cmd.env_remove("REDIS_URL").env_remove("LOCKGUARD_URL");
        if let Some(url) = url {
            cmd.env("LOCKGUARD_URL", url);
        }
        let out = cmd.output().expect("run transfer");
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains(&format!("store: {store}")), "{text}");
        assert!(text.contains("no money appeared or vanished"), "{text}");
    }
}
