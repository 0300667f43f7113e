//! Counters: the bounded decrement that never oversells, once-per-user
//! marks, compare-and-set and `update` without lost updates, overflow,
//! expiry, and versions that never repeat.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lockguard_core::Client;

use super::Env;

/// The response timeout of the clients whose tasks all write one counter:
/// each write waits its turn behind the others' (on the SQL stores, behind
/// their transactions on the counter's row), which on a loaded machine can
/// take longer than the default 2 s: time, not the property under test.
const WRITES_IN_LINE: Duration = Duration::from_secs(15);

/// The 4 client handles of a test whose tasks all write one counter.
async fn writers_in_line(env: &Env) -> Vec<Client> {
    env.handles(Client::builder().response_timeout(WRITES_IN_LINE))
        .await
}

/// 64 tasks on 4 handles buy from a stock of 1000 with
/// `decr_if_at_least(1)`: exactly 1000 succeed and it never goes below 0.
pub async fn stock_is_never_oversold(env: Env) {
    let clients = writers_in_line(&env).await;
    clients[0].counter("stock").set(1000).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..64 {
        let lg = clients[t % 4].clone();
        tasks.push(tokio::spawn(async move {
            let stock = lg.counter("stock");
            let mut bought = 0u64;
            loop {
                match stock.decr_if_at_least(1).await.unwrap() {
                    Some(left) => {
                        assert!(left >= 0, "stock went to {left}");
                        bought += 1;
                    }
                    None => return bought,
                }
            }
        }));
    }
    let mut sold = 0;
    for t in tasks {
        sold += t.await.unwrap();
    }
    assert_eq!(sold, 1000);
    assert_eq!(clients[1].counter("stock").get().await.unwrap(), 0);
    assert_eq!(
        clients[2]
            .counter("stock")
            .decr_if_at_least(1)
            .await
            .unwrap(),
        None
    );
}

/// 16 tasks on 4 handles mark 50 users each on one counter: every user is
/// first exactly once.
pub async fn mark_once_is_first_exactly_once(env: Env) {
    let clients = writers_in_line(&env).await;
    let firsts = Arc::new(std::sync::Mutex::new(HashMap::<String, u32>::new()));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let lg = clients[t % 4].clone();
        let firsts = firsts.clone();
        tasks.push(tokio::spawn(async move {
            let buyers = lg.counter("promo");
            for user in 0..50 {
                let member = format!("user-{user}");
                if buyers.mark_once(&member).await.unwrap() {
                    *firsts.lock().unwrap().entry(member).or_default() += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let firsts = firsts.lock().unwrap();
    assert_eq!(firsts.len(), 50);
    assert!(firsts.values().all(|n| *n == 1), "{firsts:?}");
}

/// Increments, decrements, `set` and `get` agree; an update that would
/// overflow is an `InvalidInput` error and changes nothing.
pub async fn incr_decr_get_set_and_overflow(env: Env) {
    let lg = env.client().await;
    let c = lg.counter("views");
    assert_eq!(c.get().await.unwrap(), 0);
    assert_eq!(c.incr_by(5).await.unwrap(), 5);
    assert_eq!(c.decr_by(7).await.unwrap(), -2);
    c.set(i64::MAX - 1).await.unwrap();
    assert_eq!(c.incr_by(1).await.unwrap(), i64::MAX);
    let err = c.incr_by(1).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert_eq!(
        c.get().await.unwrap(),
        i64::MAX,
        "failed update changed the value"
    );
    assert!(c.decr_by(i64::MIN).await.unwrap_err().is_invalid_input());
}

/// A stale version is refused by `compare_and_set`, and 8 clients updating
/// one counter through `update` lose no update.
pub async fn compare_and_set_and_update_lose_no_update(env: Env) {
    let lg = env.client().await;
    let c = lg.counter("balance");
    let v0 = c.get_versioned().await.unwrap();
    assert!(c.compare_and_set(v0.version, 10).await.unwrap());
    assert!(
        !c.compare_and_set(v0.version, 99).await.unwrap(),
        "stale version accepted"
    );
    assert_eq!(c.get().await.unwrap(), 10);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lg = env.client().await;
        tasks.push(tokio::spawn(async move {
            let c = lg.counter("balance");
            for _ in 0..25 {
                c.update(|v| v + 1).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(c.get().await.unwrap(), 10 + 8 * 25);
}

/// A version read before a counter expired never matches the counter that
/// comes back: a stale compare-and-set cannot overwrite newer writes.
pub async fn versions_do_not_repeat_after_expiry(env: Env) {
    let lg = env.client().await;
    let c = lg
        .counter("cas-expiry")
        .expire_after(Duration::from_millis(200));
    c.set(1).await.unwrap();
    let seen = c.get_versioned().await.unwrap();
    if env.real_time() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    } else {
        env.clock().advance(Duration::from_millis(300));
    }
    assert_eq!(c.get_versioned().await.unwrap().version, 0, "expired");
    // As many writes as it took to reach the version seen before.
    c.set(5).await.unwrap();
    for _ in 1..seen.version.min(5) {
        c.incr_by(1).await.unwrap();
    }
    assert!(!c.compare_and_set(seen.version, 99).await.unwrap());
    // A missing counter is version 0, and compare-and-set creates it.
    let fresh = lg.counter("cas-fresh");
    assert!(fresh.compare_and_set(0, 7).await.unwrap());
    assert_eq!(fresh.get().await.unwrap(), 7);
    assert_eq!(lg.counter("never").decr_if_at_least(1).await.unwrap(), None);
    assert_eq!(
        lg.counter("never").get_versioned().await.unwrap().version,
        0
    );
}

/// A counter written more times than microseconds passed before it
/// expired, then written again: no version of the new counter is one seen
/// before. (Versions seeded from the clock's µs and bumped by one repeated
/// here: the memory store's clock stands still between writes, as a busy
/// server's can within one µs or after a step back.)
pub async fn versions_grow_past_more_writes_than_microseconds(env: Env) {
    // On a server every write takes far more than a µs, so the expiry is
    // long enough for the reads below to see the counter; 3 s, so that a
    // loaded machine's stall between a write and the read after it (seen
    // once with 1 s on MariaDB at a load of 7) does not expire it.
    let ttl = Duration::from_millis(if env.real_time() { 3000 } else { 1 });
    let lg = env.client().await;
    let c = lg.counter("busy").expire_after(ttl);
    // The expiry is set by the first write and kept by the later ones, so
    // on a slow server the writes can outlast it (the counter made anew
    // partway): every hundredth write is read back, and the greatest
    // version read is the one the new counter must pass. A read follows
    // the last write at once.
    let mut seen = 0;
    for i in 1..=1100 {
        c.incr_by(1).await.unwrap();
        if i % 100 == 0 {
            seen = seen.max(c.get_versioned().await.unwrap().version);
        }
    }
    assert_ne!(seen, 0);
    // Whenever the counter was last made, it expires within `ttl` of now.
    if env.real_time() {
        tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    } else {
        env.clock().advance(ttl);
    }
    assert_eq!(c.get_versioned().await.unwrap().version, 0, "expired");
    for _ in 0..200 {
        c.incr_by(1).await.unwrap();
        let now = c.get_versioned().await.unwrap().version;
        assert!(now > seen, "version {now} after {seen} was seen");
    }
}

/// A counter and its marks expire together: after the expiry it reads 0
/// and a mark is first again.
pub async fn expiry_resets_a_counter(env: Env) {
    let lg = env.client().await;
    let c = lg.counter("daily").expire_after(Duration::from_millis(200));
    c.incr_by(3).await.unwrap();
    assert!(c.mark_once("a").await.unwrap());
    if env.real_time() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    } else {
        env.clock().advance(Duration::from_millis(300));
    }
    assert_eq!(c.get().await.unwrap(), 0);
    assert!(
        c.mark_once("a").await.unwrap(),
        "marks expire with the counter"
    );
    // Without expiry a counter stays.
    let forever = lg.counter("forever");
    forever.incr_by(1).await.unwrap();
    assert_eq!(forever.get().await.unwrap(), 1);
}

/// An empty name and a bounded decrement by a negative or zero amount are
/// `InvalidInput` errors.
pub async fn counter_bad_input(env: Env) {
    let lg = env.client().await;
    assert!(lg.counter("").get().await.unwrap_err().is_invalid_input());
    assert!(
        lg.counter("c")
            .decr_if_at_least(-1)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(
        lg.counter("c")
            .decr_if_at_least(0)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(
        lg.counter("c")
            .mark_once("")
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    let zero = lg.counter("c").expire_after(Duration::ZERO);
    assert!(zero.incr_by(1).await.unwrap_err().is_invalid_input());
    let absurd = lg
        .counter("c")
        .expire_after(Duration::from_secs(10 * 365 * 86400));
    assert!(absurd.incr_by(1).await.unwrap_err().is_invalid_input());
}
