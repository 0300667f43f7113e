//! The operator's commands against real servers: `lockguard locks URL
//! [PATTERN]` lists who holds and who waits, and `lockguard release URL
//! KEY --force` frees a lock a stuck holder keeps, handing it to the next
//! waiter, after a confirmation unless `--yes`.
#![cfg(all(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use lockguard::prelude::*;
use lockguard::{Client, LockKind};
use lockguard_testing::conformance::eventually;
use lockguard_testing::{MariaDbServer, PostgresServer, RedisServer, ZooKeeperServer};

const PASSWORD: &str = "s3cret-tool-pw";

/// Runs the tool with `args` and `stdin`: its exit code, and what it
/// printed on stdout and stderr.
fn tool(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockguard"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the lockguard tool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "the output shows the password:\n{stdout}\n{stderr}"
    );
    (out.status.code().expect("an exit code"), stdout, stderr)
}

/// A holder and a waiter of two clients: the tool lists both, the holder
/// first; asked to release without `--force`, or answered no, it frees
/// nothing; with `--force --yes` it frees the lock, the waiter takes it
/// with a greater fence, and the old holder no longer holds it.
async fn the_operator_sees_and_frees(url: &str) {
    let holder = Client::connect(url).await.unwrap();
    let other = Client::connect(url).await.unwrap();
    // Renewed by the watchdog: it is its renewal that finds the lock gone.
    let stuck = holder.lock("tool:order:42").acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        other
            .lock("tool:order:42")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    let queued = eventually(Duration::from_secs(10), || async {
        let held = holder.locks("tool:*").await.unwrap();
        held.len() == 1 && held[0].waiters.len() == 1
    })
    .await;
    assert!(queued, "the waiter was never listed");

    let (code, out, err) = tool(&["locks", url, "tool:*"], "");
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "lock \"tool:order:42\"" || l.starts_with("lock \"tool:order:42\"  "))
        .unwrap_or_else(|| panic!("the lock is not listed:\n{out}"));
    assert!(lines[at + 1].starts_with("  holder  "), "{out}");
    assert!(lines[at + 2].starts_with("  waiter 1  "), "{out}");
    let (code, out, _) = tool(&["locks", url, "nothing-*"], "");
    assert_eq!(code, 0);
    assert!(out.starts_with("nothing held or awaited"), "{out}");

    let (code, _, err) = tool(&["release", url, "tool:order:42"], "");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    let (code, _, err) = tool(&["release", url, "tool:order:42", "--force"], "n\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not confirmed"), "{err}");
    assert!(stuck.is_held());
    assert_eq!(holder.locks("tool:*").await.unwrap()[0].holders.len(), 1);

    let (code, out, err) = tool(&["release", url, "tool:order:42", "--force", "--yes"], "");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("released: holder "), "{out}");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > stuck.fencing_token());
    assert!(
        !stuck.release().await.unwrap(),
        "the old holder still held it"
    );
    assert!(next.release().await.unwrap());
    let (code, out, _) = tool(&["release", url, "tool:order:42", "--force", "--yes"], "");
    assert_eq!(code, 0);
    assert!(out.contains("is free"), "{out}");
    let forced = holder
        .force_release(LockKind::Lock, "tool:order:42")
        .await
        .unwrap();
    assert!(forced.evicted.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_with_a_password() {
    let server = RedisServer::start_with_args(&["--requirepass", PASSWORD]);
    let url = server
        .url()
        .replacen("redis://", &format!("redis://:{PASSWORD}@"), 1);
    the_operator_sees_and_frees(&url).await;
    // A bad option, and a store that is down, are told in a sentence.
    let (code, _, err) = tool(&["locks", &url, "--bogus"], "");
    assert_eq!(code, 2);
    assert!(err.contains("unknown option --bogus"), "{err}");
    drop(server);
    let (code, _, err) = tool(&["locks", &url], "");
    assert_eq!(code, 2);
    assert!(err.starts_with("error: "), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let server = PostgresServer::start();
    the_operator_sees_and_frees(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mariadb() {
    let server = MariaDbServer::start();
    the_operator_sees_and_frees(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_zookeeper() {
    let server = ZooKeeperServer::start();
    the_operator_sees_and_frees(&format!("zookeeper://{}", server.hosts())).await;
}

/// A Redlock URL names its stores, and says it cannot list its locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock_it_is_unsupported() {
    let nodes = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let hosts: Vec<String> = nodes
        .iter()
        .map(|n| {
            n.url()
                .trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let url = format!("redis+redlock://{}", hosts.join(","));
    let (code, _, err) = tool(&["locks", &url], "");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("redlock") && err.contains("listing locks"),
        "{err}"
    );
}

/// After a crash of PostgreSQL, which empties the records of the leases
/// that ran, no lock is taken anew until the longest lease any lock took
/// has passed: the tool says so, and for how long (not before the crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_wait_after_a_crash_is_shown() {
    let mut server = PostgresServer::start();
    let url = server.url();
    the_wait_after_a_crash_is_shown(&mut server, &url).await;
}

/// The same on MariaDB, whose MEMORY tables a restart empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mariadb_the_wait_after_a_crash_is_shown() {
    let mut server = MariaDbServer::start();
    let url = server.url();
    the_wait_after_a_crash_is_shown(&mut server, &url).await;
}

/// A lock taken on a lease of 20 s (the longest the store has seen), then
/// `server` killed and restarted: the tool says nothing of a wait before,
/// and after it says that no lock is taken anew, for at most 20 s more.
async fn the_wait_after_a_crash_is_shown(
    server: &mut dyn lockguard_testing::ServerProcess,
    url: &str,
) {
    const WAIT: &str = "no lock is taken anew";
    let lg = Client::connect(url).await.unwrap();
    let lease = Duration::from_secs(20);
    let guard = lg.lock("tool:crash").lease(lease).acquire().await.unwrap();
    let (code, out, err) = tool(&["locks", url], "");
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(WAIT), "{out}");
    drop(guard);
    drop(lg);
    server.kill();
    server.restart();
    let (code, out, err) = tool(&["locks", url], "");
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.contains(WAIT))
        .unwrap_or_else(|| panic!("no word of the wait after the crash:\n{out}"));
    let left: f64 = line
        .split(" for ")
        .nth(1)
        .and_then(|rest| rest.split("s more").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time left in {line:?}"));
    assert!(
        left > 5.0 && left <= lease.as_secs_f64(),
        "{left} s left of a wait of the longest lease, {lease:?}: {line}"
    );
}
