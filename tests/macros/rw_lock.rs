//! `#[distributed_lock(mode = "read" | "write")]`.

use std::sync::Arc;

use lockguard::{Client, distributed_lock};
use tokio::sync::oneshot;

use crate::support::{Env, Tracker, eventually, on_both_stores, within};

on_both_stores!(
    readers_run_together_and_a_writer_waits_for_them,
    a_writer_excludes_readers,
);

#[distributed_lock(key = "doc:{id}", mode = "read", client = lg)]
async fn read_until(
    lg: &Client,
    id: u32,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
) -> Result<usize, lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    let _ = leave.await;
    inside.finish();
    Ok(1)
}

#[distributed_lock(key = "doc:{id}", mode = "write", client = lg)]
async fn write_until(
    lg: &Client,
    id: u32,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
) -> Result<usize, lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    let _ = leave.await;
    inside.finish();
    Ok(1)
}

/// A writer that waits: returns how many bodies ran beside its own.
#[distributed_lock(key = "doc:{id}", mode = "write", wait = "30s", client = lg)]
async fn write_waiting(lg: &Client, id: u32, tracker: &Tracker) -> Result<usize, lockguard::Error> {
    let inside = tracker.enter();
    let others = tracker.active() - 1;
    tokio::task::yield_now().await;
    inside.finish();
    Ok(others)
}

#[distributed_lock(key = "doc:{id}", mode = "read", skip_if_busy, client = lg)]
async fn read_if_free(
    lg: &Client,
    id: u32,
    tracker: &Tracker,
) -> Result<Option<usize>, lockguard::Error> {
    let inside = tracker.enter();
    let others = tracker.active() - 1;
    inside.finish();
    Ok(Some(others))
}

/// Two readers on two clients hold the lock at once; a writer without
/// `wait` is refused while they do; a writer with `wait` queues, keeps a
/// new reader out, and runs alone once both readers are done.
async fn readers_run_together_and_a_writer_waits_for_them(env: Env) {
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let tracker = Arc::new(Tracker::default());
    let mut leaves = Vec::new();
    let mut readers = Vec::new();
    for lg in [a.clone(), b.clone()] {
        let (entered_tx, entered_rx) = oneshot::channel();
        let (leave_tx, leave_rx) = oneshot::channel();
        let tracker = tracker.clone();
        readers.push(tokio::spawn(async move {
            read_until(&lg, 1, &tracker, entered_tx, leave_rx).await
        }));
        within("a reader's body to start", entered_rx)
            .await
            .unwrap();
        leaves.push(leave_tx);
    }
    assert_eq!(tracker.active(), 2, "the two readers did not run together");

    let (tx, _rx) = oneshot::channel();
    let (_leave, never) = oneshot::channel();
    let refused = within("the refusal", write_until(&c, 1, &tracker, tx, never))
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    assert_eq!(tracker.runs(), 2, "the refused writer's body ran");

    let writer = tokio::spawn({
        let (c, tracker) = (c.clone(), tracker.clone());
        async move { write_waiting(&c, 1, &tracker).await }
    });
    let rw = c.rw_lock("doc:1");
    eventually("the writer to queue", || async {
        rw.inspect().await.unwrap().waiters == 1
    })
    .await;
    // A reader arriving behind a queued writer waits for it.
    assert_eq!(read_if_free(&a, 1, &tracker).await.unwrap(), None);
    assert_eq!(tracker.runs(), 2, "a writer ran beside the readers");

    for leave in leaves {
        leave.send(()).unwrap();
    }
    for reader in readers {
        assert_eq!(within("a reader", reader).await.unwrap().unwrap(), 1);
    }
    let others = within("the writer", writer).await.unwrap().unwrap();
    assert_eq!(others, 0, "the writer ran beside a reader");
    assert_eq!((tracker.max(), tracker.finished()), (2, 3));
}

/// While a writer's body runs, readers are refused (or skipped) and their
/// bodies never run; once it is done they go through.
async fn a_writer_excludes_readers(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let tracker = Arc::new(Tracker::default());
    let (entered_tx, entered_rx) = oneshot::channel();
    let (leave_tx, leave_rx) = oneshot::channel();
    let writer = tokio::spawn({
        let tracker = tracker.clone();
        async move { write_until(&a, 2, &tracker, entered_tx, leave_rx).await }
    });
    within("the writer's body to start", entered_rx)
        .await
        .unwrap();

    let (tx, _rx) = oneshot::channel();
    let (_leave, never) = oneshot::channel();
    let refused = within("the refusal", read_until(&b, 2, &tracker, tx, never))
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    assert_eq!(read_if_free(&b, 2, &tracker).await.unwrap(), None);
    assert_eq!(tracker.runs(), 1, "a reader ran beside the writer");
    // Another key is free.
    assert_eq!(read_if_free(&b, 3, &tracker).await.unwrap(), Some(1));

    leave_tx.send(()).unwrap();
    assert_eq!(within("the writer", writer).await.unwrap().unwrap(), 1);
    assert_eq!(read_if_free(&b, 2, &tracker).await.unwrap(), Some(0));
    assert_eq!(tracker.max(), 2, "only the other key overlapped the writer");
}
