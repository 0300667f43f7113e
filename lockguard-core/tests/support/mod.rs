//! Shared test support: a real Redis to run against, waits, and child
//! processes. (The conformance suite is lockguard-testing's kit.)
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::RedisServer;
pub use lockguard_testing::conformance::eventually;

/// A real `redis-server` started for a test and killed when it ends, and
/// clients of it as separate processes would have.
pub struct Env {
    pub server: Option<RedisServer>,
}

impl Env {
    pub fn redis() -> Self {
        Self {
            server: Some(RedisServer::start()),
        }
    }

    fn url(&self) -> String {
        self.server.as_ref().expect("a redis server").url()
    }

    /// A client with the given settings, with connections of its own.
    pub async fn client_with(&self, b: lockguard_core::Builder) -> Client {
        b.connect(&self.url()).await.expect("connect")
    }

    pub async fn client(&self) -> Client {
        self.client_with(Client::builder()).await
    }
}

/// Whether `lg` takes the lock `name`, and gives it back, within `within`
/// (trying every 5 ms); every refusal until then must be one `expected`
/// accepts.
pub async fn takes_lock_within(
    lg: &Client,
    name: &str,
    within: Duration,
    expected: impl Fn(&lockguard_core::Error) -> bool,
) -> bool {
    let expected = &expected;
    eventually(within, || async move {
        match lg.lock(name).try_acquire().await {
            Ok(g) => g.release().await.unwrap(),
            Err(e) => {
                assert!(expected(&e), "{e}");
                false
            }
        }
    })
    .await
}

/// Checks that a waiter of `waiter` (a client whose waiter timeout and retry
/// interval are long, 30 s and 20 s) is woken by the handoff when `holder`
/// releases the lock `name`: it must get the lock well before its first
/// refresh (10 s in) could claim it, so the notification reached it over
/// the waiter client's pub/sub connection.
pub async fn a_waiter_is_woken_by_the_handoff(holder: &Client, waiter: Client, name: &str) {
    let held = holder
        .lock(name)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let g = waiter
            .lock(&owned)
            .wait(Duration::from_secs(25))
            .acquire()
            .await
            .unwrap();
        let waited = started.elapsed();
        g.release().await.unwrap();
        waited
    });
    let queued = eventually(Duration::from_secs(10), || async {
        holder.lock(name).inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter never queued");
    assert!(held.release().await.unwrap());
    let waited = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "woken by its refresh, not the handoff: {waited:?}"
    );
}

/// This test binary run again as one of its ignored tests, `test` (its
/// path without the crate's name), with `env` set so that it acts as a
/// client process; its standard output is read line by line. Killed and
/// reaped on drop, whatever way the test ends.
pub struct ChildProcess {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl ChildProcess {
    pub fn spawn(test: &str, env: (&str, &str)) -> Self {
        use std::io::BufRead;
        let mut child =
            std::process::Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", test, "--ignored", "--nocapture", "--quiet"])
                .env(env.0, env.1)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn the child process");
        let lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        Self { child, lines }
    }

    /// The child's next line that starts with `word`.
    pub fn expect(&mut self, word: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.expect("the child's output");
            if line.starts_with(word) {
                return line;
            }
        }
        panic!("the child ended without saying {word:?}");
    }

    /// SIGKILLs the child and checks it was still running.
    pub fn kill(&mut self) {
        use std::os::unix::process::ExitStatusExt;
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(
            status.signal(),
            Some(9),
            "the child ended before it was killed: {status}"
        );
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
