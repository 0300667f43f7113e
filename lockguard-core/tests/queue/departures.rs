//! Waiters that go away: a process killed while queued delays the queue by
//! at most the waiter timeout, and a waiter that gives up (its future
//! dropped, or its wait over) leaves the queue at once.

use std::time::Duration;

use lockguard_core::{Builder, Client};
use lockguard_redis::BuilderExt as _;
use tokio::time::Instant;

use crate::support::{ChildProcess, Env};
use crate::{Queue, SETTLE, until_queue_holds, until_queued};

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
        .connect(&url)
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

/// How a waiter gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    /// Its acquire future is dropped (the task running it is aborted).
    Dropped,
    /// Its wait bound runs out.
    WaitOver,
}

/// Waiter A queues behind a holder, waiter B behind A, then A gives up. A
/// leaves the queue at once, so the release goes straight to B and the
/// queue ends empty. Places are kept 30 s without a refresh: only leaving
/// explains A gone and B served within 2 s.
async fn giving_up_leaves_the_queue(env: Env, how: GiveUp) {
    let queue = Queue::Lock("gone");
    let settings = || Builder::default().waiter_timeout(Duration::from_secs(30));
    let holder = env.client().await;
    let guard = holder.lock("gone").acquire().await.unwrap();
    let first = env.client_with(settings()).await;
    let first_wait = match how {
        GiveUp::Dropped => Duration::from_secs(60),
        GiveUp::WaitOver => Duration::from_secs(3),
    };
    let a = tokio::spawn(async move {
        first
            .lock("gone")
            .wait(first_wait)
            .acquire()
            .await
            .map(drop)
    });
    until_queued(&env, queue, 1).await;
    let second = env.client_with(settings()).await;
    let b = tokio::spawn(async move {
        let g = second
            .lock("gone")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the waiter behind the one that gave up acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    until_queued(&env, queue, 2).await;
    match how {
        GiveUp::Dropped => {
            a.abort();
            assert!(a.await.unwrap_err().is_cancelled());
        }
        GiveUp::WaitOver => {
            let err = a.await.unwrap().expect_err("A's wait ends while held");
            assert!(err.is_busy(), "{err}");
        }
    }
    if env.real_time() {
        // The waiter that gave up leaves the queue.
        until_queue_holds(&env, queue, 1, Duration::from_secs(2)).await;
    } else {
        // Let its leaving, in the background, run.
        tokio::time::sleep(SETTLE).await;
    }
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let served = tokio::time::timeout(Duration::from_secs(60), b)
        .await
        .expect("the waiter behind was never served")
        .unwrap();
    let delay = served - released;
    assert!(
        delay < Duration::from_secs(2),
        "the waiter behind waited {delay:?} after the release"
    );
    until_queue_holds(&env, queue, 0, Duration::from_secs(2)).await;
    // Nobody left in the queue (the only check the memory store allows): a
    // try_acquire gets the free lock, not handed to a waiter that is gone.
    let outsider = env.client().await;
    let free = outsider.lock("gone").try_acquire().await;
    assert!(free.is_ok(), "the lock is kept for someone: {free:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_leaves_the_queue() {
    giving_up_leaves_the_queue(Env::redis(), GiveUp::Dropped).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_leaves_the_queue_on_postgres() {
    giving_up_leaves_the_queue(Env::postgres(), GiveUp::Dropped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_leaves_the_queue_on_mysql() {
    giving_up_leaves_the_queue(Env::mysql(), GiveUp::Dropped).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_wait_leaves_the_queue_on_postgres() {
    giving_up_leaves_the_queue(Env::postgres(), GiveUp::WaitOver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_wait_leaves_the_queue_on_mysql() {
    giving_up_leaves_the_queue(Env::mysql(), GiveUp::WaitOver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_leaves_the_queue_on_zookeeper() {
    giving_up_leaves_the_queue(Env::zookeeper(), GiveUp::Dropped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_wait_leaves_the_queue_on_zookeeper() {
    giving_up_leaves_the_queue(Env::zookeeper(), GiveUp::WaitOver).await;
}

#[tokio::test(start_paused = true)]
async fn dropped_acquire_leaves_the_queue_on_memory() {
    giving_up_leaves_the_queue(Env::memory(), GiveUp::Dropped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_wait_leaves_the_queue() {
    giving_up_leaves_the_queue(Env::redis(), GiveUp::WaitOver).await;
}

#[tokio::test(start_paused = true)]
async fn ended_wait_leaves_the_queue_on_memory() {
    giving_up_leaves_the_queue(Env::memory(), GiveUp::WaitOver).await;
}
