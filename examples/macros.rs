//! The three attribute macros at work, on the in-memory store or on Redis.
//!
//! ```sh
//! cargo run --example macros                                  # in-memory store
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example macros  # real Redis
//! ```
//!
//! 1. `#[distributed_lock]`: eight double clicks pay one order; the lock
//!    makes the check-then-charge exclusive, so it is charged once.
//! 2. `#[rate_limit]`: a user signs in five times against a quota of three
//!    a minute; two sign-ins are refused with a retry time.
//! 3. `#[concurrency_limit]`: ten exports, at most two at once.
//! 4. A body that outlives its lock's fixed lease is stopped before the
//!    lease ends, and the call returns the lease-lost error.
//! 5. `skip_if_busy`: a nightly job finds the lock held by another process
//!    and skips without running.
//!
//! The program checks its own numbers and exits with status 1 if any is
//! wrong. (It imports the attributes from `lockguard_macros`, a
//! dev-dependency of this package; applications use
//! `lockguard::distributed_lock` with the `macros` feature.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard::prelude::*;
use lockguard::{Client, Error};
use lockguard_macros::{concurrency_limit, distributed_lock, rate_limit};

/// The shop's state, as a real service would keep it in its store; here in
/// memory, with counters to see what happened.
struct Shop {
    /// A prefix of every key of this run, so runs on one Redis do not meet.
    run: String,
    charges: AtomicU32,
    paid: AtomicU32,
    exports_now: AtomicUsize,
    exports_max: AtomicUsize,
}

/// Pays order `order_id` unless it is paid already: a check and a charge
/// that are not atomic together, made exclusive by the lock. Double clicks
/// wait up to five seconds for the first click to finish.
#[distributed_lock(key = "{shop.run}:order:{order_id}", wait = "5s")]
async fn pay(shop: &Shop, order_id: u64) -> Result<bool, Error> {
    if shop.paid.load(Ordering::SeqCst) != 0 {
        return Ok(false);
    }
    // The payment provider takes a moment.
    tokio::time::sleep(Duration::from_millis(20)).await;
    shop.charges.fetch_add(1, Ordering::SeqCst);
    shop.paid.store(1, Ordering::SeqCst);
    println!("   order {order_id} charged");
    Ok(true)
}

/// Three sign-ins a minute per user, across every process.
#[rate_limit(key = "{run}:user:{user}", rate = "3/m", algorithm = "sliding_window")]
async fn sign_in(run: &str, user: &str) -> Result<(), Error> {
    println!("   {user} signed in");
    Ok(())
}

/// At most two exports at once; the others wait up to ten seconds.
#[concurrency_limit(key = "{shop.run}:exports", permits = 2, wait = "10s")]
async fn export(shop: &Shop, n: u32) -> Result<u32, Error> {
    let now = shop.exports_now.fetch_add(1, Ordering::SeqCst) + 1;
    shop.exports_max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    shop.exports_now.fetch_sub(1, Ordering::SeqCst);
    Ok(n)
}

/// A job that takes two seconds under a lock leased for 300 ms, with no
/// watchdog: it is stopped before the lease can end.
#[distributed_lock(key = "{run}:reindex", ttl = "300ms")]
async fn reindex(run: &str) -> Result<(), Error> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("   reindexed (never printed: the body is stopped)");
    Ok(())
}

/// The nightly report, which skips when another process is on it; the
/// client comes from the caller.
#[distributed_lock(key = "{run}:nightly", skip_if_busy, client = lg)]
async fn nightly(lg: &Client, run: &str) -> Result<Option<&'static str>, Error> {
    Ok(Some("report sent"))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();

    // The store at LOCKGUARD_URL (or REDIS_URL), memory when neither is
    // set; the functions without `client = ...` use this default.
    let lg = Client::from_env_or_memory().await?;
    lg.install_default();
    // A second handle on the same store, standing in for another process.
    let other = if lg.store_name() == "memory" {
        lg.peer()
    } else {
        Client::from_env().await?
    };
    println!("store: {}", lg.store_name());
    let shop = Arc::new(Shop {
        run: format!("example-macros:{}", std::process::id()),
        charges: AtomicU32::new(0),
        paid: AtomicU32::new(0),
        exports_now: AtomicUsize::new(0),
        exports_max: AtomicUsize::new(0),
    });
    let run = shop.run.clone();
    let mut wrong = Vec::new();

    println!("1. eight double clicks pay order 42");
    let clicks: Vec<_> = (0..8)
        .map(|_| {
            let shop = shop.clone();
            tokio::spawn(async move { pay(&shop, 42).await })
        })
        .collect();
    let mut charged = 0;
    for click in clicks {
        if click.await.expect("the click task")? {
            charged += 1;
        }
    }
    let charges = shop.charges.load(Ordering::SeqCst);
    println!(
        "   {charged} click charged, {} found it paid; charges: {charges}",
        8 - charged
    );
    if charges != 1 || charged != 1 {
        wrong.push(format!("order 42 was charged {charges} times"));
    }

    println!("2. ann signs in five times; the quota is three a minute");
    let mut refused = 0;
    for _ in 0..5 {
        match sign_in(&run, "ann").await {
            Ok(()) => {}
            Err(e) if e.is_rate_limited() => {
                refused += 1;
                println!(
                    "   refused: retry in {} s",
                    e.retry_after().unwrap_or_default().as_secs_f64().ceil()
                );
            }
            Err(e) => return Err(e),
        }
    }
    if refused != 2 {
        wrong.push(format!("{refused} sign-ins were refused, not 2"));
    }

    println!("3. ten exports, at most two at once");
    let started = Instant::now();
    let exports: Vec<_> = (0..10)
        .map(|n| {
            let shop = shop.clone();
            tokio::spawn(async move { export(&shop, n).await })
        })
        .collect();
    for e in exports {
        e.await.expect("the export task")?;
    }
    let max = shop.exports_max.load(Ordering::SeqCst);
    println!("   done in {:?}, at most {max} at once", started.elapsed());
    if max != 2 {
        wrong.push(format!("{max} exports ran at once, not 2"));
    }

    println!("4. a two-second job under a 300 ms lease");
    let started = Instant::now();
    match reindex(&run).await {
        Err(e) if e.is_lease_lost() => {
            println!("   stopped after {:?}: {e}", started.elapsed());
        }
        other => wrong.push(format!("the job was not stopped: {other:?}")),
    }

    println!("5. the nightly report, while another process holds its lock");
    let held = other.lock(&format!("{run}:nightly")).try_acquire().await?;
    let first = nightly(&lg, &run).await?;
    println!("   {}", first.unwrap_or("skipped: busy elsewhere"));
    held.release().await?;
    let second = nightly(&lg, &run).await?;
    println!("   then: {}", second.unwrap_or("skipped"));
    if first.is_some() || second.is_none() {
        wrong.push(format!("the nightly report ran {first:?} then {second:?}"));
    }

    if !wrong.is_empty() {
        for w in &wrong {
            eprintln!("wrong: {w}");
        }
        std::process::exit(1);
    }
    println!("all checks passed");
    Ok(())
}
