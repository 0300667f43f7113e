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
    let good = lockguard_testing::redlock_url(&nodes);
    let report = lockguard::check::deployment(&good).await.unwrap();
    assert_eq!(verdict(&report, "independence"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "clocks"), Verdict::Ok, "{report}");
    // The first server again under another name: a quorum of "three" that
    // is two servers.
    let twice = format!(
        "redis+redlock://127.0.0.1:{},127.0.0.1:{},localhost:{}",
        nodes[0].port(),
        nodes[1].port(),
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
    let lg = Client::connect(&server.url()).await.unwrap();
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert_eq!(verdict(&report, "schema"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "crash wait"), Verdict::Ok, "{report}");
    assert_eq!(command(&server.url()).0, 0);
    // A lock on a lease of ten minutes: every crash now waits that long.
    let long = lg
        .lock("long")
        .lease(Duration::from_secs(600))
        .try_acquire()
        .await
        .unwrap();
    let report = lockguard::check::deployment(&server.url()).await.unwrap();
    assert_eq!(verdict(&report, "crash wait"), Verdict::Warn, "{report}");
    assert!(long.release().await.unwrap());

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
async fn unknown_schemes_and_bad_urls_are_errors() {
    let e = lockguard::check::deployment("consul://127.0.0.1:8500")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("unknown scheme"), "{e}");
    let e = lockguard::check::deployment("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let e = lockguard::check::deployment("redis+sentinel://127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("service is missing"), "{e}");
    let (code, text) = command("nope");
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("no scheme"), "{text}");
}

/// The finding about `subject`.
#[cfg(any(feature = "cluster", feature = "zookeeper"))]
fn finding<'a>(report: &'a Report, subject: &str) -> &'a lockguard::check::Finding {
    report
        .findings
        .iter()
        .find(|f| f.subject == subject)
        .unwrap_or_else(|| panic!("no finding about {subject}: {report}"))
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_checked_master_by_master() {
    let durable = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut cluster = lockguard_testing::RedisCluster::start_with_args(3, &durable);
    let hosts: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let url = cluster.url();
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(verdict(&report, "cluster state"), Verdict::Ok, "{report}");
    for h in &hosts {
        // Each master as a server, with the single-server check's findings.
        for subject in ["version", "maxmemory-policy", "persistence"] {
            assert_eq!(verdict(&report, &format!("{h} {subject}")), Verdict::Ok);
        }
        let f = finding(&report, &format!("{h} replication"));
        assert_eq!(f.verdict, Verdict::Warn, "{report}");
        assert!(f.detail.contains("no replica"), "{report}");
    }

    // Replicas for the second and third masters: their warning is now the
    // asynchronous replication's; the first master still has none.
    let _replicas: Vec<RedisServer> = (1..3).map(|i| cluster.add_replica(i, &durable)).collect();
    let seen = eventually(Duration::from_secs(10), || async {
        let report = lockguard::check::deployment(&url).await.unwrap();
        hosts[1..].iter().all(|h| {
            report
                .about(&format!("{h} replication"))
                .any(|f| f.detail.contains("1 replica(s)"))
        })
    })
    .await;
    assert!(seen, "the cluster never showed the new replicas");
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(report.passed(), "{report}");
    let f = finding(&report, &format!("{} replication", hosts[0]));
    assert!(f.detail.contains("no replica"), "{report}");
    let (code, text) = command(&url);
    assert_eq!(code, 0, "{text}");

    // The master without a replica dies: its slots are down, no failover.
    cluster.nodes[0].kill();
    let told = eventually(Duration::from_secs(15), || async {
        let report = lockguard::check::deployment(&url).await.unwrap();
        verdict(&report, "cluster state") == Verdict::Fail
    })
    .await;
    assert!(told, "the uncovered slots were not told");
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert_eq!(
        verdict(&report, &format!("{} state", hosts[0])),
        Verdict::Fail,
        "{report}"
    );
    let (code, text) = command(&url);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL cluster state"), "{text}");
}

/// `redis+sentinel://` of the sentinels `urls` (`redis://host:port`).
#[cfg(feature = "sentinel")]
fn sentinel_url(urls: &[String]) -> String {
    let hosts: Vec<&str> = urls
        .iter()
        .map(|u| u.trim_start_matches("redis://"))
        .collect();
    format!(
        "redis+sentinel://{}/{}",
        hosts.join(","),
        lockguard_testing::SENTINEL_SERVICE
    )
}

#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_group_is_checked_and_its_master_too() {
    let group = lockguard_testing::SentinelGroup::start_with_args(
        1,
        3,
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let url = sentinel_url(&group.sentinel_urls());
    // The sentinels find each other through the master, within seconds.
    let formed = eventually(Duration::from_secs(20), || async {
        let report = lockguard::check::deployment(&url).await.unwrap();
        verdict(&report, "quorum") == Verdict::Ok && verdict(&report, "sentinels") == Verdict::Ok
    })
    .await;
    assert!(formed, "the sentinels never reached their quorum");
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(verdict(&report, "master"), Verdict::Ok, "{report}");
    let master = group.master_port().expect("a master");
    assert!(
        report
            .about("master")
            .any(|f| f.detail.contains(&format!(":{master}"))),
        "{report}"
    );
    // The master's own findings: durable, and replicated asynchronously.
    assert_eq!(verdict(&report, "persistence"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "replication"), Verdict::Warn, "{report}");
    let (code, text) = command(&url);
    assert_eq!(code, 0, "{text}");
}

#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_of_two_groups_that_name_two_masters_fail() {
    // Two groups watching a service of the same name, listed in one URL:
    // clients would write to two masters.
    let one = lockguard_testing::SentinelGroup::start(0, 2);
    let other = lockguard_testing::SentinelGroup::start(0, 1);
    let mut urls = one.sentinel_urls();
    urls.extend(other.sentinel_urls());
    let url = sentinel_url(&urls);
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert_eq!(verdict(&report, "master"), Verdict::Fail, "{report}");
    // The lone sentinel can never gather its quorum of two.
    assert_eq!(verdict(&report, "quorum"), Verdict::Fail, "{report}");
    assert_eq!(verdict(&report, "sentinels"), Verdict::Warn, "{report}");
    let (code, text) = command(&url);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("FAIL master: the sentinels disagree"),
        "{text}"
    );
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_durability_role_and_tables_are_checked() {
    let server = lockguard_testing::MariaDbServer::start();
    let url = server.url();
    // The test servers flush commits to the OS only: told, not failed.
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(
        verdict(&report, "innodb_flush_log_at_trx_commit"),
        Verdict::Warn,
        "{report}"
    );
    assert_eq!(verdict(&report, "version"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "sync_binlog"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "replication"), Verdict::Ok, "{report}");
    // The tables are made by the first client.
    assert_eq!(verdict(&report, "schema"), Verdict::Warn, "{report}");

    // Commits written once a second: a crash of the server loses them.
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 0");
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert_eq!(
        verdict(&report, "innodb_flush_log_at_trx_commit"),
        Verdict::Fail,
        "{report}"
    );
    let (code, text) = command(&url.replacen("mysql://", "mariadb://", 1));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("FAIL innodb_flush_log_at_trx_commit"),
        "{text}"
    );

    // Set up well: every finding OK.
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    Client::connect(&url).await.unwrap();
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(
        report.findings.iter().all(|f| f.verdict == Verdict::Ok),
        "{report}"
    );
    assert_eq!(command(&url).0, 0);

    // A read-only server (a standby) refuses lockguard's writes.
    server.sql("SET GLOBAL read_only = 1");
    let report = lockguard::check::deployment(&url).await.unwrap();
    server.sql("SET GLOBAL read_only = 0");
    assert_eq!(verdict(&report, "replication"), Verdict::Fail, "{report}");
    // A table gone while the version says the tables are there.
    server.sql("DROP TABLE lockguard.lockguard_limit_log");
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert_eq!(verdict(&report, "schema"), Verdict::Fail, "{report}");
    assert!(
        report
            .about("schema")
            .any(|f| f.detail.contains("lockguard_limit_log")),
        "{report}"
    );
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_ensemble_of_three_passes() {
    let ensemble = lockguard_testing::ZooKeeperEnsemble::start(3);
    let url = format!("zookeeper://{}/locks", ensemble.hosts());
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(
        report.findings.iter().all(|f| f.verdict == Verdict::Ok),
        "{report}"
    );
    assert!(
        finding(&report, "ensemble")
            .detail
            .starts_with("3 voting members"),
        "{report}"
    );
    assert!(
        finding(&report, "session timeout")
            .detail
            .starts_with("10000 ms granted"),
        "{report}"
    );
    let (code, text) = command(&url.replacen("zookeeper://", "zk://", 1));
    assert_eq!(code, 0, "{text}");
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_zookeeper_that_clamps_the_session_is_told() {
    // One server, whose bound cuts lockguard's 10 s session to 4 s.
    let server = lockguard_testing::ZooKeeperServer::start_with("maxSessionTimeout=4000\n");
    let url = format!("zookeeper://{}", server.hosts());
    let report = lockguard::check::deployment(&url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(verdict(&report, "ensemble"), Verdict::Warn, "{report}");
    assert_eq!(verdict(&report, "version"), Verdict::Ok, "{report}");
    let f = finding(&report, "session timeout");
    assert_eq!(f.verdict, Verdict::Warn, "{report}");
    assert!(f.detail.contains("grants 4000 ms"), "{report}");
    assert!(f.detail.contains("maxSessionTimeout 4000 ms"), "{report}");
    let (code, text) = command(&url);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("WARN ensemble: a single server"), "{text}");
}
