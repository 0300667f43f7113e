//! Waiters that go away: a process killed while queued delays the queue by
//! at most the waiter timeout. (A waiter that gives up leaves the queue at
//! once: the conformance kit's `queue` group.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::ChildProcess;
use tokio::time::Instant;

use crate::support::Env;
use crate::{Queue, until_queued};

/// Set to the Redis URL, makes `child_waiter` queue for "victim".
const CHILD_ENV: &str = "LOCKGUARD_QUEUE_CHILD";

/// The child half of `killed_waiter_process_delays_the_queue_by_at_most_the_bound`,
/// run only in the child process that test starts (which sets
/// `LOCKGUARD_QUEUE_CHILD`): it queues for "victim" and is killed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of killed_waiter_process_delays_the_queue_by_at_most_the_bound"]
async fn child_waiter() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::builder()
        .waiter_timeout(Duration::from_millis(500))
        .connect_redis(&url)
        .await
        .expect("the child connects");
    let outcome = lg
        .lock("victim")
        .wait(Duration::from_secs(30))
        .acquire()
        .await;
    // The parent holds the lock until it has killed us.
    panic!("the child waiter was not killed while queued: {outcome:?}");
}

/// A waiter process killed with SIGKILL while first in the queue delays the
/// waiter behind it by at most the waiter timeout (plus slack), never the
/// holder's lease (60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_process_delays_the_queue_by_at_most_the_bound() {
    let env = Env::redis();
    let url = env.server.as_ref().expect("redis").url();
    let queue = Queue::Lock("victim");
    let timeout = Duration::from_millis(500);
    let settings = || Client::builder().waiter_timeout(timeout);
    let holder = env.client_with(settings()).await;
    let guard = holder
        .lock("victim")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    // The test's name without the crate's: `departures::child_waiter`.
    let module = module_path!().split_once("::").expect("a module").1;
    let mut child = ChildProcess::spawn(&format!("{module}::child_waiter"), (CHILD_ENV, &url));
    until_queued(&env, queue, 1).await;
    let second = env.client_with(settings()).await;
    let waiter = tokio::spawn(async move {
        let g = second
            .lock("victim")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the waiter behind the dead one acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    until_queued(&env, queue, 2).await;
    child.kill();
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let acquired = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter behind the dead one was never served")
        .unwrap();
    let delay = acquired - released;
    println!("the waiter behind the killed one acquired {delay:?} after the release");
    let bound = timeout + Duration::from_secs(1);
    assert!(
        delay < bound,
        "the dead waiter held up the queue for {delay:?} (bound {bound:?})"
    );
}
