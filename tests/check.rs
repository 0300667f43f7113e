//! The deployment check against real servers set up well and badly, through
//! the API and through the `lockguard check URL` command and its exit
//! status.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::process::Command;
use std::time::Duration;

use lockguard::check::{Report, Verdict};
use lockguard::prelude::*;
use lockguard::{Client, ErrorKind};
use lockguard_testing::conformance::eventually;
use lockguard_testing::{PostgresServer, RedisServer};

/// The verdict of the finding about `subject`.
fn verdict(report: &Report, subject: &str) -> Verdict {
    report
        .about(subject)
        .next()
        .unwrap_or_else(|| panic!("no finding about {subject}: {report}"))
        .verdict
}

/// `lockguard check URL`: its exit code and what it printed.
fn command(url: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockguard"))
        .args(["check", url])
        .output()
        .expect("run lockguard check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("an exit code"), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_set_up_for_locks_passes() {
    let server = RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert!(report.passed(), "{report}");
    for subject in ["version", "maxmemory-policy", "persistence", "replication"] {
        assert_eq!(verdict(&report, subject), Verdict::Ok, "{report}");
    }
    let (code, text) = command(&server.url());
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("OK   persistence"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_or_forget_locks_is_told() {
    let server = RedisServer::start_with_args(&[
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert!(!report.passed(), "{report}");
    assert_eq!(verdict(&report, "maxmemory-policy"), Verdict::Fail);
    // The test servers keep nothing on disk.
    assert_eq!(verdict(&report, "persistence"), Verdict::Warn);
    let (code, text) = command(&server.url());
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("FAIL maxmemory-policy: allkeys-lru"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_replica_urls_are_told() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let counted = eventually(Duration::from_secs(10), || async {
        let report = lockguard::check::deployment(&master.url()).await.unwrap();
        verdict(&report, "replication") == Verdict::Warn
    })
    .await;
    assert!(counted, "the master never counted its replica");
    let report = lockguard::check::deployment(&replica.url()).await.unwrap();
    assert_eq!(verdict(&report, "replication"), Verdict::Fail, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_must_be_distinct_servers() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let good = format!("redis+redlock://{}", hosts.join(","));
    let report = lockguard::check::deployment(&good).await.unwrap();
    assert_eq!(verdict(&report, "independence"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "clocks"), Verdict::Ok, "{report}");
    // The first server again under another name: a quorum of "three" that
    // is two servers.
    let twice = format!(
        "redis+redlock://{},{},localhost:{}",
        hosts[0],
        hosts[1],
        nodes[0].port()
    );
    let report = lockguard::check::deployment(&twice).await.unwrap();
    assert_eq!(verdict(&report, "independence"), Verdict::Fail, "{report}");
    let (code, text) = command(&twice);
    assert_eq!(code, 1, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_durability_standbys_and_schema_are_checked() {
    // The test servers run without fsync: told.
    let fast = PostgresServer::start();
    let report = lockguard::check::deployment(&fast.url()).await.unwrap();
    assert_eq!(verdict(&report, "fsync"), Verdict::Fail, "{report}");
    drop(fast);

    let server = PostgresServer::start_durable();
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(verdict(&report, "fsync"), Verdict::Ok);
    assert_eq!(verdict(&report, "synchronous_commit"), Verdict::Ok);
    assert_eq!(verdict(&report, "standbys"), Verdict::Ok);
    // The schema is made by the first client.
    assert_eq!(verdict(&report, "schema"), Verdict::Warn, "{report}");
    Client::connect(&server.url()).await.unwrap();
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert_eq!(verdict(&report, "schema"), Verdict::Ok, "{report}");
    assert_eq!(command(&server.url()).0, 0);

    server.psql("ALTER SYSTEM SET synchronous_commit = off");
    server.psql("SELECT pg_reload_conf()");
    let told = eventually(Duration::from_secs(10), || async {
        let report = lockguard::check::deployment(&server.url()).await.unwrap();
        verdict(&report, "synchronous_commit") == Verdict::Fail
    })
    .await;
    assert!(told, "synchronous_commit = off was not told");
    let (code, text) = command(&server.url());
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL synchronous_commit"), "{text}");
}

#[tokio::test]
async fn stores_the_check_does_not_cover_and_bad_urls_are_errors() {
    let e = lockguard::check::deployment("zookeeper://127.0.0.1:2181")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let e = lockguard::check::deployment("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let (code, text) = command("nope");
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("no scheme"), "{text}");
}
