//! Who is served on Redis: a fair share for every task of every client,
//! and a release that wakes the first waiter alone. First come first
//! served, no barging and permits in arrival order are the conformance
//! kit's `queue` group, which every store runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::{BuilderExt as _, ClientExt as _};
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::support::{Env, eventually};
use crate::{Queue, join_all};

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

/// With five waiters of five clients queued, a release is one script
/// that publishes the handoff to the first waiter, and the token of the
/// waiter that now comes near the head to that one (which sends nothing:
/// it only refreshes sooner from then on); the handoff costs the release
/// and the first waiter's confirmation: two scripts, whatever the number
/// of waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_first_waiter_alone() {
    let server = lockguard_testing::RedisServer::start();
    let holder = Client::connect_redis(&server.url()).await.unwrap();
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
            .connect_redis(&server.url())
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
    assert_eq!(
        stat(&info, "publish"),
        2,
        "the first waiter handed the lock, and the next one come near the head\n{info}"
    );
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
