//! Leader election: one leader at a time with terms that increase,
//! candidates served in arrival order, who leads as readers see it, an old
//! leader that cannot erase a newer one's announcement, a leader whose
//! lease ran out replaced and told, and bad input.
//!
//! On a store without fenced values (Redlock) the election announces on
//! the harness's [`data_client`](super::Harness::data_client)
//! ([`Leader::announce_on`]); on a store that cannot inspect its locks
//! (Redlock) what only an inspection tells (nobody leads after a lease
//! ran out, the queue's length) is not checked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, FencingToken, Leader, LeaderInfo, MAX_IDENTITY_LEN};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;

use super::queue::join_all;
use super::{Env, eventually};

/// The election `name` on `lg`, announced on the store under test, or on
/// the harness's data client where `lg`'s store keeps no fenced values.
async fn election(env: &Env, lg: &Client, name: &str) -> Leader {
    let leader = lg.leader(name);
    match lg.fenced("conformance:probe").read().await {
        Err(e) if e.is_unsupported() => leader.announce_on(&env.data_client().await),
        _ => leader,
    }
}

/// Whether the store inspects its locks (all but Redlock).
async fn inspects(leader: &Leader) -> bool {
    match leader.inspect().await {
        Ok(_) => true,
        Err(e) if e.is_unsupported() => false,
        Err(e) => panic!("inspecting the election: {e}"),
    }
}

/// Who leads, as a client of its own reads it.
async fn current(env: &Env, name: &str) -> Option<LeaderInfo> {
    let lg = env.client().await;
    election(env, &lg, name)
        .await
        .current()
        .await
        .expect("read who leads")
}

fn info(identity: &str, term: FencingToken) -> Option<(Vec<u8>, FencingToken)> {
    Some((identity.as_bytes().to_vec(), term))
}

fn seen(now: Option<LeaderInfo>) -> Option<(Vec<u8>, FencingToken)> {
    now.map(|i| (i.identity, i.term))
}

/// Six candidates over three clients campaign five times each: never two
/// leaders at once (a non-atomic update inside loses nothing), every
/// leader reads itself as the leader with its own term, and the terms of
/// successive leaders strictly increase.
pub async fn one_leader_at_a_time_with_increasing_terms(env: Env) {
    const CLIENTS: usize = 3;
    const CANDIDATES: usize = 6;
    const ROUNDS: usize = 5;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(env.client().await);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for c in 0..CANDIDATES {
        let lg = clients[c % CLIENTS].clone();
        let (env, inside, terms) = (env.clone(), inside.clone(), terms.clone());
        let mut value = env.shared_value();
        tasks.spawn(async move {
            let me = format!("candidate-{c}");
            let leader = election(&env, &lg, "one")
                .await
                .identity(me.as_str())
                .wait(Duration::from_secs(60));
            for _ in 0..ROUNDS {
                let lead = leader.campaign().await.expect("campaign");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                terms.lock().await.push(lead.term());
                let now = leader.current().await.expect("current");
                assert_eq!(seen(now), info(&me, lead.term()), "the leader reads itself");
                value.racy_increment().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(lead.resign().await.expect("resign"), "lost the lead");
            }
        });
    }
    join_all(&mut tasks, Duration::from_secs(120)).await;
    assert_eq!(
        env.shared_value().get().await,
        (CANDIDATES * ROUNDS) as u64,
        "an update was lost: two leaders at once"
    );
    let terms = terms.lock().await;
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms did not increase: {terms:?}"
    );
}

/// Five candidates join one after another, each once the one before it is
/// queued, while a leader leads; as each resigns, the next to lead is the
/// next to have arrived.
pub async fn candidates_are_served_in_arrival_order(env: Env) {
    let lg = env.client().await;
    let first = election(&env, &lg, "fifo").await.identity("first");
    if !inspects(&first).await {
        // The queue is not watched where it cannot be inspected; the
        // lock's own line order is the queue group's.
        return;
    }
    let lead = first.campaign().await.expect("the first candidate leads");
    let (served_tx, mut served) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    const CANDIDATES: u64 = 5;
    for i in 0..CANDIDATES {
        let lg = env.client().await;
        let leader = election(&env, &lg, "fifo")
            .await
            .identity(format!("candidate-{i}"))
            .wait(Duration::from_secs(60));
        let served = served_tx.clone();
        tasks.spawn(async move {
            let lead = leader.campaign().await.expect("campaign");
            served.send(i).expect("the test listens");
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(lead.resign().await.expect("resign"), "lost the lead");
        });
        let queued = eventually(Duration::from_secs(10), || async {
            first.inspect().await.expect("inspect").waiters == i + 1
        })
        .await;
        assert!(queued, "candidate {i} never queued");
    }
    drop(served_tx);
    assert!(lead.resign().await.unwrap());
    join_all(&mut tasks, Duration::from_secs(60)).await;
    let mut order = Vec::new();
    while let Some(i) = served.recv().await {
        order.push(i);
    }
    assert_eq!(
        order,
        (0..CANDIDATES).collect::<Vec<_>>(),
        "not served in arrival order"
    );
}

/// Nobody leads before the first election; then every reader sees the
/// leader's identity and term, and nobody once it resigned; the next
/// leader is seen with a greater term; a dropped leadership is seen gone.
pub async fn current_names_the_leader_and_nobody_after_it_resigned(env: Env) {
    let lg = env.client().await;
    assert_eq!(
        current(&env, "who").await,
        None,
        "a leader before any election"
    );
    let a = election(&env, &lg, "who").await.identity("a:1");
    let lead = a.campaign().await.unwrap();
    assert_eq!(lead.identity(), b"a:1");
    assert!(lead.is_held());
    assert_eq!(seen(current(&env, "who").await), info("a:1", lead.term()));
    let first = lead.term();
    assert!(lead.resign().await.unwrap());
    assert_eq!(
        current(&env, "who").await,
        None,
        "a leader after it resigned"
    );

    let other = env.client().await;
    let b = election(&env, &other, "who").await.identity("b:2");
    let lead = b.campaign().await.unwrap();
    assert!(lead.term() > first, "the term did not increase");
    let now = current(&env, "who").await.unwrap();
    assert_eq!((now.identity_str(), now.term), (Some("b:2"), lead.term()));
    drop(lead);
    let gone = eventually(Duration::from_secs(10), || async {
        current(&env, "who").await.is_none()
    })
    .await;
    assert!(gone, "a dropped leadership is still seen leading");
}

/// A leader whose fixed lease runs out (as a process that died or paused)
/// is replaced by the candidate waiting; its `lost()` completes before the
/// successor is elected, the successor's term is greater, and readers see
/// the successor.
pub async fn a_leader_whose_lease_ran_out_is_replaced_and_told(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_millis(400);
    // The lease counts from no earlier than the campaign was sent.
    let started = Instant::now();
    let old = election(&env, &a, "lapse")
        .await
        .identity("old")
        .lease(lease)
        .campaign()
        .await
        .unwrap();
    let lost = old.lost();
    let new = election(&env, &b, "lapse")
        .await
        .identity("new")
        .wait(Duration::from_secs(10))
        .campaign()
        .await
        .expect("the waiting candidate is elected when the lease ends");
    // A tenth off for a store whose clock runs apart from this one.
    assert!(
        started.elapsed() >= lease * 9 / 10,
        "elected {:?} after the old leader campaigned, inside its lease of {lease:?}",
        started.elapsed()
    );
    assert!(new.term() > old.term());
    let err = tokio::time::timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() completed by the time the successor was elected");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!old.is_held());
    assert_eq!(seen(current(&env, "lapse").await), info("new", new.term()));
    assert!(new.resign().await.unwrap());
    drop(old);
}

/// A leader whose lease ran out resigns after its successor announced:
/// the resignation reports the lead was no longer held and the successor's
/// announcement stays. An old leader's lapse without a successor is seen
/// as nobody leading, where the store inspects its locks.
pub async fn an_old_leaders_resignation_keeps_the_newer_announcement(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let lease = Duration::from_millis(400);
    let old_election = election(&env, &a, "late")
        .await
        .identity("old")
        .lease(lease);
    let old = old_election.campaign().await.unwrap();
    if inspects(&old_election).await {
        let lapsed = eventually(Duration::from_secs(10), || async {
            current(&env, "late").await.is_none()
        })
        .await;
        assert!(lapsed, "a leader whose lease ran out is still seen leading");
    }
    let new = election(&env, &b, "late")
        .await
        .identity("new")
        .wait(Duration::from_secs(10))
        .campaign()
        .await
        .unwrap();
    assert!(!old.resign().await.unwrap(), "the old leader still led");
    assert_eq!(
        seen(current(&env, "late").await),
        info("new", new.term()),
        "the old leader's resignation erased the newer announcement"
    );
    assert!(new.resign().await.unwrap());
    assert_eq!(current(&env, "late").await, None);
}

/// An observer gives nobody, then each leader with its term, then its
/// proclaimed value, then nobody, in order (polling every 20 ms where the
/// store does not push).
pub async fn observe_gives_each_change(env: Env) {
    let lg = env.client().await;
    let mut observer = election(&env, &lg, "watched")
        .await
        .watch_interval(Duration::from_millis(20))
        .observe();
    assert_eq!(next(&mut observer).await, None);
    for who in ["a", "b"] {
        let lg = env.client().await;
        let lead = election(&env, &lg, "watched")
            .await
            .identity(who)
            .campaign()
            .await
            .unwrap();
        assert_eq!(seen(next(&mut observer).await), info(who, lead.term()));
        lead.proclaim(format!("{who}:8080")).await.unwrap();
        let now = next(&mut observer).await.expect("a leader");
        assert_eq!(
            (now.term, now.value_str()),
            (lead.term(), Some(&*format!("{who}:8080")))
        );
        assert!(lead.resign().await.unwrap());
        assert_eq!(next(&mut observer).await, None);
    }
}

/// Where the store pushes changes, an observer that would poll once an
/// hour sees a new leader, a proclamation, a resignation and a leader
/// whose lease ran out within seconds; where it does not, the observer
/// says it polls.
pub async fn observe_is_pushed_where_the_store_pushes(env: Env) {
    let lg = env.client().await;
    let mut observer = election(&env, &lg, "pushed")
        .await
        .watch_interval(Duration::from_secs(3600))
        .observe();
    assert_eq!(next(&mut observer).await, None);
    assert_eq!(
        observer.is_pushed(),
        env.store_pushes_changes(),
        "whether the store pushes changes to observers"
    );
    if !env.store_pushes_changes() {
        return;
    }
    let candidate = env.client().await;
    let lead = election(&env, &candidate, "pushed")
        .await
        .identity("a")
        .campaign()
        .await
        .unwrap();
    assert_eq!(seen(next(&mut observer).await), info("a", lead.term()));
    lead.proclaim("a:1").await.unwrap();
    assert_eq!(next(&mut observer).await.unwrap().value_str(), Some("a:1"));
    assert!(lead.resign().await.unwrap());
    assert_eq!(next(&mut observer).await, None);

    // A leader that stops renewing: its lease's end is pushed too.
    let lead = election(&env, &candidate, "pushed")
        .await
        .identity("b")
        .lease(Duration::from_millis(400))
        .campaign()
        .await
        .unwrap();
    assert_eq!(seen(next(&mut observer).await), info("b", lead.term()));
    assert_eq!(
        next(&mut observer).await,
        None,
        "the end of the leader's lease was not seen"
    );
    drop(lead);
}

/// A leader's proclaimed value is read with its term, replaced by its next
/// proclamation, gone with the next leader; a leader whose term ended
/// cannot proclaim over its successor; an oversized value is refused.
pub async fn a_proclaimed_value_is_read_with_its_term(env: Env) {
    let lg = env.client().await;
    let lead = election(&env, &lg, "proclaimed")
        .await
        .identity("a")
        .campaign()
        .await
        .unwrap();
    assert_eq!(current(&env, "proclaimed").await.unwrap().value, None);
    lead.proclaim("10.0.0.1:80").await.unwrap();
    lead.proclaim("10.0.0.2:80").await.unwrap();
    let now = current(&env, "proclaimed").await.unwrap();
    assert_eq!(
        (now.identity_str(), now.term, now.value_str()),
        (Some("a"), lead.term(), Some("10.0.0.2:80"))
    );
    let e = lead
        .proclaim(vec![0; lockguard_core::MAX_PROCLAIMED_LEN + 1])
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");

    // Its lease ends (a fixed lease, not renewed); the next leader's
    // announcement carries no value, and the old one cannot proclaim.
    let old = election(&env, &lg, "proclaimed")
        .await
        .identity("old")
        .lease(Duration::from_millis(400));
    assert!(lead.resign().await.unwrap());
    let old = old.campaign().await.unwrap();
    old.proclaim("old:1").await.unwrap();
    let other = env.client().await;
    let new = election(&env, &other, "proclaimed")
        .await
        .identity("new")
        .wait(Duration::from_secs(30))
        .campaign()
        .await
        .unwrap();
    assert!(new.term() > old.term());
    let now = current(&env, "proclaimed").await.unwrap();
    assert_eq!(
        (now.identity_str(), now.value.as_deref()),
        (Some("new"), None)
    );
    let e = old.proclaim("old:2").await.unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
    let now = current(&env, "proclaimed").await.unwrap();
    assert_eq!(
        (now.identity_str(), now.value.as_deref()),
        (Some("new"), None)
    );
    assert!(new.resign().await.unwrap());
}

/// The observer's next change, within 10 s.
async fn next(observer: &mut lockguard_core::LeaderObserver) -> Option<LeaderInfo> {
    tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("a change seen within 10 s")
        .expect("observe")
}

/// Empty or invalid names, oversized identities and absurd leases are
/// clear errors, before anything is sent.
pub async fn leader_bad_input(env: Env) {
    let lg = env.client().await;
    for name in ["", "a\nb"] {
        let e = lg.leader(name).campaign().await.unwrap_err();
        assert!(e.is_invalid_input(), "{name:?}: {e}");
        let e = lg.leader(name).current().await.unwrap_err();
        assert!(e.is_invalid_input(), "{name:?}: {e}");
    }
    let long = "x".repeat(lockguard_core::MAX_KEY_LEN + 1);
    assert!(
        lg.leader(&long)
            .campaign()
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    let e = lg
        .leader("ok")
        .identity(vec![0u8; MAX_IDENTITY_LEN + 1])
        .campaign()
        .await
        .unwrap_err();
    assert!(
        e.is_invalid_input() && e.message().contains("identity"),
        "{e}"
    );
    for lease in [
        Duration::ZERO,
        Duration::from_millis(1),
        lockguard_core::MAX_LEASE * 2,
    ] {
        let e = lg.leader("ok").lease(lease).campaign().await.unwrap_err();
        assert!(e.is_invalid_input(), "{lease:?}: {e}");
    }
    let e = lg
        .leader("ok")
        .watchdog(Duration::from_millis(1))
        .campaign()
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    // Nothing was elected by the refused campaigns.
    assert!(
        election(&env, &lg, "ok")
            .await
            .current()
            .await
            .unwrap()
            .is_none()
    );
}
