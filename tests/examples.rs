//! The main example, `flash_sale`, on each store's URL: the binary `cargo
//! test` built with this run's features, run as a child process with
//! `LOCKGUARD_URL`, against servers the test starts. (`scripts/test.sh` runs
//! it on memory, Redis and PostgreSQL.) And `scheduled_job` and `transfer`
//! on Redis.
#![cfg(all(feature = "redis", feature = "zookeeper", feature = "mysql"))]

use std::path::PathBuf;
use std::process::{Command, Output};

use lockguard_testing::{MariaDbServer, RedisServer, ZooKeeperServer};

/// `target/debug/examples/flash_sale`, beside this test's own binary.
fn flash_sale() -> PathBuf {
    example("flash_sale")
}

/// `target/debug/examples/NAME`, beside this test's own binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = debug.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: cargo test builds the examples first",
        path.display()
    );
    path
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

/// `scheduled_job`: three replicas with skewed clocks, one client each, run
/// the job once per period on Redis (the example checks its own count).
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
    assert!(text.contains("store: redis"), "{text}");
    assert!(text.contains("the job ran 3 times in 3 periods"), "{text}");
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
