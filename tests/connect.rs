//! One URL picks the store: `Client::connect(url)` against real servers of
//! every store, malformed URLs named part by part, and `from_env`, which
//! never falls back to memory by itself (run in child processes, each with
//! the environment it checks). Every store's feature is on (`--all-features`,
//! as the test script runs).
#![cfg(all(
    feature = "cluster",
    feature = "sentinel",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]

use std::process::{Command, Stdio};

use lockguard::prelude::*;
use lockguard::{Client, ErrorKind};
use lockguard_testing::{
    MariaDbServer, PostgresServer, RedisCluster, RedisServer, SENTINEL_SERVICE, SentinelGroup,
    ZooKeeperServer,
};

/// A lock taken and given back through `lg`, whose store is `store`; a
/// store on a server says where it is, with no password.
async fn works_on(lg: &Client, store: &str) {
    assert_eq!(lg.store_name(), store);
    match lg.store_address() {
        None => assert_eq!(store, "memory", "{store} says no address"),
        Some(address) => {
            assert_ne!(store, "memory");
            assert!(!address.is_empty());
            assert!(
                !address.contains("secret") && !address.contains("password"),
                "{address}"
            );
        }
    }
    let guard = lg.lock("connect:url").try_acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_every_redis_mode_are_reached_by_url() {
    works_on(&Client::connect("memory://").await.unwrap(), "memory").await;

    let server = RedisServer::start();
    let lg = Client::connect(&server.url()).await.unwrap();
    works_on(&lg, "redis").await;
    assert_eq!(
        lg.store_address(),
        Some(format!("127.0.0.1:{}", server.port()).as_str())
    );

    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = lockguard_testing::redlock_url(&nodes);
    works_on(&Client::connect(&url).await.unwrap(), "redlock").await;

    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    works_on(&Client::connect(&url).await.unwrap(), "redis-cluster").await;

    let group = SentinelGroup::start(0, 1);
    let sentinels: Vec<String> = group
        .sentinel_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_owned())
        .collect();
    let url = format!(
        "redis+sentinel://{}/{SENTINEL_SERVICE}",
        sentinels.join(",")
    );
    works_on(&Client::connect(&url).await.unwrap(), "redis").await;
}

/// The builder's settings go with the URL: two clients with different
/// prefixes on one server do not see each other's locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builder_keeps_its_settings_through_a_url() {
    let server = RedisServer::start();
    let a = Client::builder()
        .prefix("a:")
        .connect(&server.url())
        .await
        .unwrap();
    let b = Client::builder()
        .prefix("b:")
        .connect(&server.url())
        .await
        .unwrap();
    let held = a.lock("same").try_acquire().await.unwrap();
    let other = b.lock("same").try_acquire().await.unwrap();
    assert!(held.release().await.unwrap());
    assert!(other.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_is_reached_by_url() {
    let server = PostgresServer::start();
    works_on(&Client::connect(&server.url()).await.unwrap(), "postgres").await;
    let url = server.url().replacen("postgres://", "postgresql://", 1);
    works_on(&Client::connect(&url).await.unwrap(), "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_is_reached_by_url() {
    let server = MariaDbServer::start();
    works_on(&Client::connect(&server.url()).await.unwrap(), "mysql").await;
    let url = server.url().replacen("mysql://", "mariadb://", 1);
    works_on(&Client::connect(&url).await.unwrap(), "mysql").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_is_reached_by_url_with_its_root() {
    let server = ZooKeeperServer::start();
    let lg = Client::connect(&format!("zookeeper://{}/apps/billing", server.hosts()))
        .await
        .unwrap();
    works_on(&lg, "zookeeper").await;
    let held = lg.lock("rooted").try_acquire().await.unwrap();
    // Under the root the URL named: a client on the default root does not
    // see the lock.
    let other = Client::connect(&format!("zk://{}", server.hosts()))
        .await
        .unwrap();
    let free = other.lock("rooted").try_acquire().await.unwrap();
    assert!(free.release().await.unwrap());
    assert!(held.release().await.unwrap());
}

/// Every malformed URL is `InvalidInput` naming what is wrong, and no
/// message repeats a password.
#[tokio::test]
async fn malformed_urls_are_named_part_by_part() {
    for (url, says) in [
        ("", "no scheme"),
        ("127.0.0.1:6379", "no scheme"),
        ("ftp://host", "unknown scheme \"ftp\""),
        ("memory://x", "memory:// takes nothing"),
        ("redis+cluster://u:hunter2@a:1,,b:2", "a host is missing"),
        ("redis+redlock://a:1,b", "host \"b\" is not host:port"),
        (
            "redis+redlock://a:1,b:2,c:3/0",
            "nothing may follow the hosts",
        ),
        ("redis+sentinel://a:26379", "the service is missing"),
        (
            "redis+sentinel://u:hunter2@a:26379/svc",
            "credentials in a Sentinel URL",
        ),
        ("zookeeper://a:2181?x=1", "parameters"),
        ("zk://a:99999", "host \"a:99999\" is not host:port"),
    ] {
        let e = Client::connect(url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}: {e}");
        let text = e.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{url}: {text}");
    }
}

/// Set in a child process: which `from_env` call it makes.
const CHILD: &str = "LOCKGUARD_TEST_FROM_ENV";

/// The child of the `from_env` tests: makes the call `CHILD` names and
/// prints what it got.
#[tokio::test]
#[ignore = "a child process of the from_env tests"]
async fn from_env_child() {
    let Ok(call) = std::env::var(CHILD) else {
        return;
    };
    let result = match call.as_str() {
        "strict" => Client::from_env().await,
        _ => Client::from_env_or_memory().await,
    };
    match result {
        Ok(lg) => println!("\nstore={}", lg.store_name()),
        Err(e) => println!("\nerror={:?}: {e}", e.kind()),
    }
}

/// Runs `from_env_child` with `call` and the environment `vars` (and no
/// other store variable); its answer.
fn from_env_in_child(call: &str, vars: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "from_env_child", "--ignored", "--nocapture"])
        .env(CHILD, call)
        .env_remove("LOCKGUARD_URL")
        .env_remove("REDIS_URL")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("store=") || l.starts_with("error="))
        .unwrap_or_else(|| panic!("the child said nothing: {out:?}"))
        .to_owned()
}

#[test]
fn from_env_never_falls_back_to_memory_by_itself() {
    let unset = from_env_in_child("strict", &[]);
    assert!(unset.starts_with("error=Misconfigured"), "{unset}");
    assert!(unset.contains("LOCKGUARD_URL is not set"), "{unset}");
    // DATABASE_URL is the application's own, never lockguard's.
    let theirs = from_env_in_child("strict", &[("DATABASE_URL", "postgres://x@y/z")]);
    assert!(theirs.starts_with("error=Misconfigured"), "{theirs}");
    // Asked for by name, memory is what it gets.
    let asked = from_env_in_child("strict", &[("LOCKGUARD_URL", "memory://")]);
    assert_eq!(asked, "store=memory");
    let or_memory = from_env_in_child("or_memory", &[]);
    assert_eq!(or_memory, "store=memory");
}

#[test]
fn from_env_reads_lockguard_url_then_redis_url() {
    let server = RedisServer::start();
    let url = server.url();
    assert_eq!(
        from_env_in_child("strict", &[("REDIS_URL", &url)]),
        "store=redis"
    );
    // LOCKGUARD_URL comes first.
    assert_eq!(
        from_env_in_child(
            "strict",
            &[("LOCKGUARD_URL", "memory://"), ("REDIS_URL", &url)]
        ),
        "store=memory"
    );
    // A bad URL says which variable held it.
    let bad = from_env_in_child("or_memory", &[("LOCKGUARD_URL", "redis+redlock://a")]);
    assert!(
        bad.starts_with("error=InvalidInput") && bad.contains("LOCKGUARD_URL: "),
        "{bad}"
    );
}

/// A service that starts before its store: `connect_within` keeps trying
/// while the server is down, connects once it is up, and says so once at
/// `WARN` (naming the store) and once at `INFO`; a store still down when
/// the wait ends is `Unavailable` saying how long it waited; a malformed
/// URL is refused at once, without waiting.
// One thread: the log capture sees the events of the thread it is
// installed on.
#[tokio::test(flavor = "current_thread")]
async fn a_service_may_start_before_its_store() {
    use std::time::{Duration, Instant};

    let captured = lockguard_testing::CapturedLog::default();
    let _log = captured.install();
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { Client::connect_within(&url, Duration::from_secs(30)).await }
    });
    // The service is up and waiting; the store comes a second later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "gave up while the store was down");
    server.restart();
    let lg = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("connected once the store came up")
        .unwrap()
        .expect("a client");
    works_on(&lg, "redis").await;
    let address = format!("127.0.0.1:{}", server.port());
    assert_eq!(
        captured.lines_with("WARN", "cannot be reached yet"),
        1,
        "{}",
        captured.text()
    );
    assert_eq!(
        captured.lines_with("WARN", &address),
        1,
        "{}",
        captured.text()
    );
    assert_eq!(captured.lines_with("INFO", "connected to the store"), 1);

    // Down for longer than the wait: the last failure, saying how long.
    server.kill();
    let started = Instant::now();
    let e = Client::connect_within(&url, Duration::from_millis(800))
        .await
        .expect_err("the store stayed down");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("after waiting"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Not something waiting cures: at once.
    let started = Instant::now();
    let e = Client::connect_within("redis://127.0.0.1:notaport", Duration::from_secs(30))
        .await
        .expect_err("a malformed URL");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}
