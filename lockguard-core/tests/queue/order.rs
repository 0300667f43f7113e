//! Who is served, and in what order: first come first served across
//! clients, a fair share for every task of every client, no barging past
//! the queue, and semaphore permits in arrival order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::{BuilderExt as _, ClientExt as _};
use tokio::sync::{Barrier, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::support::{Env, eventually};
use crate::{Queue, assert_busy, join_all, until_queued};

/// Acquires `name` (waiting up to 60 s), reports `index` on `served`, holds
/// the lock ~5 ms and releases it.
async fn take_turn(lg: Client, name: &'static str, index: u64, served: mpsc::UnboundedSender<u64>) {
    let g = lg
        .lock(name)
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("waiter {index}: {e}"));
    served.send(index).expect("the test listens");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(
        g.release().await.expect("release"),
        "waiter {index} lost the lock while holding it"
    );
}

/// Eight clients queue one after another, each only once the one before it
/// is queued, while the lock is held longer than their waiter timeout (so
/// their places are kept by refreshes); the release serves them in exactly
/// the order they arrived.
async fn fifo_order(env: Env) {
    let holder = env.client().await;
    let guard = holder.lock("fifo").acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiters = JoinSet::new();
    for i in 0..8 {
        let lg = env.client().await;
        waiters.spawn(take_turn(lg, "fifo", i, tx.clone()));
        until_queued(&env, Queue::Lock("fifo"), i + 1).await;
    }
    drop(tx);
    // Longer than the waiter timeout: 1 s on Redis, 30 s on the support
    // module's memory store (where time is paused).
    let timeout = if env.real_time() { 1 } else { 30 };
    tokio::time::sleep(Duration::from_secs(timeout) + Duration::from_millis(500)).await;
    assert!(guard.release().await.unwrap());
    join_all(&mut waiters, Duration::from_secs(30)).await;
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(
        order,
        (0..8).collect::<Vec<_>>(),
        "served out of arrival order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_8_clients() {
    fifo_order(Env::redis()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_8_clients_on_postgres() {
    fifo_order(Env::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_8_clients_on_mysql() {
    fifo_order(Env::mysql()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_8_clients_on_zookeeper() {
    fifo_order(Env::zookeeper()).await;
}

#[tokio::test(start_paused = true)]
async fn fifo_order_across_8_peers_on_memory() {
    fifo_order(Env::memory()).await;
}

/// A waiter is queued behind a holder. `try_acquire` of another client is
/// refused and does not join the queue; when the holder releases, the lock
/// goes to the waiter without a moment free in between, so a `try_acquire`
/// right after the release is refused too; once nobody waits, it succeeds.
async fn try_acquire_neither_queues_nor_barges(env: Env) {
    let queue = Queue::Lock("strict");
    let holder = env.client().await;
    let outsider = env.client().await;
    let guard = holder.lock("strict").acquire().await.unwrap();
    let waiter = env.client().await;
    let waiting = tokio::spawn(async move {
        waiter
            .lock("strict")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the queued waiter acquires")
    });
    until_queued(&env, queue, 1).await;
    assert_busy(outsider.lock("strict").try_acquire().await, "while held");
    if let Some(n) = queue.waiting(&env).await {
        assert_eq!(n, 1, "try_acquire joined the queue");
    }
    let old = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    assert_busy(
        outsider.lock("strict").try_acquire().await,
        "right after a release to a queued waiter",
    );
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was served")
        .unwrap();
    assert!(g.fencing_token() > old);
    assert!(g.release().await.unwrap());
    let free = outsider.lock("strict").try_acquire().await;
    assert!(
        free.is_ok(),
        "nobody waits, yet the lock is refused: {free:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_neither_queues_nor_barges_on_redis() {
    try_acquire_neither_queues_nor_barges(Env::redis()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_neither_queues_nor_barges_on_postgres() {
    try_acquire_neither_queues_nor_barges(Env::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_neither_queues_nor_barges_on_mysql() {
    try_acquire_neither_queues_nor_barges(Env::mysql()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_neither_queues_nor_barges_on_zookeeper() {
    try_acquire_neither_queues_nor_barges(Env::zookeeper()).await;
}

#[tokio::test(start_paused = true)]
async fn try_acquire_neither_queues_nor_barges_on_memory() {
    try_acquire_neither_queues_nor_barges(Env::memory()).await;
}

/// Two tasks in each of three clients take turns on one key for three
/// seconds, with no pause between turns: every task gets a fair share, and
/// no single wait is much longer than the holds of everyone ahead of it.
/// Tasks of one client get no preference over the others' tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_starvation_two_tasks_per_client() {
    const TASKS: usize = 6;
    let env = Env::redis();
    let hold = Duration::from_millis(2);
    let run = Duration::from_secs(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(TASKS));
    let mut tasks = JoinSet::new();
    for _ in 0..3 {
        let lg = env.client().await;
        for _ in 0..TASKS / 3 {
            let (lg, inside, start) = (lg.clone(), inside.clone(), start.clone());
            tasks.spawn(async move {
                start.wait().await;
                let started = Instant::now();
                let (mut count, mut longest) = (0u32, Duration::ZERO);
                while started.elapsed() < run {
                    let asked = Instant::now();
                    let g = lg
                        .lock("hot")
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                        .expect("acquire");
                    longest = longest.max(asked.elapsed());
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(hold).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.release().await.unwrap(), "lost the lock while holding it");
                    count += 1;
                }
                (count, longest)
            });
        }
    }
    let results = join_all(&mut tasks, Duration::from_secs(30)).await;
    println!("acquisitions and longest wait per task: {results:?}");
    let counts: Vec<u32> = results.iter().map(|r| r.0).collect();
    let mean = counts.iter().sum::<u32>() / counts.len() as u32;
    assert!(mean >= 20, "too few acquisitions to judge: {counts:?}");
    for (task, &(count, _)) in results.iter().enumerate() {
        assert!(
            count * 3 >= mean,
            "task {task} got {count} turns, the mean is {mean}: {counts:?}"
        );
    }
    // At most five others are ahead of a waiter, each holding ~2 ms (plus
    // a handoff): twenty holds and room for a loaded machine are far above
    // a fair wait, far below one passed over for a retry interval.
    let bound = hold * 20 + Duration::from_millis(200);
    for (task, &(_, longest)) in results.iter().enumerate() {
        assert!(
            longest <= bound,
            "task {task} waited {longest:?} for one turn (bound {bound:?}): {results:?}"
        );
    }
}

/// Holds both permits of a 2-permit semaphore, queues six waiters in a
/// known order, then gives back one permit at a time: each goes to the next
/// waiter in arrival order.
async fn semaphore_order(env: Env) {
    let owner = env.client().await;
    let sem = owner.semaphore("slots", 2);
    let mut held = vec![sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiters = JoinSet::new();
    for i in 0..6u64 {
        let lg = env.client().await;
        let tx = tx.clone();
        waiters.spawn(async move {
            let p = lg
                .semaphore("slots", 2)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            tx.send((i, p)).expect("the test listens");
        });
        until_queued(&env, Queue::Semaphore("slots", 2), i + 1).await;
    }
    drop(tx);
    for expected in 0..6 {
        let p = held.remove(0);
        assert!(p.release().await.unwrap(), "a held permit was lost");
        let (i, permit) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the permit was not handed on")
            .expect("a waiter failed");
        assert_eq!(i, expected, "permit handed out of arrival order");
        held.push(permit);
    }
    join_all(&mut waiters, Duration::from_secs(10)).await;
    for p in held {
        assert!(p.release().await.unwrap(), "a held permit was lost");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_in_fifo_order() {
    semaphore_order(Env::redis()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_in_fifo_order_on_postgres() {
    semaphore_order(Env::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_in_fifo_order_on_mysql() {
    semaphore_order(Env::mysql()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_in_fifo_order_on_zookeeper() {
    semaphore_order(Env::zookeeper()).await;
}

#[tokio::test(start_paused = true)]
async fn semaphore_permits_in_fifo_order_on_memory() {
    semaphore_order(Env::memory()).await;
}

/// With five waiters of five clients queued, a release is one script
/// that publishes once, and the handoff costs the release and the
/// first waiter's confirmation: two scripts, whatever the number of
/// waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_first_waiter_alone() {
    let server = lockguard_testing::RedisServer::start();
    let holder = Client::connect(&server.url()).await.unwrap();
    let mut admin = server.connection().await;
    let queue = Queue::Lock("herd");
    let stat = |info: &str, cmd: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|r| r.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let guard = holder.lock("herd").acquire().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..5 {
        // Refreshes every 10 s: none falls inside the measurement.
        let lg = Client::builder()
            .waiter_timeout(Duration::from_secs(30))
            .retry_interval(Duration::from_secs(10))
            .connect(&server.url())
            .await
            .unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            let g = lg
                .lock("herd")
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            let _ = tx.send((i, g.unwrap()));
        });
        let queued = eventually(Duration::from_secs(10), || async {
            queue.len(&server).await == i + 1
        })
        .await;
        assert!(queued, "waiter {i} never queued");
    }
    // Load the release and extend scripts, so no SCRIPT LOAD falls
    // inside.
    let warm = holder.lock("warm").acquire().await.unwrap();
    warm.extend(Duration::from_secs(5)).await.unwrap();
    assert!(warm.release().await.unwrap());
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();
    let before = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    let (first, g) = rx.recv().await.unwrap();
    assert_eq!(first, 0, "the first waiter in the queue gets the lock");
    assert!(g.fencing_token() > before);
    // The new holder confirms its lease in the background.
    let mut info = String::new();
    for _ in 0..200 {
        info = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await
            .unwrap();
        if stat(&info, "evalsha") >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(stat(&info, "publish"), 1, "one waiter notified\n{info}");
    assert_eq!(
        stat(&info, "evalsha"),
        2,
        "release and confirm only\n{info}"
    );
    // The rest follow in order.
    let mut g = g;
    for expected in 1..5 {
        assert!(g.release().await.unwrap());
        let (i, next) = rx.recv().await.unwrap();
        assert_eq!(i, expected);
        g = next;
    }
    assert!(g.release().await.unwrap());
}
