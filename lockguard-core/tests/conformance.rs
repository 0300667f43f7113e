//! The conformance kit (lockguard-testing's `conformance`) on the in-memory
//! store, the reference every other store is held to, and the tests only
//! the memory store runs.

use std::sync::Arc;
use std::time::Duration;

use lockguard_core::store::{
    DataStore, Inbox, LockKeys, LockStore, Outcome, Place, Store, Token, Waiting,
};
use lockguard_core::{Builder, Client, Quota, Result};
use lockguard_testing::conformance::{ClientFuture, Harness, Memory};

lockguard_testing::conformance!(
    memory => Memory::new();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);

/// A store of locks only, written against the boundary as a third party
/// would: it forwards locks and semaphores to the memory store and
/// implements nothing else, so read-write locks take the boundary's default
/// answer.
#[derive(Debug)]
struct LocksOnly(Store);

impl LockStore for LocksOnly {
    fn name(&self) -> &'static str {
        "locks-only"
    }
    fn waiting(&self) -> Waiting {
        self.0.waiting()
    }
    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        self.0.acquire(keys, token, lease, place).await
    }
    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.0.release(keys, token).await
    }
    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        self.0.extend(keys, token, lease).await
    }
    fn attach(&self, inbox: std::sync::Weak<dyn Inbox>) {
        self.0.attach(inbox)
    }
}

impl DataStore for LocksOnly {}

/// The harness of [`LocksOnly`]: one store, a client per call.
struct LocksOnlyHarness(Arc<LocksOnly>);

impl Harness for LocksOnlyHarness {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let store = Store::new(self.0.clone(), Vec::new());
        Box::pin(async move { builder.build(store).expect("valid settings") })
    }
}

lockguard_testing::conformance!(
    locks_only => LocksOnlyHarness(Arc::new(LocksOnly(Store::memory())));
    rw_refused
);

/// Outside a scope every acquisition is its own owner: two requests served
/// by one task, or the branches of one `join!`, exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_outside_a_scope_exclude_their_own_task() {
    let lg = Client::memory();
    let outer = lg.lock("nr").acquire().await.unwrap();
    let again = lg.lock("nr").try_acquire().await.unwrap_err();
    assert!(again.is_busy(), "{again}");
    // Branches of one join! are two owners.
    let (first, second) = (lg.lock("nr2"), lg.lock("nr2"));
    let (a, b) = tokio::join!(first.try_acquire(), second.try_acquire());
    assert!(a.is_ok() != b.is_ok(), "both or neither branch took it");
    assert!(outer.release().await.unwrap());
    assert!(lg.lock("nr").try_acquire().await.is_ok());
}

/// `try_acquire` on a rate limiter turns a refusal into a `RateLimited`
/// error that says when to retry.
#[tokio::test]
async fn try_acquire_turns_a_refusal_into_a_rate_limited_error() {
    let lg = Client::memory();
    let l = lg.rate_limiter("once", Quota::per_minute(1));
    assert!(l.try_acquire("k").await.unwrap().allowed);
    let e = l.try_acquire("k").await.unwrap_err();
    assert!(e.is_rate_limited(), "{e}");
    assert!(e.retry_after().is_some_and(|r| r > Duration::ZERO));
}

/// Without an installed default client, `default_client` is an error that
/// says so; once installed, it is that client.
#[tokio::test]
async fn default_client_is_an_error_until_installed() {
    // The only test in this binary touching the process-wide default.
    let e = Client::default_client().unwrap_err();
    assert_eq!(e.kind(), lockguard_core::ErrorKind::NoDefaultClient);
    Client::memory().install_default();
    assert_eq!(Client::default_client().unwrap().store_name(), "memory");
}

/// Acquisitions and releases run in spans that name the lock (or the
/// semaphore) and record the fencing token and the wait, so every event
/// inside carries them.
#[tokio::test(flavor = "current_thread")]
async fn spans_name_the_lock_and_record_its_fence() {
    let captured = lockguard_testing::CapturedLog::default();
    let _log = captured.install_with_span_closes();
    let lg = Client::memory();
    let guard = lg.lock("job").acquire().await.unwrap();
    let fence = guard.fencing_token().get();
    assert!(guard.release().await.unwrap());
    let permit = lg.semaphore("exports", 2).try_acquire().await.unwrap();
    assert!(permit.release().await.unwrap());
    let text = captured.text();
    let closed = |needle: &str| {
        text.lines()
            .any(|l| l.contains(needle) && l.contains("close"))
    };
    assert!(
        closed(&format!(
            "lock{{op=\"acquire\" lock=job fence={fence} waited_ms="
        )),
        "{text}"
    );
    assert!(
        closed(&format!("lock{{op=\"release\" lock=job fence={fence}}}")),
        "{text}"
    );
    assert!(
        closed("semaphore{op=\"try_acquire\" semaphore=exports fence="),
        "{text}"
    );
    assert!(
        closed("semaphore{op=\"release\" semaphore=exports"),
        "{text}"
    );
}

/// A read-write lock's acquisitions and releases run in `rw_lock` spans
/// that name the lock and the mode and record the fencing token.
#[tokio::test(flavor = "current_thread")]
async fn rw_lock_spans_name_the_lock_and_its_mode() {
    let captured = lockguard_testing::CapturedLog::default();
    let _log = captured.install_with_span_closes();
    let lg = Client::memory();
    let read = lg.rw_lock("prices").read().try_acquire().await.unwrap();
    let fence = read.fencing_token().get();
    assert!(read.release().await.unwrap());
    let write = lg.rw_lock("prices").write().acquire().await.unwrap();
    assert!(write.release().await.unwrap());
    let text = captured.text();
    let closed = |needle: &str| {
        text.lines()
            .any(|l| l.contains(needle) && l.contains("close"))
    };
    assert!(
        closed(&format!(
            "rw_lock{{op=\"try_acquire\" rw_lock=prices mode=\"read\" fence={fence} waited_ms="
        )),
        "{text}"
    );
    assert!(
        closed(&format!(
            "rw_lock{{op=\"release\" rw_lock=prices mode=\"read\" fence={fence}}}"
        )),
        "{text}"
    );
    assert!(
        closed("rw_lock{op=\"acquire\" rw_lock=prices mode=\"write\" fence="),
        "{text}"
    );
}
