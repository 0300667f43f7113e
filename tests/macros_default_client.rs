//! The process-wide default client. One test in its own binary, since the
//! default is global: with none installed the functions return the
//! `NoDefaultClient` error (no panic, no body) and say how to fix it once,
//! at error level; once one is installed they use it.
#![cfg(all(feature = "macros", feature = "redis"))]

use std::sync::atomic::{AtomicUsize, Ordering};

use lockguard::prelude::*;
use lockguard::{Client, ErrorKind, concurrency_limit, distributed_lock, rate_limit};
use lockguard_testing::{CapturedLog, RedisServer};

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "default:{id}")]
async fn locked(id: u32, other: Option<&Client>) -> Result<u32, lockguard::Error> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    if let Some(other) = other {
        // The lock is held on the default client's store.
        let busy = other
            .lock(&format!("default:{id}"))
            .try_acquire()
            .await
            .unwrap_err();
        assert!(busy.is_busy(), "{busy}");
    }
    Ok(id)
}

#[rate_limit(key = "default", rate = "100/h")]
async fn limited() -> Result<(), lockguard::Error> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[concurrency_limit(key = "default", permits = 2)]
async fn bounded() -> Result<(), lockguard::Error> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_client_is_required_then_used() {
    // The calls run on this thread: its subscriber sees what they log.
    let captured = CapturedLog::default();
    let log = captured.install();
    for err in [
        locked(1, None).await.unwrap_err(),
        limited().await.unwrap_err(),
        bounded().await.unwrap_err(),
        locked(2, None).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NoDefaultClient, "{err}");
        assert!(err.is_misconfigured() && !err.is_retryable(), "{err}");
    }
    drop(log);
    // Said once, at error level, with the fix: not silent, not per call.
    let told = captured.lines_with("ERROR", "call Client::install_default");
    assert_eq!(told, 1, "{}", captured.text());
    assert_eq!(
        RUNS.load(Ordering::SeqCst),
        0,
        "a body ran without a client"
    );

    Client::memory().install_default();
    assert_eq!(locked(1, None).await.unwrap(), 1);
    limited().await.unwrap();
    bounded().await.unwrap();
    assert_eq!(RUNS.load(Ordering::SeqCst), 3);

    let server = RedisServer::start();
    Client::connect_redis(&server.url())
        .await
        .unwrap()
        .install_default();
    let other = Client::connect_redis(&server.url()).await.unwrap();
    assert_eq!(locked(2, Some(&other)).await.unwrap(), 2);
    assert_eq!(RUNS.load(Ordering::SeqCst), 4);
}
