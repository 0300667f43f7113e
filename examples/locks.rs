//! Takes and releases distributed locks and prints what happened.
//!
//! ```sh
//! cargo run --example locks                                  # in-memory store
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example locks  # real Redis
//! ```

use std::time::{Duration, Instant};

use lockguard::prelude::*;
use lockguard::{Client, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let lg = Client::from_env_or_memory().await?;
    // A second handle on the same store, standing in for another process.
    let other = if lg.store_name() == "memory" {
        lg.peer()
    } else {
        Client::from_env().await?
    };
    println!("store: {}", lg.store_name());
    let run = format!("example:{}", std::process::id());

    // 1. Take a lock, see it busy from elsewhere, release it.
    let key = format!("{run}:order:42");
    let guard = lg
        .lock(&key)
        .lease(Duration::from_secs(10))
        .acquire()
        .await?;
    println!("1. took {key} with fencing token {}", guard.fencing_token());
    let busy = other.lock(&key).try_acquire().await.unwrap_err();
    println!(
        "   another process finds it busy: {busy} (retry after {:?})",
        busy.retry_after().unwrap_or_default()
    );
    println!("   released while still held: {}", guard.release().await?);

    // 2. Eight workers on two handles increment a fenced value under the
    //    lock, with a read and a write that are not atomic together.
    let counter = format!("{run}:counter");
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..8 {
        let lg = if w % 2 == 0 {
            lg.clone()
        } else {
            other.clone()
        };
        let (key, counter) = (key.clone(), counter.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = lg
                    .lock(&key)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await?;
                let res = lg.fenced(&counter);
                let n = match res.read().await? {
                    Some(v) => String::from_utf8_lossy(&v.value)
                        .parse::<u64>()
                        .unwrap_or(0),
                    None => 0,
                };
                res.write(guard.fencing_token(), (n + 1).to_string())
                    .await?;
                guard.release().await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for w in workers {
        w.await.expect("worker panicked")?;
    }
    let total = lg.fenced(&counter).read().await?.expect("counter written");
    println!(
        "2. 8 workers x 25 increments under the lock: counter = {} (expected 200) in {:?}",
        String::from_utf8_lossy(&total.value),
        started.elapsed()
    );

    // 3. The watchdog renews a 300 ms lease for as long as the guard lives.
    let guard = lg
        .lock(&format!("{run}:report"))
        .watchdog(Duration::from_millis(300))
        .acquire()
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "3. after 1 s on a 300 ms lease renewed by the watchdog, still held: {}",
        guard.is_held()
    );
    guard.release().await?;

    // 4. A lease that runs out: the next holder gets a newer fencing token
    //    and the old holder's fenced write is refused.
    let key = format!("{run}:invoice");
    let old = lg
        .lock(&key)
        .lease(Duration::from_millis(200))
        .acquire()
        .await?;
    let new = other
        .lock(&key)
        .wait(Duration::from_secs(2))
        .acquire()
        .await?;
    let ledger = other.fenced(&format!("{run}:ledger"));
    ledger
        .write(new.fencing_token(), "written by the new holder")
        .await?;
    let refused = lg
        .fenced(&format!("{run}:ledger"))
        .write(old.fencing_token(), "stale")
        .await;
    println!(
        "4. old holder (token {}) lost its lease: held = {}; its write: {}",
        old.fencing_token(),
        old.is_held(),
        match refused {
            Ok(()) => "accepted (wrong!)".to_owned(),
            Err(e) => e.to_string(),
        }
    );
    println!(
        "   old holder's release says it still held the lock: {}",
        old.release().await?
    );
    new.release().await?;

    // 5. Reentrancy: inside the body a lock runs, taking it again (a nested
    //    call) does not wait for itself; outside, the same task is another
    //    owner.
    let key = format!("{run}:nested");
    let lock = lg.lock(&key);
    let nested = lock
        .run(async {
            let inner = lg.lock(&key).try_acquire().await?;
            let reentrant = inner.is_reentrant();
            inner.release().await?;
            Ok::<_, lockguard::Error>(reentrant)
        })
        .await??;
    println!("5. nested acquire inside the lock's body: reentrant = {nested}");
    println!("done");
    Ok(())
}
