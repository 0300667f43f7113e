//! `#[scheduled]` on the shapes of job it takes, started on the in-memory
//! store: a client argument and the run, the default client and an owned
//! argument, every option.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lockguard::{scheduled, Client, JobRun};

#[scheduled(every = "50ms", client = lg)]
async fn with_client(lg: &Client, runs: &Arc<AtomicU64>, run: JobRun) -> Result<u64, lockguard::Error> {
    assert!(run.fencing_token().get() > 0);
    assert!(!lg.prefix().is_empty());
    runs.fetch_add(1, Ordering::Relaxed);
    Ok(run.period())
}

#[scheduled(every = "1h", at_least = "1m", at_most = "10m", name = "hourly")]
async fn on_the_default_client(label: String) -> Result<(), std::io::Error> {
    if label.is_empty() {
        return Err(std::io::Error::other("no label"));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lockguard::Error> {
    let lg = Client::memory();
    let runs = Arc::new(AtomicU64::new(0));
    let scheduled = with_client(&lg, &runs)?;
    while runs.load(Ordering::Relaxed) < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    scheduled.stop().await;

    let e = on_the_default_client("x".into()).unwrap_err();
    assert_eq!(e.kind(), lockguard::ErrorKind::NoDefaultClient);
    lg.install_default();
    let hourly = on_the_default_client("report".into())?;
    assert_eq!(hourly.name(), "hourly");
    hourly.stop().await;
    Ok(())
}
