//! Money moved between accounts by four replicas at once, each transfer
//! under a multi-lock on its two accounts: the balances are read and
//! written in separate steps (as an application reading rows and writing
//! them back would), and the multi-lock keeps every transfer whole. The
//! replicas name the two accounts in whichever order the transfer goes, and
//! never deadlock: every client takes the keys in one shared order.
//!
//! ```sh
//! cargo run --example transfer                                  # in-memory store
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example transfer  # real Redis
//! ```
//!
//! Exits with status 1 if money appeared or vanished.

use std::time::Duration;

use lockguard::prelude::*;
use lockguard::{Client, Error};

/// The accounts, each starting with `START`.
const ACCOUNTS: usize = 5;
const START: i64 = 1_000;
/// Transfers per replica.
const TRANSFERS: usize = 40;

/// Moves `amount` from `from` to `to`, if `from` has it: both balances read,
/// then both written, under one multi-lock on the two accounts.
async fn transfer(lg: &Client, from: &str, to: &str, amount: i64) -> Result<bool, Error> {
    let accounts = lg
        .multi_lock([from, to])
        .lease(Duration::from_secs(10))
        .wait(Duration::from_secs(30));
    accounts
        .run(async {
            let (a, b) = (lg.counter(from), lg.counter(to));
            let (have, other) = (a.get().await?, b.get().await?);
            if have < amount {
                return Ok(false);
            }
            // Let the other replicas run between the reads and the writes:
            // without the lock, updates would be lost here.
            tokio::task::yield_now().await;
            a.set(have - amount).await?;
            b.set(other + amount).await?;
            Ok(true)
        })
        .await?
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let lg = Client::from_env_or_memory().await?;
    println!(
        "store: {}; 4 replicas, {ACCOUNTS} accounts",
        lg.store_name()
    );
    let run = std::process::id();
    let names: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct:{run}:{i}")).collect();
    for name in &names {
        lg.counter(name).set(START).await?;
    }

    let mut replicas = Vec::new();
    for r in 0..4u64 {
        // Each replica a client of its own, as separate processes have.
        let client = if lg.store_name() == "memory" {
            lg.peer()
        } else {
            Client::from_env().await?
        };
        let names = names.clone();
        replicas.push(tokio::spawn(async move {
            // A small generator of the example's own: the same run each time.
            let mut seed = r.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % n) as usize
            };
            let mut done = 0;
            for _ in 0..TRANSFERS {
                let from = next(ACCOUNTS as u64);
                let to = (from + 1 + next(ACCOUNTS as u64 - 1)) % ACCOUNTS;
                let amount = 1 + next(199) as i64;
                if transfer(&client, &names[from], &names[to], amount).await? {
                    done += 1;
                }
            }
            Ok::<_, Error>(done)
        }));
    }
    let mut done = 0;
    for replica in replicas {
        done += replica.await.expect("replica panicked")?;
    }

    let mut total = 0;
    for name in &names {
        let balance = lg.counter(name).get().await?;
        println!("  {name}: {balance}");
        total += balance;
    }
    println!(
        "{done} transfers made; total {total} (started with {})",
        START * ACCOUNTS as i64
    );
    if total != START * ACCOUNTS as i64 {
        eprintln!("money appeared or vanished: the transfers were not exclusive");
        std::process::exit(1);
    }
    println!("no money appeared or vanished");
    Ok(())
}
