//! What a semaphore leaves in Redis: a fence record only for a permit
//! handed to a waiter, gone with its release; a permit whose lease ended
//! counts no more, and is dropped once the semaphore is full.

use std::time::Duration;

use lockguard_testing::RedisServer;

use crate::support::{Env, eventually};
use crate::{Queue, until_queued};

/// The fence records in the semaphore's tickets hash.
async fn records(server: &RedisServer, q: Queue<'_>) -> Vec<(String, String)> {
    let mut conn = server.connection().await;
    redis::cmd("HGETALL")
        .arg(q.tickets_key())
        .query_async::<Vec<(String, String)>>(&mut conn)
        .await
        .expect("HGETALL of the tickets")
        .into_iter()
        .filter(|(_, v)| v.starts_with('='))
        .collect()
}

/// The holders and their scores (each lease's end, in ms).
async fn holders(server: &RedisServer, q: Queue<'_>) -> Vec<(String, f64)> {
    let mut conn = server.connection().await;
    redis::cmd("ZRANGE")
        .arg(q.holder_key())
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .expect("ZRANGE of the holders")
}

/// A permit taken directly has no fence record; one handed to a waiter
/// has one (its fence, for an attempt whose notification was lost), marked
/// in its score, kept through its renewals, and removed by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_handed_permit_has_a_fence_record_and_its_release_removes_it() {
    let env = Env::redis();
    let server = env.server.as_ref().unwrap();
    let q = Queue::Semaphore("records");
    let (first, second) = (env.client().await, env.client().await);

    let direct = first.semaphore("records", 1).acquire().await.unwrap();
    assert_eq!(records(server, q).await, vec![]);
    let scores = holders(server, q).await;
    assert_eq!(scores.len(), 1);
    assert_eq!(scores[0].1.fract(), 0.0, "{scores:?}");

    let waiter = tokio::spawn(async move {
        second
            .semaphore("records", 1)
            .watchdog(Duration::from_millis(600))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap()
    });
    until_queued(&env, q, 1).await;
    assert!(direct.release().await.unwrap());
    let handed = waiter.await.unwrap();

    let recorded = records(server, q).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(
        recorded[0].1,
        format!("={}", handed.watch().fencing_token().get())
    );
    let token = recorded[0].0.clone();
    let marked = |scores: &[(String, f64)]| {
        scores.len() == 1 && scores[0].0 == token && scores[0].1.fract() == 0.5
    };
    assert!(marked(&holders(server, q).await));
    // The confirmation and the renewals (every 200 ms) keep the mark, and
    // the record.
    let first_end = holders(server, q).await[0].1;
    let renewed = eventually(Duration::from_secs(5), || async {
        let scores = holders(server, q).await;
        marked(&scores) && scores[0].1 > first_end + 150.0
    })
    .await;
    assert!(renewed, "{:?}", holders(server, q).await);
    assert_eq!(records(server, q).await.len(), 1);

    assert!(handed.release().await.unwrap());
    assert_eq!(records(server, q).await, vec![]);
    assert_eq!(holders(server, q).await, vec![]);
}

/// A permit whose lease ended (its holder gone, its guard never released)
/// frees its place at once, and is dropped from the holders when the
/// semaphore next finds itself full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_lease_counts_no_more_and_goes_when_the_semaphore_is_full() {
    let env = Env::redis();
    let server = env.server.as_ref().unwrap();
    let q = Queue::Semaphore("ended");
    let (gone, lg) = (env.client().await, env.client().await);

    let lease = Duration::from_millis(300);
    let abandoned = gone
        .semaphore("ended", 1)
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(abandoned);
    drop(gone);
    let sem = lg.semaphore("ended", 1);
    let ended = eventually(Duration::from_secs(5), || async {
        sem.inspect().await.unwrap().holders == 0
    })
    .await;
    assert!(ended, "the ended lease still counts");
    let taken = sem.try_acquire().await.unwrap();
    // Taken beside the ended lease, which the uncontended path leaves in
    // the set.
    assert_eq!(holders(server, q).await.len(), 2);
    let other = env.client().await;
    assert!(other.semaphore("ended", 1).try_acquire().await.is_err());
    let left = holders(server, q).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(taken.release().await.unwrap());
}
