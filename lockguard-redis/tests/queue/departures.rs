//! Waiters that go away: a process killed while queued, near the head or
//! far back in a long queue, delays the queue by at most the waiter
//! timeout. (A waiter that gives up leaves the queue at
//! once: the conformance kit's `queue` group.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::{ChildProcess, RedisServer};
use tokio::time::Instant;

use crate::support::Env;
use crate::{Queue, join_all, queue_ahead, until_queued};

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
    killed_waiter_delays_the_queue(0).await;
}

/// A waiter process killed with SIGKILL while far back in a long queue,
/// where Redis keeps a place for several waiter timeouts without a
/// refresh, delays the waiter behind it by at most the waiter timeout
/// (plus slack) once the queue reaches it: never for as long as its place
/// was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_process_far_back_delays_the_queue_by_at_most_the_bound() {
    killed_waiter_delays_the_queue(8).await;
}

/// The killed waiter's test, with `ahead` live waiters queued before it,
/// each releasing as soon as it acquires.
async fn killed_waiter_delays_the_queue(ahead: u64) {
    let env = Env::redis();
    let server = env.server.as_ref().expect("redis");
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
    let mut before = queue_ahead(&env, queue, ahead, settings).await;
    // The test's name without the crate's: `departures::child_waiter`.
    let module = module_path!().split_once("::").expect("a module").1;
    let mut child = ChildProcess::spawn(
        &format!("{module}::child_waiter"),
        (CHILD_ENV, &server.url()),
    );
    until_queued(&env, queue, ahead + 1).await;
    let kept = place_kept(server, queue, ahead).await;
    if ahead > 0 {
        assert!(
            kept > timeout * 2,
            "the far waiter's place is kept for {kept:?} only: the test needs one kept well past the waiter timeout ({timeout:?})"
        );
    }
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
    until_queued(&env, queue, ahead + 2).await;
    child.kill();
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    join_all(&mut before, Duration::from_secs(30)).await;
    let acquired = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter behind the dead one was never served")
        .unwrap();
    let delay = acquired - released;
    println!(
        "the waiter behind the killed one (its place kept {kept:?}) acquired {delay:?} after the release"
    );
    let bound = timeout + Duration::from_secs(1);
    assert!(
        delay < bound,
        "the dead waiter held up the queue for {delay:?} (bound {bound:?})"
    );
}

/// How much longer the store keeps the place of the waiter at `index` in
/// the queue (its ticket's deadline against the server's clock).
async fn place_kept(server: &RedisServer, queue: Queue<'_>, index: u64) -> Duration {
    let mut conn = server.connection().await;
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(queue.key())
        .arg(index)
        .arg(index)
        .query_async(&mut conn)
        .await
        .expect("ZRANGE of the queue");
    let [token] = members.as_slice() else {
        panic!("no waiter at {index} in the queue: {members:?}");
    };
    let ticket: String = redis::cmd("HGET")
        .arg(queue.tickets_key())
        .arg(token)
        .query_async(&mut conn)
        .await
        .expect("HGET of the waiter's ticket");
    let deadline: u64 = ticket
        .split(' ')
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("unreadable ticket {ticket:?}"));
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    Duration::from_millis(deadline.saturating_sub(secs * 1000 + micros / 1000))
}
