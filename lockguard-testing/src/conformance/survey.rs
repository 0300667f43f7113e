//! Surveys and forced releases: every lock held or awaited, listed from
//! any client with its holders and its waiters in order
//! ([`Client::locks`](lockguard_core::Client::locks)), and an operator's
//! release of a lock someone else holds
//! ([`Client::force_release`](lockguard_core::Client::force_release)).

use std::time::Duration;

use lockguard_core::{Client, LockKind, LockState, RwMode};

use super::{Env, eventually};

/// The lock `name` of `kind` as `lg` lists it, if held or awaited.
async fn listed(lg: &Client, kind: LockKind, name: &str) -> Option<LockState> {
    let all = lg.locks("survey-*").await.expect("listing locks");
    all.into_iter().find(|s| s.kind == kind && s.name == name)
}

/// A held lock is listed from another client with its holder's fence and
/// lease, and its waiters in the order they came: the first listed is
/// the one a release hands it to. A semaphore's holders and a read-write
/// lock's readers are listed too; a free lock, and a name the pattern
/// does not match, are not.
pub async fn locks_are_listed_with_holders_and_waiters_in_order(env: Env) {
    let (a, b, c, d) = (
        env.client().await,
        env.client().await,
        env.client().await,
        env.client().await,
    );
    let lease = Duration::from_secs(20);
    let guard = a.lock("survey-lock").lease(lease).acquire().await.unwrap();
    let free = a.lock("survey-free").try_acquire().await.unwrap();
    assert!(free.release().await.unwrap());
    let permit = a
        .semaphore("survey-sem", 2)
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let read = a
        .rw_lock("survey-rw")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let other = a.lock("elsewhere").lease(lease).acquire().await.unwrap();

    let held = listed(&d, LockKind::Lock, "survey-lock")
        .await
        .expect("the held lock is listed");
    assert_eq!(held.holders.len(), 1, "{held:?}");
    let holder = held.holders[0];
    assert!(
        holder.fence.is_none_or(|f| f == guard.fencing_token()),
        "{held:?}"
    );
    assert!(held.latest_fence >= Some(guard.fencing_token()), "{held:?}");
    if env.store_keeps_lock_leases() {
        let left = holder.lease_left.expect("the store keeps the lease");
        assert!(left > Duration::from_secs(15) && left <= lease, "{left:?}");
    }
    assert!(held.waiters.is_empty(), "{held:?}");

    // Two waiters of two clients, b first: listed in that order.
    let first = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("survey-lock")
                .lease(lease)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&d, LockKind::Lock, "survey-lock")
            .await
            .is_some_and(|s| s.waiters.len() == 1)
    })
    .await;
    assert!(queued, "the first waiter was never listed");
    let second = tokio::spawn({
        let c = c.clone();
        async move {
            c.lock("survey-lock")
                .lease(lease)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&d, LockKind::Lock, "survey-lock")
            .await
            .is_some_and(|s| s.waiters.len() == 2)
    })
    .await;
    assert!(queued, "the second waiter was never listed");
    let waiting = listed(&d, LockKind::Lock, "survey-lock").await.unwrap();
    assert!(
        waiting.waiters.iter().all(|w| w.mode.is_none()),
        "{waiting:?}"
    );
    assert_ne!(waiting.waiters[0].token, waiting.waiters[1].token);
    assert!(
        waiting.waiters.iter().all(|w| w.token != holder.token),
        "{waiting:?}"
    );

    let sem = listed(&d, LockKind::Semaphore, "survey-sem")
        .await
        .expect("the semaphore is listed");
    assert_eq!(sem.holders.len(), 1, "{sem:?}");
    let rw = listed(&d, LockKind::ReadWrite, "survey-rw")
        .await
        .expect("the read-write lock is listed");
    assert_eq!(rw.holders.len(), 1, "{rw:?}");
    assert_eq!(rw.holders[0].mode, Some(RwMode::Read), "{rw:?}");
    // An upgradeable read-write lock: its read, and its gate.
    let up = a
        .upgradeable_rw_lock("survey-up")
        .upgradeable_read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let urw = listed(&d, LockKind::Upgradeable, "survey-up")
        .await
        .expect("the upgradeable lock is listed");
    assert_eq!(urw.holders.len(), 1, "{urw:?}");
    assert_eq!(urw.holders[0].mode, Some(RwMode::Read), "{urw:?}");
    let gate = listed(&d, LockKind::UpgradeGate, "survey-up")
        .await
        .expect("its gate is listed");
    assert_eq!(gate.holders.len(), 1, "{gate:?}");
    assert!(up.release().await.unwrap());
    assert!(listed(&d, LockKind::Lock, "survey-free").await.is_none());
    let all = d.locks("*").await.unwrap();
    assert!(all.iter().any(|s| s.name == "elsewhere"), "{all:?}");
    assert!(
        !d.locks("survey-*")
            .await
            .unwrap()
            .iter()
            .any(|s| s.name == "elsewhere")
    );

    // The first waiter listed is the one the release hands the lock to.
    assert!(guard.release().await.unwrap());
    let next = first.await.unwrap().unwrap();
    let now = eventually(Duration::from_secs(10), || async {
        listed(&d, LockKind::Lock, "survey-lock")
            .await
            .is_some_and(|s| s.holders.len() == 1 && s.holders[0].token == waiting.waiters[0].token)
    })
    .await;
    assert!(now, "the first waiter listed is not the next holder");
    assert!(next.release().await.unwrap());
    assert!(second.await.unwrap().unwrap().release().await.unwrap());
    assert!(permit.release().await.unwrap() && read.release().await.unwrap());
    assert!(other.release().await.unwrap());
    let gone = eventually(Duration::from_secs(10), || async {
        d.locks("survey-*").await.unwrap().is_empty()
    })
    .await;
    assert!(
        gone,
        "released locks are still listed: {:?}",
        d.locks("*").await
    );
}

/// A forced release from another client ends a holder's hold and hands
/// the lock to the waiter, with a greater fence; the old holder learns it
/// lost the lock, and its own release says it no longer held it.
pub async fn a_forced_release_hands_on_and_the_holder_learns(env: Env) {
    let (a, b, operator) = (env.client().await, env.client().await, env.client().await);
    // Renewed by the watchdog: it is the renewal that finds the lock gone.
    let stuck = a
        .lock("survey-stuck")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let lost = stuck.lost();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("survey-stuck")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&operator, LockKind::Lock, "survey-stuck")
            .await
            .is_some_and(|s| s.waiters.len() == 1)
    })
    .await;
    assert!(queued, "the waiter was never listed");

    let forced = operator
        .force_release(LockKind::Lock, "survey-stuck")
        .await
        .unwrap();
    assert_eq!(forced.evicted.len(), 1, "{forced:?}");
    assert!(
        forced.latest_fence >= Some(stuck.fencing_token()),
        "{forced:?}"
    );
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > stuck.fencing_token());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("the evicted holder never learned it lost the lock");
    assert!(
        !stuck.release().await.unwrap(),
        "the evicted holder still released it"
    );
    assert!(next.is_held());

    // Nobody holds a free lock: nothing to evict.
    assert!(next.release().await.unwrap());
    let free = eventually(Duration::from_secs(10), || async {
        listed(&operator, LockKind::Lock, "survey-stuck")
            .await
            .is_none()
    })
    .await;
    assert!(free);
    let none = operator
        .force_release(LockKind::Lock, "survey-stuck")
        .await
        .unwrap();
    assert!(none.evicted.is_empty(), "{none:?}");
    let sem = operator
        .force_release(LockKind::Semaphore, "survey-sem")
        .await;
    assert!(sem.unwrap_err().is_invalid_input());
    assert!(
        operator
            .force_release(LockKind::Lock, "")
            .await
            .unwrap_err()
            .is_invalid_input()
    );
}

/// A forced release of a read-write lock ends every reader's hold, and
/// the writer waiting behind them takes it.
pub async fn a_forced_release_ends_every_reader(env: Env) {
    let (a, b, operator) = (env.client().await, env.client().await, env.client().await);
    let lease = Duration::from_secs(20);
    let r1 = a
        .rw_lock("survey-doc")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let r2 = b
        .rw_lock("survey-doc")
        .read()
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            b.rw_lock("survey-doc")
                .write()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&operator, LockKind::ReadWrite, "survey-doc")
            .await
            .is_some_and(|s| s.waiters.len() == 1 && s.waiters[0].mode == Some(RwMode::Write))
    })
    .await;
    assert!(queued, "the waiting writer was never listed");
    let forced = operator
        .force_release(LockKind::ReadWrite, "survey-doc")
        .await
        .unwrap();
    assert_eq!(forced.evicted.len(), 2, "{forced:?}");
    let w = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer was not handed the lock")
        .unwrap()
        .unwrap();
    assert!(w.fencing_token() > r1.fencing_token() && w.fencing_token() > r2.fencing_token());
    assert!(!r1.release().await.unwrap() && !r2.release().await.unwrap());
    assert!(w.release().await.unwrap());
}

/// Each holder is listed with the fencing token it drew, where the store
/// keeps one per holder: a semaphore's permits (its permits beyond its
/// holders waiting), a read-write lock's readers, a multi-lock's keys. A
/// forced release by the holder's own client ends its hold too.
pub async fn each_holder_is_listed_with_the_fence_it_drew(env: Env) {
    let (a, b, operator) = (env.client().await, env.client().await, env.client().await);
    let lease = Duration::from_secs(20);
    let sem = move |lg: &Client| lg.semaphore("survey-t:sem", 2).lease(lease);
    let (p1, p2) = (
        sem(&a).try_acquire().await.unwrap(),
        sem(&b).try_acquire().await.unwrap(),
    );
    let third = tokio::spawn({
        let b = b.clone();
        async move { sem(&b).wait(Duration::from_secs(30)).acquire().await }
    });
    let (r1, r2) = (
        a.rw_lock("survey-t:doc")
            .read()
            .lease(lease)
            .try_acquire()
            .await
            .unwrap(),
        b.rw_lock("survey-t:doc")
            .read()
            .lease(lease)
            .try_acquire()
            .await
            .unwrap(),
    );
    let both = a
        .multi_lock(["survey-t:x", "survey-t:y"])
        .lease(lease)
        .try_acquire()
        .await
        .unwrap();
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&operator, LockKind::Semaphore, "survey-t:sem")
            .await
            .is_some_and(|s| s.waiters.len() == 1)
    })
    .await;
    assert!(queued, "the third permit's waiter was never listed");
    let all = operator.locks("survey-t:*").await.unwrap();
    let of = |kind, name: &str| {
        all.iter()
            .find(|s| s.kind == kind && s.name == name)
            .unwrap_or_else(|| panic!("{name} is not listed: {all:?}"))
    };
    // Each holder's fence as listed (none where the store keeps none per
    // holder), against the fences drawn.
    let agrees = |kind, name: &str, mut drawn: Vec<u64>| {
        let state = of(kind, name);
        let mut listed: Vec<Option<u64>> = state
            .holders
            .iter()
            .map(|h| h.fence.map(|f| f.get()))
            .collect();
        assert_eq!(listed.len(), drawn.len(), "{state:?}");
        assert!(
            state.latest_fence.map(|f| f.get()) >= drawn.iter().max().copied(),
            "{state:?}"
        );
        if listed.iter().all(Option::is_some) {
            listed.sort_unstable();
            drawn.sort_unstable();
            assert_eq!(
                listed,
                drawn.into_iter().map(Some).collect::<Vec<_>>(),
                "{state:?}"
            );
        } else {
            assert!(listed.iter().all(Option::is_none), "{state:?}");
        }
    };
    agrees(
        LockKind::Semaphore,
        "survey-t:sem",
        vec![p1.fencing_token().get(), p2.fencing_token().get()],
    );
    agrees(
        LockKind::ReadWrite,
        "survey-t:doc",
        vec![r1.fencing_token().get(), r2.fencing_token().get()],
    );
    let readers = &of(LockKind::ReadWrite, "survey-t:doc").holders;
    assert!(readers.iter().all(|h| h.mode == Some(RwMode::Read)));
    for key in ["survey-t:x", "survey-t:y"] {
        agrees(
            LockKind::Lock,
            key,
            vec![both.fencing_token(key).unwrap().get()],
        );
    }

    // The holder's own client forces the release of one of its keys.
    let forced = a.force_release(LockKind::Lock, "survey-t:x").await.unwrap();
    assert_eq!(forced.evicted.len(), 1, "{forced:?}");
    let mut guards = both.into_guards().into_iter();
    let (x, y) = (guards.next().unwrap(), guards.next().unwrap());
    assert!(!x.release().await.unwrap());

    assert!(p1.release().await.unwrap());
    let p3 = third.await.unwrap().unwrap();
    assert!(p3.fencing_token() > p2.fencing_token());
    for released in [p2.release().await, p3.release().await] {
        assert!(released.unwrap());
    }
    assert!(r1.release().await.unwrap() && r2.release().await.unwrap());
    assert!(y.release().await.unwrap());
}

/// A lock released before its `at_least` passed stays taken for the rest
/// of that time, by nobody's live hold: it is listed held, with the fence
/// of the hold that kept it, and a forced release hands it at once to the
/// waiter that would otherwise wait the kept time out.
pub async fn a_kept_lock_is_listed_and_forced_to_its_waiter(env: Env) {
    let (a, b, d) = (env.client().await, env.client().await, env.client().await);
    // Within the longest lease every store's client keeps.
    let keep = Duration::from_secs(30);
    let job = a
        .lock("survey-kept")
        .at_least(keep)
        .try_acquire()
        .await
        .unwrap();
    let fence = job.fencing_token();
    assert!(job.release().await.unwrap());

    let kept = listed(&d, LockKind::Lock, "survey-kept")
        .await
        .expect("a kept lock is listed");
    assert_eq!(kept.holders.len(), 1, "{kept:?}");
    let holder = kept.holders[0];
    assert!(holder.fence.is_none_or(|f| f == fence), "{kept:?}");
    if let Some(left) = holder.lease_left {
        assert!(left > Duration::from_secs(15) && left <= keep, "{left:?}");
    }

    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let asked = tokio::time::Instant::now();
            let guard = b
                .lock("survey-kept")
                .wait(Duration::from_secs(60))
                .acquire()
                .await;
            (guard, asked.elapsed())
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        listed(&d, LockKind::Lock, "survey-kept")
            .await
            .is_some_and(|s| s.waiters.len() == 1)
    })
    .await;
    assert!(queued, "the waiter was never listed");
    let still = listed(&d, LockKind::Lock, "survey-kept").await.unwrap();
    assert_eq!(
        still.holders.len(),
        1,
        "the kept hold still holds: {still:?}"
    );
    assert_eq!(still.holders[0].token, holder.token, "{still:?}");

    let forced = d
        .force_release(LockKind::Lock, "survey-kept")
        .await
        .expect("a forced release of a kept lock");
    assert_eq!(forced.evicted.len(), 1, "{forced:?}");
    assert_eq!(forced.evicted[0].token, holder.token, "{forced:?}");
    let (guard, waited) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter took the forced lock well before the kept time")
        .unwrap();
    let guard = guard.expect("the waiter takes the forced lock");
    assert!(
        waited < Duration::from_secs(20),
        "the waiter waited {waited:?}, as long as the kept time"
    );
    assert!(guard.fencing_token() > fence);
    assert!(guard.release().await.unwrap());
}
