//! Read-write locks: readers share, a writer excludes everyone; one FIFO
//! queue for both, so a waiting writer blocks later readers; a release
//! admits the whole run of readers at the head at once; fencing tokens
//! that order every write after the reads and writes before it; leases
//! that free a dead holder and fence it; dropped acquisitions; bad input;
//! `inspect()`. And, for a store without them, the refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, ErrorKind, MAX_LEASE, RwMode};
use tokio::sync::{mpsc, oneshot};

use super::waits::{BOUND, LEASE, RETRY, TASKS, WAIT, Waits, held, patient_clients};
use super::{Env, WATCHED, eventually};

/// Waits (at most 10 s) until `name`'s queue holds `n` waiters, as a third
/// client's `inspect()` sees it.
async fn until_waiting(lg: &Client, name: &str, n: u64) {
    let reached = eventually(Duration::from_secs(10), || async {
        lg.rw_lock(name).inspect().await.expect("inspect").waiters == n
    })
    .await;
    assert!(
        reached,
        "{n} waiters never queued for {name:?} (now {:?})",
        lg.rw_lock(name).inspect().await
    );
}

/// Whether a `mode` `try_acquire` by `lg` (on a task of its own) is busy;
/// a hold it gets is released before it returns. Panics on any other
/// error.
async fn is_busy(lg: &Client, name: &str, mode: RwMode) -> bool {
    let (lg, name) = (lg.clone(), name.to_owned());
    tokio::spawn(async move {
        let rw = lg.rw_lock(&name);
        let got = match mode {
            RwMode::Read => match rw.read().try_acquire().await {
                Ok(g) => g.release().await.map(drop),
                Err(e) => Err(e),
            },
            RwMode::Write => match rw.write().try_acquire().await {
                Ok(g) => g.release().await.map(drop),
                Err(e) => Err(e),
            },
        };
        match got {
            Ok(()) => false,
            Err(e) if e.is_busy() => true,
            Err(e) => panic!("{e}"),
        }
    })
    .await
    .unwrap()
}

/// Three clients read at once; a writer is refused while any reads, and
/// once it writes, readers and writers are refused alike.
pub async fn readers_share_and_a_writer_excludes_everyone(env: Env) {
    let clients = [env.client().await, env.client().await, env.client().await];
    let lease = Duration::from_secs(10);
    let mut reads = Vec::new();
    for lg in &clients {
        reads.push(
            lg.rw_lock("doc")
                .read()
                .lease(lease)
                .try_acquire()
                .await
                .unwrap(),
        );
    }
    let probe = env.client().await;
    assert!(
        is_busy(&probe, "doc", RwMode::Write).await,
        "a writer beside readers"
    );
    // A fourth reader joins them: nobody waits.
    assert!(
        !is_busy(&probe, "doc", RwMode::Read).await,
        "readers refused a reader"
    );
    for (i, r) in reads.into_iter().enumerate() {
        assert_eq!(r.mode(), RwMode::Read);
        assert!(r.is_held());
        assert!(r.release().await.unwrap(), "reader {i} lost its hold");
    }
    let write = clients[0]
        .rw_lock("doc")
        .write()
        .lease(lease)
        .try_acquire()
        .await
        .expect("free once the readers left");
    assert_eq!(write.mode(), RwMode::Write);
    assert!(
        is_busy(&probe, "doc", RwMode::Read).await,
        "a reader beside the writer"
    );
    assert!(is_busy(&probe, "doc", RwMode::Write).await, "two writers");
    assert!(write.release().await.unwrap());
    assert!(
        !is_busy(&probe, "doc", RwMode::Write).await,
        "kept after release"
    );
}

/// 24 tasks over 4 client handles, one in four a writer, take the lock
/// again and again: a writer never overlaps anyone, readers never overlap
/// a writer, readers do overlap each other, and no write is lost.
pub async fn many_readers_or_one_writer_under_contention(env: Env) {
    const HANDLES: usize = 4;
    const TASKS: usize = 24;
    let rounds = (env.contention_rounds() / 4).max(10);
    let mut clients = Vec::new();
    for _ in 0..HANDLES {
        clients.push(env.client().await);
    }
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let rw = clients[t % HANDLES].rw_lock("contended");
        let (readers, writers, most) = (readers.clone(), writers.clone(), most_readers.clone());
        let mut value = env.shared_value();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                if t % 4 == 0 {
                    let g = rw
                        .write()
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("write");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                    value.racy_increment().await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.release().await.expect("release"), "write lease lost");
                } else {
                    let g = rw
                        .read()
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("read");
                    let inside = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(inside, Ordering::SeqCst);
                    assert_eq!(
                        writers.load(Ordering::SeqCst),
                        0,
                        "a reader beside a writer"
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.release().await.expect("release"), "read lease lost");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = (TASKS / 4 * rounds) as u64;
    assert_eq!(env.shared_value().get().await, writes, "lost writes");
    let most = most_readers.load(Ordering::SeqCst);
    assert!(
        most > 1,
        "readers never shared the lock (at most {most} at once)"
    );
}

/// 16 tasks over 4 clients, a writer in every four, take one read-write
/// lock up to 48 times each, with a 30 s retry interval and a 90 s waiter
/// timeout (a waiter's own refresh comes 15 s and more after it last
/// tried): every hold passed on must come from a wake-up, readers admitted
/// together as writers alone. No acquisition may wait 8 s: each waits for
/// the few tasks ahead of it in the queue. (See the lock's
/// `no_wake_up_is_lost_under_contention`.)
pub async fn no_rw_wake_up_is_lost_under_contention(env: Env) {
    let rounds = env.contention_rounds().min(48);
    let clients = patient_clients(&env).await;
    let waits = Arc::new(Waits::default());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let rw = clients[t % clients.len()].rw_lock("handoffs");
        let waits = waits.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let asked = Instant::now();
                let released = if t % 4 == 0 {
                    let write = rw.write().lease(LEASE).retry_interval(RETRY).wait(WAIT);
                    let g = write.acquire().await;
                    let g = g.unwrap_or_else(|e| panic!("task {t}, round {round}: write: {e}"));
                    waits.record(asked.elapsed());
                    tokio::task::yield_now().await;
                    g.release().await
                } else {
                    let read = rw.read().lease(LEASE).retry_interval(RETRY).wait(WAIT);
                    let g = read.acquire().await;
                    let g = g.unwrap_or_else(|e| panic!("task {t}, round {round}: read: {e}"));
                    waits.record(asked.elapsed());
                    tokio::task::yield_now().await;
                    g.release().await
                };
                held(released, t, round);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    waits.assert_below(BOUND, "from asking");
}

/// While readers hold the lock and a writer waits, a later reader is
/// refused by `try_acquire` and queues behind the writer with `acquire`:
/// readers cannot starve a writer. The writer goes first, then the reader.
pub async fn a_waiting_writer_blocks_later_readers(env: Env) {
    let holder = env.client().await;
    let writer = env.client().await;
    let reader = env.client().await;
    let probe = env.client().await;
    let lease = Duration::from_secs(30);
    let first = holder
        .rw_lock("feed")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let (order_tx, mut order) = mpsc::unbounded_channel();
    let w = tokio::spawn({
        let order = order_tx.clone();
        async move {
            let g = writer
                .rw_lock("feed")
                .write()
                .lease(lease)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("the writer acquires");
            order.send(("writer", g.fencing_token())).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(g.release().await.unwrap());
        }
    });
    until_waiting(&probe, "feed", 1).await;
    assert!(
        is_busy(&probe, "feed", RwMode::Read).await,
        "a reader barged past the waiting writer"
    );
    let r = tokio::spawn(async move {
        let g = reader
            .rw_lock("feed")
            .read()
            .lease(lease)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the later reader acquires");
        order_tx.send(("reader", g.fencing_token())).unwrap();
        assert!(g.release().await.unwrap());
    });
    until_waiting(&probe, "feed", 2).await;
    // Held for a while: neither waiter gets in beside the first reader.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        order.try_recv().is_err(),
        "a waiter got in beside the reader"
    );
    let first_fence = first.fencing_token();
    assert!(first.release().await.unwrap());
    let (who, w_fence) = order.recv().await.unwrap();
    assert_eq!(
        who, "writer",
        "the reader went before the writer ahead of it"
    );
    let (who, r_fence) = order.recv().await.unwrap();
    assert_eq!(who, "reader");
    assert!(first_fence < w_fence && w_fence < r_fence);
    w.await.unwrap();
    r.await.unwrap();
}

/// A writer holds the lock; three readers queue, then a writer, then a
/// reader. The release admits the three readers together, each woken by
/// the release within a second (they refresh their places seconds apart:
/// a 5 s retry interval, a 30 s waiter timeout), while the writer and the
/// reader behind it wait; when the three are gone the writer goes, then the
/// last reader.
pub async fn a_release_admits_the_run_of_readers_at_the_head_together(env: Env) {
    let probe = env.client().await;
    let lease = Duration::from_secs(30);
    let holder = env.client().await;
    let w0 = holder
        .rw_lock("run")
        .write()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let (in_tx, mut inside) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut leave = Vec::new();
    let mut tasks = Vec::new();
    for (i, mode) in [
        RwMode::Read,
        RwMode::Read,
        RwMode::Read,
        RwMode::Write,
        RwMode::Read,
    ]
    .into_iter()
    .enumerate()
    {
        // Only the release can wake them within a second: they refresh
        // their place seconds apart.
        let settings = Client::builder()
            .retry_interval(Duration::from_secs(5))
            .waiter_timeout(Duration::from_secs(30));
        let lg = env.client_with(settings).await;
        let (go_tx, go) = oneshot::channel::<()>();
        leave.push(go_tx);
        let in_tx = in_tx.clone();
        tasks.push(tokio::spawn(async move {
            let rw = lg.rw_lock("run");
            let wait = Duration::from_secs(60);
            let interval = Duration::from_secs(5);
            let release = match mode {
                RwMode::Read => {
                    let g = rw.read().lease(lease).wait(wait).retry_interval(interval);
                    let g = g.acquire().await.expect("a reader acquires");
                    in_tx.send((i, Instant::now())).unwrap();
                    go.await.unwrap();
                    g.release().await
                }
                RwMode::Write => {
                    let g = rw.write().lease(lease).wait(wait).retry_interval(interval);
                    let g = g.acquire().await.expect("the writer acquires");
                    in_tx.send((i, Instant::now())).unwrap();
                    go.await.unwrap();
                    g.release().await
                }
            };
            assert!(release.unwrap(), "waiter {i} lost its hold");
        }));
        until_waiting(&probe, "run", i as u64 + 1).await;
    }
    let released = Instant::now();
    assert!(w0.release().await.unwrap());
    let mut first_run = Vec::new();
    for _ in 0..3 {
        let (i, at) = inside.recv().await.unwrap();
        assert!(
            at - released < Duration::from_secs(1),
            "reader {i} got in {:?} after the release: not handed over with the others",
            at - released
        );
        first_run.push(i);
    }
    first_run.sort_unstable();
    assert_eq!(first_run, [0, 1, 2], "the run of readers at the head");
    let now = probe.rw_lock("run").inspect().await.unwrap();
    assert_eq!((now.readers, now.writer), (3, false), "{now:?}");
    assert_eq!(now.waiters, 2, "{now:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        inside.try_recv().is_err(),
        "a waiter behind the writer got in"
    );
    let mut leave = leave.into_iter();
    for go in leave.by_ref().take(3) {
        go.send(()).unwrap();
    }
    assert_eq!(inside.recv().await.unwrap().0, 3, "the writer is next");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        inside.try_recv().is_err(),
        "the last reader got in beside the writer"
    );
    leave.next().unwrap().send(()).unwrap();
    assert_eq!(inside.recv().await.unwrap().0, 4, "then the last reader");
    leave.next().unwrap().send(()).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Fencing tokens from one sequence: a write's is greater than those of
/// every read and write before it, a read's greater than every earlier
/// write's; each read has its own.
pub async fn fences_order_writes_after_earlier_reads_and_writes(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let w1 = a.rw_lock("seq").write().acquire().await.unwrap();
    let f_w1 = w1.fencing_token();
    assert!(w1.release().await.unwrap());
    let r1 = a.rw_lock("seq").read().acquire().await.unwrap();
    let r2 = b.rw_lock("seq").read().acquire().await.unwrap();
    assert!(r1.fencing_token() > f_w1 && r2.fencing_token() > f_w1);
    assert_ne!(
        r1.fencing_token(),
        r2.fencing_token(),
        "two reads, one token"
    );
    let reads = r1.fencing_token().max(r2.fencing_token());
    assert!(r1.release().await.unwrap());
    assert!(r2.release().await.unwrap());
    let w2 = b.rw_lock("seq").write().acquire().await.unwrap();
    assert!(w2.fencing_token() > reads, "a write not after the reads");
    let seen = a.rw_lock("seq").inspect().await.unwrap();
    assert!(seen.latest_fence >= Some(w2.fencing_token()), "{seen:?}");
    let f_w2 = w2.fencing_token();
    assert!(w2.release().await.unwrap());
    let r3 = a.rw_lock("seq").read().acquire().await.unwrap();
    assert!(r3.fencing_token() > f_w2);
    assert!(r3.release().await.unwrap());
}

/// A reader, then a writer, whose fixed lease runs out without a release
/// (their process stalled): the next writer, then the next reader, gets
/// the lock after the lease, with a greater fencing token; the old guard
/// has signalled the loss, cannot extend or release, and a fenced write
/// with its token is refused.
pub async fn lease_expiry_frees_a_dead_holder_and_fences_it(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let lease = Duration::from_millis(400);

    let since = Instant::now();
    let read = a
        .rw_lock("stall-r")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let lost = read.lost();
    let new = take_after_lease(&b, "stall-r", RwMode::Write, since, lease).await;
    assert_lost(lost).await;
    assert!(new > read.fencing_token());
    let e = read.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
    assert!(!read.is_held());
    let old = read.fencing_token();
    assert!(
        !read.release().await.unwrap(),
        "the stalled reader released"
    );
    assert_fenced_out(&env, "stall-r", new, old).await;

    let since = Instant::now();
    let write = a
        .rw_lock("stall-w")
        .write()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let lost = write.lost();
    let new = take_after_lease(&b, "stall-w", RwMode::Read, since, lease).await;
    assert_lost(lost).await;
    assert!(new > write.fencing_token());
    let e = write.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
    assert!(!write.is_held());
    let old = write.fencing_token();
    assert!(
        !write.release().await.unwrap(),
        "the stalled writer released"
    );
    assert_fenced_out(&env, "stall-w", new, old).await;
}

/// Takes `name` in `mode` (waiting), no sooner than `lease` after `since`
/// (taken before the holder whose lease that is asked for it), and
/// releases it: its fencing token.
async fn take_after_lease(
    lg: &Client,
    name: &str,
    mode: RwMode,
    since: Instant,
    lease: Duration,
) -> lockguard_core::FencingToken {
    let rw = lg.rw_lock(name);
    let wait = Duration::from_secs(10);
    let (fence, released) = match mode {
        RwMode::Read => {
            let g = rw
                .read()
                .wait(wait)
                .acquire()
                .await
                .expect("free after the lease");
            (g.fencing_token(), g.release().await)
        }
        RwMode::Write => {
            let g = rw
                .write()
                .wait(wait)
                .acquire()
                .await
                .expect("free after the lease");
            (g.fencing_token(), g.release().await)
        }
    };
    assert!(released.unwrap());
    // A lease counts from no earlier than its acquisition was sent; a
    // tenth off for a store whose clock runs apart from this one.
    assert!(
        since.elapsed() >= lease * 9 / 10,
        "taken {:?} after the holder asked, inside its lease of {lease:?}",
        since.elapsed()
    );
    fence
}

/// The loss was signalled by the time the lease ended.
async fn assert_lost(lost: impl Future<Output = lockguard_core::Error>) {
    let err = tokio::time::timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() completed by the time the lease ended");
    assert!(err.is_lease_lost(), "{err}");
}

/// A fenced write with `new` is taken, one with `old` after it refused.
async fn assert_fenced_out(
    env: &Env,
    name: &str,
    new: lockguard_core::FencingToken,
    old: lockguard_core::FencingToken,
) {
    let data = env.data_client().await;
    let out = data.fenced(&format!("{name}:out"));
    out.write(new, "new").await.unwrap();
    let stale = out.write(old, "old").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
}

/// A short lease (a second) kept by the watchdog for three
/// lease lengths, on a read and on a write hold: a writer (a reader) of
/// another client is refused throughout.
pub async fn watchdog_keeps_read_and_write_holds(env: Env) {
    let a = env.client().await;
    let probe = env.client().await;
    let lease = WATCHED;
    let read = a
        .rw_lock("dog")
        .read()
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    let until = Instant::now() + lease * 3;
    while Instant::now() < until {
        assert!(
            is_busy(&probe, "dog", RwMode::Write).await,
            "read lease not renewed"
        );
        assert!(read.is_held());
        tokio::time::sleep(lease / 4).await;
    }
    assert!(
        read.release().await.unwrap(),
        "the watchdog lost the read hold"
    );
    let write = a
        .rw_lock("dog")
        .write()
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    let until = Instant::now() + lease * 3;
    while Instant::now() < until {
        assert!(
            is_busy(&probe, "dog", RwMode::Read).await,
            "write lease not renewed"
        );
        assert!(write.is_held());
        tokio::time::sleep(lease / 4).await;
    }
    assert!(
        write.release().await.unwrap(),
        "the watchdog lost the write hold"
    );
}

/// Acquisitions of both kinds dropped at random points, while waiting and
/// around the grant, never keep the lock: a writer's `try_acquire` gets it
/// within 2 s each round. And a waiter whose future is dropped leaves the
/// queue: the one behind it is served at the release.
pub async fn dropped_rw_acquire_futures_leave_the_queue(env: Env) {
    let a = env.client().await;
    let probe = env.client().await;
    let lease = Duration::from_secs(20);
    let mut rng = fastrand::Rng::with_seed(11);
    for round in 0..80 {
        let holder = match round % 4 {
            0 => Some(
                probe
                    .rw_lock("cancel")
                    .write()
                    .lease(lease)
                    .acquire()
                    .await
                    .unwrap()
                    .release(),
            ),
            _ => None,
        };
        let reader = round % 2 == 0;
        let budget = Duration::from_micros(rng.u64(0..1500));
        let rw = a.rw_lock("cancel");
        tokio::spawn(async move {
            if reader {
                let _ = tokio::time::timeout(budget, rw.read().lease(lease).acquire()).await;
            } else {
                let _ = tokio::time::timeout(budget, rw.write().lease(lease).acquire()).await;
            }
        })
        .await
        .unwrap();
        if let Some(release) = holder {
            release.await.unwrap();
        }
        let freed = eventually(Duration::from_secs(2), || async {
            !is_busy(&probe, "cancel", RwMode::Write).await
        })
        .await;
        assert!(
            freed,
            "round {round}: lock kept after a dropped acquire ({budget:?})"
        );
    }

    // A reader queued behind a writer, dropped: the writer behind it is
    // served by the release.
    let held = probe
        .rw_lock("gone")
        .write()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let dropped = tokio::spawn({
        let a = a.clone();
        async move {
            a.rw_lock("gone")
                .read()
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .map(drop)
        }
    });
    until_waiting(&probe, "gone", 1).await;
    let behind = tokio::spawn({
        let a = a.clone();
        async move {
            let g = a
                .rw_lock("gone")
                .write()
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .unwrap();
            assert!(g.release().await.unwrap());
        }
    });
    until_waiting(&probe, "gone", 2).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    until_waiting(&probe, "gone", 1).await;
    assert!(held.release().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the writer behind the dropped reader was never served")
        .unwrap();
    until_waiting(&probe, "gone", 0).await;
    assert!(
        !is_busy(&probe, "gone", RwMode::Write).await,
        "kept for a waiter that is gone"
    );
}

/// Empty and oversized names, zero and absurd leases, a watchdog lease too
/// short to renew, a zero retry interval: each an `InvalidInput` error with
/// a message, for reads and writes, `validate()` and `inspect()`.
pub async fn rw_bad_input(env: Env) {
    let lg = env.client().await;
    let long = "k".repeat(5000);
    let mut cases = vec![
        lg.rw_lock("").read().try_acquire().await.unwrap_err(),
        lg.rw_lock("").write().acquire().await.unwrap_err(),
        lg.rw_lock(&long).write().try_acquire().await.unwrap_err(),
        lg.rw_lock("").inspect().await.unwrap_err(),
        lg.rw_lock("k\n").read().validate().unwrap_err(),
    ];
    let rw = lg.rw_lock("k");
    for mode in [RwMode::Read, RwMode::Write] {
        let attempts = [
            (Some(Duration::ZERO), None, None),
            (Some(MAX_LEASE + Duration::from_secs(1)), None, None),
            (None, Some(Duration::from_millis(10)), None),
            (None, None, Some(Duration::ZERO)),
        ];
        for (lease, watchdog, interval) in attempts {
            let e = match mode {
                RwMode::Read => {
                    let mut l = rw.read();
                    if let Some(d) = lease {
                        l = l.lease(d);
                    }
                    if let Some(d) = watchdog {
                        l = l.watchdog(d);
                    }
                    if let Some(d) = interval {
                        l = l.retry_interval(d);
                    }
                    l.acquire().await.unwrap_err()
                }
                RwMode::Write => {
                    let mut l = rw.write();
                    if let Some(d) = lease {
                        l = l.lease(d);
                    }
                    if let Some(d) = watchdog {
                        l = l.watchdog(d);
                    }
                    if let Some(d) = interval {
                        l = l.retry_interval(d);
                    }
                    l.acquire().await.unwrap_err()
                }
            };
            cases.push(e);
        }
    }
    for e in cases {
        assert!(e.is_invalid_input(), "{e}");
        assert!(!e.to_string().is_empty());
    }
    let g = rw.write().acquire().await.unwrap();
    assert!(
        g.extend(Duration::ZERO)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(g.release().await.unwrap());
}

/// `inspect()` shows a free lock, then its readers with their lease and
/// fence, a writer waiting, then the writer alone; changing nothing.
pub async fn rw_inspect_shows_readers_writer_and_waiters(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let free = b.rw_lock("seen").inspect().await.unwrap();
    assert!(!free.is_held(), "{free:?}");
    assert_eq!((free.readers, free.writer, free.waiters), (0, false, 0));
    assert_eq!(free.lease_left, None);

    let lease = Duration::from_secs(10);
    let r1 = a
        .rw_lock("seen")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let r2 = b
        .rw_lock("seen")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let read = b.rw_lock("seen").inspect().await.unwrap();
    assert_eq!(
        (read.readers, read.writer, read.holders),
        (2, false, 2),
        "{read:?}"
    );
    assert!(read.is_held() && !read.is_full(), "{read:?}");
    if env.store_keeps_leases() {
        let left = read.lease_left.expect("a held lock has a lease");
        assert!(left > Duration::from_secs(8) && left <= lease, "{left:?}");
    }
    assert!(read.latest_fence >= Some(r1.fencing_token().max(r2.fencing_token())));

    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            b.rw_lock("seen")
                .write()
                .lease(lease)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    until_waiting(&a, "seen", 1).await;
    assert!(r1.release().await.unwrap());
    assert!(r2.release().await.unwrap());
    let w = writer.await.unwrap().unwrap();
    until_waiting(&a, "seen", 0).await;
    let written = a.rw_lock("seen").inspect().await.unwrap();
    assert_eq!(
        (written.readers, written.writer, written.holders),
        (0, true, 1)
    );
    assert!(written.is_full(), "{written:?}");
    assert!(written.latest_fence >= Some(w.fencing_token()));
    assert!(w.release().await.unwrap());
    let after = a.rw_lock("seen").inspect().await.unwrap();
    assert!(!after.is_held(), "{after:?}");
}

/// On a store without read-write locks, every operation of one answers
/// `Unsupported`, naming the store, at once (a wait does not wait), and
/// leaves nothing behind: the lock of the same name is free.
pub async fn rw_locks_are_unsupported(env: Env) {
    let lg = env.client().await;
    let name = lg.store_name();
    let rw = lg.rw_lock("refused");
    let started = Instant::now();
    let errors = [
        rw.read().try_acquire().await.unwrap_err(),
        rw.write().try_acquire().await.unwrap_err(),
        rw.read()
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_err(),
        rw.write()
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_err(),
        rw.inspect().await.unwrap_err(),
        // An upgradeable one too, its gate given back.
        lg.upgradeable_rw_lock("refused")
            .upgradeable_read()
            .try_acquire()
            .await
            .unwrap_err(),
        lg.upgradeable_rw_lock("refused")
            .write()
            .try_acquire()
            .await
            .unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains(name), "{e} does not name {name}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refusal waited"
    );
    let lock = lg
        .lock("refused")
        .try_acquire()
        .await
        .expect("the lock is free");
    assert!(lock.release().await.unwrap());
    let gate = lg
        .upgradeable_rw_lock("refused")
        .upgradeable_read()
        .try_acquire()
        .await;
    assert!(gate.unwrap_err().is_unsupported(), "the gate was kept");
}
