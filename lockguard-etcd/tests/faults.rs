//! The etcd store against real servers under faults: a member killed and
//! restarted, a member paused past a holder's lease TTL, the leader of a
//! three-member cluster killed while a holder holds and clients wait,
//! client processes killed while they hold (a lock, a multi-lock, a
//! read-write lock's write, an election's lead) or wait, a waiter process
//! paused past the lease of a lock handed to it, and a writer, a
//! multi-lock and a leader paused past their lease.
//!
//! Every test's name starts with `etcd`, so that `cargo test etcd` picks
//! every test here.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Builder, Client};
use lockguard_etcd::BuilderExt as _;
use lockguard_etcd::testing::{EtcdCluster, EtcdServer};
use lockguard_testing::ChildProcess;
use lockguard_testing::conformance::eventually;
use lockguard_testing::faults::{
    Holding, Kill, PausePlan, a_failed_keep_outlives_its_client,
    a_kill_fails_fast_and_a_restart_is_recovered, a_killed_holder_is_replaced,
    a_killed_waiter_delays_the_queue_by_less_than, a_lost_keep_outlives_its_client,
    a_pause_takes_the_leaders_lease, a_pause_takes_the_multi_locks_lease,
    a_pause_takes_the_writers_lease, a_paused_waiter_never_holds_a_grant_it_slept_through,
    a_wait_rides_out_a_pause_longer_than_its_lease, an_observer_follows_again_after_a_restart,
    hold_until_killed, takes_lock_within, the_next_holder_fences_out_the_old,
};

/// The lease TTL of a client whose loss the tests provoke: etcd's least
/// with the harness's election timeout.
const SHORT_TTL: Duration = Duration::from_secs(1);

/// A client of `b`'s settings whose etcd lease has `ttl`.
async fn connect(endpoints: &str, b: Builder, ttl: Duration) -> Client {
    b.connect_timeout(Duration::from_secs(5))
        .etcd_lease_ttl(ttl)
        .connect_etcd(endpoints)
        .await
        .expect("connect to etcd")
}

/// One member, and a client of the default settings on it whose lease
/// outlasts the test.
async fn member_and_client() -> (EtcdServer, Client) {
    let server = EtcdServer::start();
    let lg = connect(
        &server.endpoint(),
        Client::builder(),
        Duration::from_secs(30),
    )
    .await;
    (server, lg)
}

/// Killed, the member makes operations fail fast as unavailable (or timed
/// out); restarted on its data, the same client recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_fails_fast_and_the_client_recovers_after_restart() {
    let mut server = EtcdServer::start();
    let timeout = Duration::from_millis(300);
    let lg = connect(
        &server.endpoint(),
        Client::builder().response_timeout(timeout),
        Duration::from_secs(30),
    )
    .await;
    a_kill_fails_fast_and_a_restart_is_recovered(&mut server, &lg, timeout, |e| {
        e.is_unavailable() || e.is_timeout()
    })
    .await;
}

/// `a` holds a lock under a watchdog lease (two thirds of its 1 s lease
/// TTL) when the member freezes for three times the TTL: the loss is
/// signalled before the TTL ends. After the pause etcd expires `a`'s lease,
/// `b` acquires with a greater fencing token, a write fenced with `a`'s old
/// token is rejected, and `a` takes locks again by itself, under a new
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_past_the_lease_ttl_takes_the_lease_and_the_fence() {
    let mut server = EtcdServer::start();
    let a = connect(
        &server.endpoint(),
        Client::builder().response_timeout(Duration::from_millis(200)),
        SHORT_TTL,
    )
    .await;
    let b = connect(
        &server.endpoint(),
        Client::builder(),
        Duration::from_secs(30),
    )
    .await;

    let first = a.lock("paused").acquire().await.unwrap();
    let acquired_at = Instant::now();
    let lost = first.lost();
    server.pause();
    let err = tokio::time::timeout(SHORT_TTL * 2, lost)
        .await
        .expect("loss not signalled within the TTL");
    let signalled = acquired_at.elapsed();
    assert!(err.is_lease_lost(), "{err}");
    assert!(
        signalled < SHORT_TTL,
        "loss signalled after {signalled:?}, past the lease TTL"
    );
    assert!(!first.is_held());
    tokio::time::sleep(SHORT_TTL * 2).await;
    server.resume();

    the_next_holder_fences_out_the_old(&b, &b, first, Duration::from_secs(20)).await;

    let recovered = takes_lock_within(&a, "paused", Duration::from_secs(15), |e| {
        e.is_unavailable() || e.is_timeout() || e.is_busy()
    })
    .await;
    assert!(recovered, "the paused client did not recover");
}

/// A lock taken with `at_least` is released while its member is paused,
/// so its keep (the key moved to a lease of its own) fails, and its client
/// closes at once. The member resumes: the lock stays taken until its
/// `at_least` has passed (the closing client's lease is left to run out,
/// not revoked, while a lock kept on it may still be kept), and is taken
/// after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_lock_whose_keep_failed_stays_kept_after_its_client_closes() {
    let mut server = EtcdServer::start();
    let (holder, other) = keeper_and_other(&server).await;
    a_failed_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// As above, with the keep lost: the server is killed while paused, so the
/// keep sent into it is never read, and restarted on its data, where the
/// closing client's lease lives on (its TTL begins again with the new
/// leader): left to run out, not revoked, it keeps the lock until its
/// `at_least` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_lock_whose_keep_was_lost_stays_kept_after_its_client_closes() {
    let mut server = EtcdServer::start();
    let (holder, other) = keeper_and_other(&server).await;
    a_lost_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// For the two scenarios above: a holder that gives up on a request after
/// 300 ms, on a lease TTL that allows their fixed leases (up to 6 s), and
/// another client, of `server`.
async fn keeper_and_other(server: &EtcdServer) -> (Client, Client) {
    let holder = connect(
        &server.endpoint(),
        Client::builder().response_timeout(Duration::from_millis(300)),
        Duration::from_secs(9),
    )
    .await;
    let other = connect(
        &server.endpoint(),
        Client::builder(),
        Duration::from_secs(30),
    )
    .await;
    (holder, other)
}

/// A three-member cluster loses its leader while a holder holds and three
/// clients wait: every client moves to another member, the holder keeps
/// its lock through the election (never held twice), and the waiters are
/// served one at a time, in their order, with increasing fencing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_while_clients_wait() {
    let mut cluster = EtcdCluster::start(3);
    let endpoints = cluster.endpoints();
    let holder = connect(&endpoints, Client::builder(), Duration::from_secs(30)).await;
    let guard = holder.lock("election").acquire().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3u64 {
        let lg = connect(&endpoints, Client::builder(), Duration::from_secs(10)).await;
        let (inside, order) = (inside.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = lg
                .lock("election")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a waiter is served after the election");
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            order.lock().unwrap().push((i, g.fencing_token()));
            tokio::time::sleep(Duration::from_millis(50)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            assert!(g.release().await.unwrap());
        }));
        // Each waiter queues before the next one starts.
        let queued = eventually(Duration::from_secs(10), || {
            let holder = holder.clone();
            async move { holder.lock("election").inspect().await.unwrap().waiters == i + 1 }
        })
        .await;
        assert!(queued, "waiter {i} did not queue");
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    let killed = Instant::now();
    lockguard_testing::ServerProcess::kill(cluster.member_mut(leader));
    let new_leader = cluster.wait_for_leader(Duration::from_secs(30));
    println!("a new leader after {:?}", killed.elapsed());
    assert_ne!(new_leader, leader);
    // A renewal after the election: the holder's key survived it.
    let renewed = eventually(Duration::from_secs(10), || {
        let guard = &guard;
        async move { guard.extend(Duration::from_secs(5)).await.is_ok() }
    })
    .await;
    assert!(renewed, "the holder's lock did not survive the election");
    assert!(guard.is_held(), "the holder lost its lock in the election");
    assert_eq!(inside.load(Ordering::SeqCst), 0, "a waiter got in");
    assert!(guard.release().await.unwrap());
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("a waiter was never served")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    let served: Vec<_> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(served, [0, 1, 2], "waiters served out of order");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
}

/// An election's observer follows the member's changes again after the
/// member is killed and restarted, and sees the leader elected then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_observer_follows_again_after_a_restart() {
    let mut server = EtcdServer::start();
    let b = || Client::builder().response_timeout(Duration::from_millis(500));
    let observing = connect(&server.endpoint(), b(), Duration::from_secs(30)).await;
    let lg = connect(&server.endpoint(), b(), Duration::from_secs(30)).await;
    an_observer_follows_again_after_a_restart(&mut server, &observing, &lg).await;
}

/// The member is down when a client asks for a lock with a 30 s wait, and
/// comes back (restarted on its data) a few seconds later: the wait rides
/// out the outage and acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_wait_rides_out_a_server_restart() {
    let mut server = EtcdServer::start();
    let lg = connect(
        &server.endpoint(),
        Client::builder().response_timeout(Duration::from_millis(500)),
        Duration::from_secs(30),
    )
    .await;
    lockguard_testing::ServerProcess::kill(&mut server);
    let waiting = tokio::spawn({
        let lg = lg.clone();
        async move {
            lg.lock("restart")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| lockguard_testing::ServerProcess::restart(&mut server));
    let guard = waiting
        .await
        .unwrap()
        .expect("the wait rides out the restart");
    assert!(guard.release().await.unwrap());
}

/// A wait across a 1.2 s pause, longer than the 400 ms lease it asks for,
/// takes the lock within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_wait_rides_out_a_pause_longer_than_its_lease() {
    let mut server = EtcdServer::start();
    let ttl = Duration::from_secs(30);
    let holder = connect(&server.endpoint(), Client::builder(), ttl).await;
    let waiter = connect(&server.endpoint(), Client::builder(), ttl).await;
    a_wait_rides_out_a_pause_longer_than_its_lease(&mut server, &holder, &waiter).await;
}

/// The holder's client, with a 1 s lease TTL and a short response timeout,
/// and the next holder's, with a lease that outlives the pause.
async fn paused_clients(server: &EtcdServer) -> (Client, Client) {
    let a = connect(
        &server.endpoint(),
        Client::builder().response_timeout(Duration::from_millis(200)),
        SHORT_TTL,
    )
    .await;
    let b = connect(
        &server.endpoint(),
        Client::builder(),
        Duration::from_secs(30),
    )
    .await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_past_a_writers_lease_takes_its_lease_and_its_fence() {
    let mut server = EtcdServer::start();
    let (a, b) = paused_clients(&server).await;
    a_pause_takes_the_writers_lease(&mut server, PausePlan::session(SHORT_TTL), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_past_a_multi_locks_lease_takes_its_lease_and_its_fences() {
    let mut server = EtcdServer::start();
    let (a, b) = paused_clients(&server).await;
    a_pause_takes_the_multi_locks_lease(&mut server, PausePlan::session(SHORT_TTL), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_past_a_leaders_lease_takes_its_lease_and_its_term() {
    let mut server = EtcdServer::start();
    let (a, b) = paused_clients(&server).await;
    a_pause_takes_the_leaders_lease(&mut server, PausePlan::session(SHORT_TTL), &a, &b).await;
}

/// Set to `ROLE ENDPOINTS`, makes `etcd_child` act as a client process:
/// `hold` or `wait` for the lock "victim".
const CHILD_ENV: &str = "LOCKGUARD_ETCD_CHILD";

/// The child half of the process tests below, run only in the child
/// process they start (which sets `LOCKGUARD_ETCD_CHILD`): it holds, or
/// waits for, the lock "victim" with a lease TTL of 1 s, says so on its
/// standard output, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the etcd process tests"]
async fn etcd_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (role, endpoints) = spec.split_once(' ').expect("role and endpoints");
    let lg = connect(endpoints, Client::builder(), SHORT_TTL).await;
    match role {
        "hold" => {
            let guard = lg.lock("victim").acquire().await.expect("the child holds");
            println!("held {}", guard.fencing_token());
            tokio::time::sleep(Duration::from_secs(60)).await;
            panic!("the holding child was not killed");
        }
        _ => {
            println!("waiting");
            let outcome = lg
                .lock("victim")
                .wait(Duration::from_secs(60))
                .acquire()
                .await;
            panic!("the waiting child was not killed while queued: {outcome:?}");
        }
    }
}

/// The child of the fault kit's process scenarios below, run only in the
/// process they start: a client with a lease TTL of 1 s, its locks' lease
/// (fixed, or the watchdog's) two thirds of it at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the kit's process tests"]
async fn etcd_kit_child() {
    hold_until_killed(KIT_LEASE, async |endpoints| {
        Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .etcd_lease_ttl(SHORT_TTL)
            .connect_etcd(endpoints)
            .await
    })
    .await;
}

/// The lease of [`etcd_kit_child`]'s holds.
const KIT_LEASE: Duration = Duration::from_millis(600);

/// The kit's scenario: what a killed process held (a multi-lock, a
/// read-write lock's write, an election's lead) is freed when etcd expires
/// its 1 s lease (within 4 s of the kill, for a loaded machine), to the
/// waiters in this process, with greater tokens, and never while the child
/// lived.
async fn killed(holding: Holding) {
    let (server, lg) = member_and_client().await;
    let kill = Kill::new("etcd_kit_child", &server.endpoint(), KIT_LEASE)
        .served_within(Duration::from_secs(4));
    a_killed_holder_is_replaced(holding, kill, &lg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_multi_lock_holder_frees_every_key_with_its_lease() {
    killed(Holding::MultiLock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_writer_process_frees_the_read_write_lock_with_its_lease() {
    killed(Holding::Writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_leader_process_is_replaced_with_its_lease() {
    killed(Holding::Leader).await;
}

/// The kit's scenario: a waiter process frozen while the lock is handed to
/// it (its key heads the queue), past its 1 s lease: resumed, it does not
/// hold the lock while another does (etcd expired its lease, and its key
/// with it); it gets it after, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_paused_waiter_never_holds_a_grant_it_slept_through() {
    let (server, lg) = member_and_client().await;
    let kill = Kill::new("etcd_kit_child", &server.endpoint(), KIT_LEASE);
    a_paused_waiter_never_holds_a_grant_it_slept_through(kill, &lg).await;
}

/// This test binary run again as `etcd_child`, holding or waiting.
fn child_client(role: &str, endpoints: &str) -> ChildProcess {
    ChildProcess::spawn("etcd_child", (CHILD_ENV, &format!("{role} {endpoints}")))
}

/// A holder process killed with SIGKILL frees the lock when etcd expires
/// its 1 s lease: a waiter in this process, woken by the key's deletion,
/// takes it with a greater fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_holder_process_frees_the_lock_with_its_lease() {
    let server = EtcdServer::start();
    let endpoints = server.endpoint();
    let mut child = child_client("hold", &endpoints);
    let held = child.expect("held");
    let old_fence: u64 = held
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("the child's fencing token");
    let lg = connect(&endpoints, Client::builder(), Duration::from_secs(30)).await;
    let busy = lg.lock("victim").try_acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    child.kill();
    let killed = Instant::now();
    let guard = lg
        .lock("victim")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the lock is freed when the dead holder's lease expires");
    let freed_after = killed.elapsed();
    println!("the dead holder's lock was taken {freed_after:?} after the kill");
    assert!(freed_after < Duration::from_secs(4), "{freed_after:?}");
    assert!(guard.fencing_token().get() > old_fence);
    assert!(guard.release().await.unwrap());
}

/// A waiter process killed with SIGKILL while first in the queue leaves it
/// when etcd expires its 1 s lease: the waiter behind it is served within
/// that (plus slack), never after the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_waiter_process_leaves_the_queue_with_its_lease() {
    let server = EtcdServer::start();
    let endpoints = server.endpoint();
    let holder = connect(&endpoints, Client::builder(), Duration::from_secs(30)).await;
    let guard = holder.lock("victim").acquire().await.unwrap();
    let mut child = child_client("wait", &endpoints);
    child.expect("waiting");
    let second = connect(&endpoints, Client::builder(), Duration::from_secs(30)).await;
    let bound = SHORT_TTL + Duration::from_secs(2);
    a_killed_waiter_delays_the_queue_by_less_than(&holder, guard, child, second, bound).await;
}

/// The waiter's connections are cut (a proxy or a load balancer closing
/// them) while it waits, several times: each time its client reconnects,
/// watches again, and is woken by the next release at once, never by its
/// refresh (a `patient` client refreshes 10 s apart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cut_connections_keep_wake_ups() {
    let server = EtcdServer::start();
    let relay = lockguard_testing::Relay::start(server.port());
    let holder = connect(
        &server.endpoint(),
        Client::builder(),
        Duration::from_secs(30),
    )
    .await;
    let waiter = connect(
        &format!("127.0.0.1:{}", relay.port()),
        lockguard_testing::faults::patient(),
        Duration::from_secs(30),
    )
    .await;
    for round in 0..3 {
        let name = format!("cut-{round}");
        let held = holder.lock(&name).acquire().await.unwrap();
        let w = waiter.clone();
        let n = name.clone();
        let waiting = tokio::spawn(async move {
            let g = w
                .lock(&n)
                .wait(Duration::from_secs(25))
                .acquire()
                .await
                .expect("the waiter acquires");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        });
        let queued = eventually(Duration::from_secs(10), || async {
            holder.lock(&name).inspect().await.unwrap().waiters == 1
        })
        .await;
        assert!(queued, "round {round}: the waiter never queued");
        relay.reset();
        // Time for the client to see its connection gone and watch again.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = Instant::now();
        assert!(held.release().await.unwrap());
        let at = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("the waiter was not served")
            .unwrap();
        let waited = at - released;
        println!("round {round}: the waiter held the lock {waited:?} after the release");
        assert!(
            waited < Duration::from_secs(2),
            "round {round}: woken by its refresh, not the release: {waited:?}"
        );
    }
}

/// A request that created a waiter's key but went unanswered (the member
/// froze with it) may be applied late, after the client took the lock by
/// another attempt and released it: the key would stay in the queue, on
/// the client's live lease, ahead of every waiter. The client looks for
/// such a key after its release and deletes it. (The late creation is
/// made here by the test, with the client's key name and lease: which of
/// the waiter's requests etcd applies late is a matter of timing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_key_created_late_by_an_unanswered_request_is_deleted() {
    late_key_is_deleted(Duration::from_secs(30), Duration::ZERO, Duration::ZERO).await;
}

/// The same for a hold kept past its release (`at_least`): the kept key
/// has the hold's name, so the client looks for a late one once the kept
/// key is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_key_created_late_after_a_kept_release_is_deleted() {
    late_key_is_deleted(
        Duration::from_secs(30),
        Duration::ZERO,
        Duration::from_secs(1),
    )
    .await;
}

/// The same, with the key created again long after the release: past the
/// lease's TTL, over which the client reads the key's name, it finds the
/// key among its lease's keys (a third of the TTL apart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_key_created_long_after_its_release_is_found_on_the_lease() {
    late_key_is_deleted(
        Duration::from_secs(3),
        Duration::from_secs(4),
        Duration::ZERO,
    )
    .await;
}

/// A waiter's join goes unanswered; it takes the lock by another attempt
/// (kept `at_least` past its release, when not zero) and releases it;
/// `late` after its key is gone, it is created again, on its lease
/// (`ttl`): the next waiter must take the lock all the same.
async fn late_key_is_deleted(ttl: Duration, late: Duration, at_least: Duration) {
    use lockguard_etcd::etcd_client::{GetOptions, PutOptions};
    let mut server = EtcdServer::start();
    let a = connect(
        &server.endpoint(),
        Client::builder().response_timeout(Duration::from_millis(200)),
        ttl,
    )
    .await;
    let b = connect(&server.endpoint(), Client::builder(), ttl).await;
    let held = b.lock("late").acquire().await.unwrap();
    // `a` waits; its first request to join the queue goes unanswered.
    server.pause();
    let waiting = tokio::spawn({
        let a = a.clone();
        async move {
            a.lock("late")
                .lease(Duration::from_secs(1))
                .at_least(at_least)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    server.resume();
    assert!(held.release().await.unwrap());
    let guard = waiting.await.unwrap().expect("a takes the lock");
    // Its key's name and lease, as etcd has them.
    let mut raw = lockguard_etcd::etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let listed = raw
        .get("/lockguard/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let mine: Vec<_> = listed
        .kvs()
        .iter()
        .filter(|kv| kv.key_str().is_ok_and(|k| k.contains("late")))
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec(), kv.lease()))
        .collect();
    assert_eq!(mine.len(), 1, "the holder's key alone: {mine:?}");
    let (key, value, lease) = mine[0].clone();
    assert!(guard.release().await.unwrap());
    // A kept hold's key goes when `at_least` has passed.
    let gone_by = tokio::time::Instant::now() + at_least + Duration::from_secs(5);
    while raw.get(key.clone(), None).await.unwrap().count() > 0 {
        assert!(
            tokio::time::Instant::now() < gone_by,
            "the kept key outlived its at_least"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(late).await;
    // The late creation, after the release.
    raw.put(key, value, Some(PutOptions::new().with_lease(lease)))
        .await
        .unwrap();
    let next = b
        .lock("late")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the late key is deleted, and the next waiter takes the lock");
    assert!(next.release().await.unwrap());
    drop(a);
}

/// A lock taken again and again by one client writes the same key name,
/// its lease's and a slot's, so that etcd's index does not fill with
/// deleted keys that every read of the lock's prefix visits until a
/// compaction; two acquisitions of one client at once (a holder and a
/// waiter, a semaphore's permits) each have a slot of their own, and a
/// freed slot is used again. Each key's value names its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_lock_taken_again_and_again_writes_the_same_key() {
    let (server, lg) = member_and_client().await;
    let raw = lockguard_etcd::etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let listed = |name: &str| queue_keys(raw.clone(), format!(":{{{name}}}/"));
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let held = lg.lock("again").try_acquire().await.unwrap();
        let keys = listed("again").await;
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(
            keys[0].1.starts_with("l "),
            "a lock's mark, then its token: {keys:?}"
        );
        names.insert(keys[0].0.clone());
        assert!(held.release().await.unwrap());
    }
    assert_eq!(names.len(), 1, "one name for every acquisition: {names:?}");
    let name = names.pop_first().unwrap();
    assert!(name.ends_with(".0"), "{name}");
    // A waiter of the same client beside its holder: another slot.
    let held = lg.lock("again").try_acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lg = lg.clone();
        async move {
            lg.lock("again")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            listed("again").await.len() == 2
        })
        .await,
        "the waiter never queued"
    );
    let mut both: Vec<String> = listed("again").await.into_iter().map(|(n, _)| n).collect();
    both.sort();
    assert_eq!(both, [name.clone(), name.replace(".0", ".1")]);
    assert!(held.release().await.unwrap());
    let next = waiting.await.unwrap().unwrap();
    assert!(next.release().await.unwrap());
    // Both slots free again: the next acquisition takes the first.
    let held = lg.lock("again").try_acquire().await.unwrap();
    let keys = listed("again").await;
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].0, name);
    assert!(held.release().await.unwrap());
    // A semaphore's permits, one slot each.
    let permits = [
        lg.semaphore("again-permits", 3)
            .try_acquire()
            .await
            .unwrap(),
        lg.semaphore("again-permits", 3)
            .try_acquire()
            .await
            .unwrap(),
    ];
    let mut slots: Vec<String> = listed("again-permits")
        .await
        .into_iter()
        .map(|(n, _)| n.rsplit_once('.').unwrap().1.to_owned())
        .collect();
    slots.sort();
    assert_eq!(slots, ["0", "1"]);
    for p in permits {
        assert!(p.release().await.unwrap());
    }
}

/// The keys of a lock's queue, whose path holds `dir` (`:{name}/`): each
/// one's last path segment and its value.
async fn queue_keys(
    mut raw: lockguard_etcd::etcd_client::Client,
    dir: String,
) -> Vec<(String, String)> {
    use lockguard_etcd::etcd_client::GetOptions;
    raw.get("/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap()
        .kvs()
        .iter()
        .filter(|kv| kv.key_str().is_ok_and(|k| k.contains(&dir)))
        .map(|kv| {
            let key = kv.key_str().unwrap();
            let name = key.rsplit_once('/').unwrap().1.to_owned();
            (name, kv.value_str().unwrap().to_owned())
        })
        .collect()
}
