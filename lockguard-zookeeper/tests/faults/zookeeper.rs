//! ZooKeeper faults: a server killed and restarted, a server paused past a
//! holder's session, the leader of an ensemble killed while clients wait,
//! and client processes killed while they hold, wait or lead an election.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Builder, Client, Error, ErrorKind};
use lockguard_testing::{ZooKeeperEnsemble, ZooKeeperServer};
use lockguard_zookeeper::{BuilderExt as _, DEFAULT_ZOOKEEPER_SESSION_TIMEOUT};

use lockguard_testing::ChildProcess;
use lockguard_testing::conformance::eventually;
use lockguard_testing::faults::{
    Holding, Kill, a_failed_keep_outlives_its_client, a_kill_fails_fast_and_a_restart_is_recovered,
    a_killed_holder_is_replaced, a_killed_waiter_delays_the_queue_by_less_than,
    a_lost_keep_outlives_its_client, a_paused_waiter_never_holds_a_grant_it_slept_through,
    an_observer_follows_again_after_a_restart, at_least_outlives_the_process_that_took_it,
    hold_until_killed, takes_lock_within, the_next_holder_fences_out_the_old,
};

async fn connect(hosts: &str, b: Builder) -> Client {
    connect_in_session(hosts, b, DEFAULT_ZOOKEEPER_SESSION_TIMEOUT).await
}

/// A client of `b`'s settings whose session times out after `session`.
pub(crate) async fn connect_in_session(hosts: &str, b: Builder, session: Duration) -> Client {
    b.connect_timeout(Duration::from_secs(5))
        .zookeeper_session_timeout(session)
        .connect_zookeeper(hosts)
        .await
        .expect("connect to zookeeper")
}

/// Killed, the server makes operations fail fast as unavailable (or timed
/// out); restarted on its data, the same client recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_fails_fast_and_the_client_recovers_after_restart() {
    let mut server = ZooKeeperServer::start();
    let timeout = Duration::from_millis(300);
    let lg = connect(&server.hosts(), Client::builder().response_timeout(timeout)).await;
    a_kill_fails_fast_and_a_restart_is_recovered(&mut server, &lg, timeout, |e| {
        e.is_unavailable() || e.is_timeout()
    })
    .await;
}

/// An election's observer follows the server's changes again after the
/// server is killed and restarted, and sees the leader elected then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_an_observer_follows_again_after_a_restart() {
    let mut server = ZooKeeperServer::start();
    let b = || Client::builder().response_timeout(Duration::from_millis(500));
    let observing = connect(&server.hosts(), b()).await;
    let lg = connect(&server.hosts(), b()).await;
    an_observer_follows_again_after_a_restart(&mut server, &observing, &lg).await;
}

/// A lock taken with `at_least` is released while the server is paused,
/// so its keep (a persistent node that outlives the session) fails, and
/// its client closes at once. The server resumes: the lock stays taken
/// until its `at_least` has passed (the closing client's session, whose
/// close would delete the holder's node, stays open until then), and is
/// taken after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_lock_whose_keep_failed_stays_kept_after_its_client_closes() {
    let mut server = ZooKeeperServer::start();
    let (holder, other) = keeper_and_other(&server).await;
    a_failed_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// As above, with the keep lost: the server is killed while paused, so the
/// keep sent into it is never read, and restarted on its data, where the
/// closing client's session lives on. That client's close would delete
/// the holder's node: the session stays open until the kept time ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_lock_whose_keep_was_lost_stays_kept_after_its_client_closes() {
    let mut server = ZooKeeperServer::start();
    let (holder, other) = keeper_and_other(&server).await;
    a_lost_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// A client whose keep failed closes right after it gave up a wait, whose
/// node's deletion could not reach the paused server: its session stays
/// open for the kept lock, and the given-up wait's release, under way,
/// keeps the client until it is done, so the next waiter gets the lock
/// when its holder releases it, not when the kept time ends (6 s after
/// the failed keep) with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_wait_given_up_as_its_client_closes_leaves_the_queue_while_its_session_lingers()
{
    let mut server = ZooKeeperServer::start();
    let (holder, other) = keeper_and_other(&server).await;
    let third = connect(&server.hosts(), Client::builder()).await;
    let guard = holder
        .lock("kept")
        .lease(Duration::from_secs(6))
        .at_least(Duration::from_secs(6))
        .acquire()
        .await
        .expect("take the lock to keep");
    let queued = other.lock("queued").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = holder.lock("queued").wait(Duration::from_secs(60));
        async move { lock.acquire().await.map(drop) }
    });
    let queued_up = eventually(Duration::from_secs(10), || async {
        other.lock("queued").inspect().await.unwrap().waiters == 1
    });
    assert!(
        queued_up.await,
        "the holder's client never waited for the lock"
    );
    server.pause();
    let released = guard.release().await;
    assert!(
        released.is_err(),
        "the keep was made with the server paused: {released:?}"
    );
    // Given up while the server cannot answer its deletion, then closed.
    waiting.abort();
    let _ = waiting.await;
    drop(holder);
    server.resume();
    let next = tokio::spawn({
        let lock = third.lock("queued").wait(Duration::from_secs(12));
        async move { lock.acquire().await }
    });
    // The third client queues (behind the given-up wait's node, while
    // that is still there).
    let queued_up = eventually(Duration::from_secs(10), || async {
        other.lock("queued").inspect().await.unwrap().waiters >= 1
    });
    assert!(
        queued_up.await,
        "the third client never waited for the lock"
    );
    let freed = Instant::now();
    assert!(queued.release().await.unwrap());
    let guard = next
        .await
        .unwrap()
        .expect("the lock went to the next live waiter");
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "the given-up wait stayed in the queue {:?}",
        freed.elapsed()
    );
    assert!(guard.release().await.unwrap());
}

/// For the two scenarios above: a holder that gives up on a request after
/// 300 ms, and another client, of `server`.
async fn keeper_and_other(server: &ZooKeeperServer) -> (Client, Client) {
    let holder = connect(
        &server.hosts(),
        Client::builder().response_timeout(Duration::from_millis(300)),
    )
    .await;
    let other = connect(&server.hosts(), Client::builder()).await;
    (holder, other)
}

/// `a` holds a lock under a watchdog lease as long as its 1 s session when
/// the server freezes for three times that: the loss is signalled before
/// the lease ends. After the pause `b` acquires with a greater fencing
/// token, a write fenced with `a`'s old token is rejected, and `a` takes
/// locks again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_paused_past_the_session_takes_the_lease_and_the_fence() {
    let mut server = ZooKeeperServer::start();
    let session = Duration::from_secs(1);
    let a = connect_in_session(
        &server.hosts(),
        Client::builder().response_timeout(Duration::from_millis(200)),
        session,
    )
    .await;
    let b = connect(&server.hosts(), Client::builder()).await;

    let first = a.lock("paused").acquire().await.unwrap();
    let acquired_at = Instant::now();
    let lost = first.lost();
    server.pause();
    let err = tokio::time::timeout(session * 2, lost)
        .await
        .expect("loss not signalled within the session");
    let signalled = acquired_at.elapsed();
    assert!(err.is_lease_lost(), "{err}");
    assert!(
        signalled < session,
        "loss signalled after {signalled:?}, past the session timeout"
    );
    assert!(!first.is_held());
    tokio::time::sleep(session * 2).await;
    server.resume();

    // The fenced value lives in ZooKeeper too; `b` writes the stale token
    // as well (`a`'s session may still be being renewed).
    the_next_holder_fences_out_the_old(&b, &b, first, Duration::from_secs(20)).await;

    // `a` works again by itself: in a new session when the ensemble
    // expired its old one during the pause.
    let recovered = takes_lock_within(&a, "paused", Duration::from_secs(15), |e| {
        e.is_unavailable() || e.is_timeout()
    })
    .await;
    assert!(recovered, "the paused client did not recover");
}

/// A three-member ensemble loses its leader while a holder holds and three
/// clients wait: every client moves to another member within its session,
/// the holder keeps its lock through the election, and the waiters are
/// served one at a time, in their order, with increasing fencing tokens.
///
/// The holder keeps its lock if its renewals resume before its lease (two
/// thirds of the session timeout) ends. An election on a loaded two-core
/// machine running three JVMs took longer than the default's 6.7 s less a
/// renewal interval, so the holder's session is 30 s (a 20 s lease): the
/// test is about the session surviving the election, which the default
/// session would too, not about how fast the ensemble elects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_leader_killed_while_clients_wait() {
    let mut ensemble = ZooKeeperEnsemble::start(3);
    let hosts = ensemble.hosts();
    let holder = connect_in_session(&hosts, Client::builder(), Duration::from_secs(30)).await;
    let guard = holder.lock("election").acquire().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let lg = connect(&hosts, Client::builder()).await;
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
    let leader = ensemble.wait_for_leader(Duration::from_secs(30));
    let killed = std::time::Instant::now();
    ensemble.member_mut(leader).kill();
    let new_leader = ensemble.wait_for_leader(Duration::from_secs(30));
    println!("a new leader after {:?}", killed.elapsed());
    assert_ne!(new_leader, leader);
    if !guard.is_held() {
        // Why: found gone by a renewal ("was lost"), or renewals failing
        // until the lease ran out ("is running out").
        panic!(
            "the holder lost its lock in the election: {}",
            guard.lost().await
        );
    }
    assert!(
        guard.release().await.unwrap(),
        "the holder's node did not survive the election"
    );
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

/// The sequence number of a queue node (`{token}-{sequence}`), as
/// ZooKeeper wrote it: `%010d` of a signed 32-bit counter.
fn sequence_of(name: &str) -> i32 {
    let (_, sequence) = name.split_once('-').expect("a queue node's name");
    sequence.parse().expect("a 32-bit sequence number")
}

/// One lock's sequence counter is at its end, 2147483647, when a holder
/// takes the lock and four clients queue behind it. ZooKeeper 3.6+ then
/// numbers every later node 2147483647 too (older servers wrap to
/// -2147483648): none of them may go ahead of the holder, however its
/// token sorts, and the waiters are served one at a time in the order
/// they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_queue_order_survives_the_sequence_wrap() {
    use lockguard_zookeeper::zookeeper_client as zk;
    // The lock "wrap"'s node under the default root and key prefix.
    let dir = "/lockguard/lockguard:lock:{wrap}";
    let server = ZooKeeperServer::start_with_cversion(dir, i32::MAX);
    let hosts = server.hosts();
    let holder = connect(&hosts, Client::builder()).await;
    let guard = holder.lock("wrap").acquire().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let lg = connect(&hosts, Client::builder()).await;
        let (inside, order) = (inside.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = lg
                .lock("wrap")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("a waiter is served");
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            order.lock().unwrap().push((i, g.fencing_token()));
            tokio::time::sleep(Duration::from_millis(50)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            assert!(g.release().await.unwrap());
        }));
        // Each waiter queues before the next one starts.
        let queued = eventually(Duration::from_secs(10), || {
            let holder = holder.clone();
            async move { holder.lock("wrap").inspect().await.unwrap().waiters == i + 1 }
        })
        .await;
        assert!(queued, "waiter {i} did not queue");
    }
    assert!(
        order.lock().unwrap().is_empty(),
        "a waiter went ahead of the holder: {:?}",
        order.lock().unwrap()
    );
    // The queue is really numbered at and past the end of the counter.
    let admin = zk::Client::connect(&hosts).await.unwrap();
    let numbers: Vec<i32> = admin
        .list_children(dir)
        .await
        .unwrap()
        .iter()
        .map(|n| sequence_of(n))
        .collect();
    assert_eq!(numbers.len(), 5, "{numbers:?}");
    assert!(
        numbers.iter().all(|&n| n == i32::MAX || n < 0),
        "the queue is not numbered at the end of the counter: {numbers:?}"
    );
    // Newcomers never go ahead of the holder. (Numbered alike, half of
    // them would, by their random tokens: twenty tries all but ensure one.)
    let other = connect(&hosts, Client::builder()).await;
    for attempt in 0..20 {
        let outcome = other.lock("wrap").try_acquire().await;
        assert!(
            matches!(&outcome, Err(e) if e.is_busy()),
            "try_acquire {attempt} at the end of the counter, while the lock is held: {outcome:?}"
        );
    }
    assert!(guard.is_held());
    assert!(guard.release().await.unwrap());
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("a waiter was never served")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    let served: Vec<_> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(served, [0, 1, 2, 3], "waiters served out of order");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
}

/// A lock held in an application's session when the ensemble expires it
/// (the server paused past the session timeout): its release says the
/// lock was no longer held, since its node went with the session, rather
/// than that the store is unavailable. (lockguard does not renew a session
/// the application handed in, so the session stays expired.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_lock_gone_with_its_session_is_released_as_not_held() {
    use lockguard_zookeeper::zookeeper_client as zk;
    let mut server = ZooKeeperServer::start();
    let session = Duration::from_secs(1);
    let app = zk::Client::connector()
        .with_session_timeout(session)
        .connect(&server.hosts())
        .await
        .unwrap();
    let lg = Client::builder()
        .response_timeout(Duration::from_secs(2))
        .connect_zookeeper_client(app.clone())
        .await
        .unwrap();
    let guard = lg.lock("expired").acquire().await.unwrap();
    let mut states = app.state_watcher();
    server.pause();
    // The fault: the server silent for three session timeouts.
    tokio::time::sleep(session * 3).await;
    server.resume();
    let expired = tokio::time::timeout(Duration::from_secs(20), async {
        while app.state() != zk::SessionState::Expired {
            states.changed().await;
        }
    })
    .await;
    assert!(
        expired.is_ok(),
        "the session never expired: {:?}",
        app.state()
    );
    let released = guard.release().await;
    assert!(
        matches!(released, Ok(false)),
        "a lock gone with its session released as {released:?}"
    );
}

/// The server is down when a client asks for a lock with a 30 s wait, and
/// comes back (restarted on its data) a few seconds later: the wait rides
/// out the outage and acquires, rather than failing at once as
/// unavailable. (The retry of transient errors within a wait is the
/// lock's; this store's part is to call the outage transient.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_wait_rides_out_a_server_restart() {
    let mut server = ZooKeeperServer::start();
    let lg = connect(
        &server.hosts(),
        Client::builder().response_timeout(Duration::from_millis(300)),
    )
    .await;
    // The store is warm: its root node exists.
    assert!(
        lg.lock("blip")
            .try_acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap()
    );
    server.kill();
    let started = Instant::now();
    let waiter = tokio::spawn(async move {
        let outcome = lg
            .lock("blip")
            .wait(Duration::from_secs(30))
            .acquire()
            .await;
        (outcome, started.elapsed())
    });
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let back = started.elapsed();
    let (outcome, ended) = tokio::time::timeout(Duration::from_secs(40), waiter)
        .await
        .expect("the wait outlived its deadline")
        .unwrap();
    let guard = outcome.unwrap_or_else(|e| {
        panic!("the wait failed {ended:?} after it began (server back after {back:?}): {e}")
    });
    println!("server back after {back:?}; lock acquired after {ended:?}");
    assert!(guard.release().await.unwrap());
    drop(server);
}

/// A creation whose answer is lost, and the client then moves to member 0,
/// whose link to the leader is held back (it has not even received the
/// creation): the cleanup that looks for the node by name finds it and
/// deletes it, rather than leaving it to block the lock for the life of the
/// client's session (30 s here).
///
/// That lookup lists the lock's node after a sync with the leader, since
/// ZooKeeper promises a moved client only that it sees nothing older than
/// what it saw answered. This test does not fail without the sync on
/// ZooKeeper 3.8: a member revalidates a moved session with the leader
/// before serving it, over the same link as the commits, so the member
/// has received the creation before the cleanup can list; the window left
/// is the member's delay in applying what it received, which a test cannot
/// hold open from outside the server. It fails when the cleanup does not
/// retry across the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_lost_creation_is_found_on_a_lagging_member() {
    use lockguard_testing::Relay;
    use lockguard_zookeeper::zookeeper_client as zk;
    let (ensemble, quorum_links) = ZooKeeperEnsemble::start_with_relayed_member(3, 0);
    let leader = ensemble.wait_for_leader(Duration::from_secs(30));
    assert_ne!(leader, 0, "the relayed member leads");
    let other = (1..3).find(|&i| i != leader).expect("a third member");
    // The client reaches the other follower, and later member 0, through
    // relays of its own; member 0's refuses it for now.
    let to_other = Relay::start(ensemble.member(other).port());
    let to_lagging = Relay::start_closed(ensemble.member(0).port());
    let app = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&format!(
            "127.0.0.1:{},127.0.0.1:{}",
            to_other.port(),
            to_lagging.port()
        ))
        .await
        .unwrap();
    let lg = Client::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_zookeeper_client(app.clone())
        .await
        .unwrap();
    let admin = zk::Client::connect(&ensemble.member(leader).hosts())
        .await
        .unwrap();
    let dir = "/lockguard/lockguard:lock:{ghost}";
    let queue = || {
        let admin = admin.clone();
        async move {
            match admin.list_children(dir).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => panic!("listing {dir}: {e}"),
            }
        }
    };

    // The lock's node exists (an empty container stays for a minute), so
    // that the creation below is a single request.
    let warm = lg.lock("ghost").try_acquire().await.unwrap();
    assert!(warm.release().await.unwrap());

    // Member 0 hears nothing more from the leader, and the client nothing
    // more from the member it is on: the creation is committed (by the
    // leader and the other follower), its answer lost.
    //
    // Member 0 must first have applied all the client has seen (the
    // release above), or it refuses the moved client for good: a server
    // never serves a client a past older than one it saw. A commit caught
    // in the relay when the hold begins would do that, so the holds are
    // taken again until member 0 is level with the member the client is on.
    hold_level(&ensemble, other, &quorum_links, Some(&to_other)).await;
    let err = lg.lock("ghost").try_acquire().await.unwrap_err();
    assert!(err.is_timeout() || err.is_unavailable(), "{err}");
    let created = eventually(Duration::from_secs(10), || async {
        queue().await.len() == 1
    })
    .await;
    assert!(created, "the creation was never committed");

    // The client moves to member 0, which has not applied the creation.
    to_lagging.open();
    to_other.cut();
    let session = format!("sid=0x{:x}", app.session_id().0);
    let moved = eventually(Duration::from_secs(10), || async {
        ensemble
            .member(0)
            .four_letter("cons")
            .is_some_and(|cons| cons.contains(&session))
    })
    .await;
    assert!(
        moved,
        "the client never reconnected to the lagging member; its log ends:\n{}",
        ensemble.member(0).log_tail()
    );
    // The fault lasts a few seconds more: time for the cleanup (which
    // retries every 2 s at most) to try on member 0.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for link in &quorum_links {
        link.release();
    }

    let cleaned = eventually(Duration::from_secs(10), || async {
        queue().await.is_empty()
    })
    .await;
    assert!(
        cleaned,
        "the lost creation's node outlived the cleanup: {:?}",
        queue().await
    );
    let taker = connect(&ensemble.member(leader).hosts(), Client::builder()).await;
    let guard = taker.lock("ghost").try_acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
}

/// Whether member 0 has applied all that member `other` has.
fn level(ensemble: &ZooKeeperEnsemble, other: usize) -> bool {
    let (lagging, current) = (ensemble.member(0), ensemble.member(other));
    matches!((lagging.last_zxid(), current.last_zxid()), (Some(l), Some(c)) if l >= c)
}

/// Holds member 0's links to the other members (`quorum_links`, and
/// `also` with them) once it has applied all that member `other` has: it
/// then lags from that point. A commit caught in a relay when the hold
/// begins would leave it behind from the start, so the hold is taken
/// again until member 0 is level when it begins.
async fn hold_level(
    ensemble: &ZooKeeperEnsemble,
    other: usize,
    quorum_links: &[lockguard_testing::Relay],
    also: Option<&lockguard_testing::Relay>,
) {
    for _ in 0..5 {
        let caught_up =
            eventually(Duration::from_secs(10), || async { level(ensemble, other) }).await;
        assert!(caught_up, "member 0 never applied what member {other} has");
        quorum_links.iter().chain(also).for_each(|l| l.hold());
        if level(ensemble, other) {
            return;
        }
        quorum_links.iter().chain(also).for_each(|l| l.release());
    }
    panic!("a commit was caught in the relay at every hold");
}

/// A counter's and a fenced value's reads and a lock's inspection on
/// member 0, whose link to the leader is held back, answer with what the
/// leader has or not at all:
/// never with a value that a write already completed has replaced.
/// ZooKeeper keeps only a session's own reads in order, and a member behind
/// the leader answers reads from its past; the reads are synced with the
/// leader first, so they wait for the link (and time out here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_reads_on_a_lagging_member_never_go_back_past_a_completed_write() {
    use lockguard_core::FencingToken;
    let (ensemble, quorum_links) = ZooKeeperEnsemble::start_with_relayed_member(3, 0);
    let leader = ensemble.wait_for_leader(Duration::from_secs(30));
    assert_ne!(leader, 0, "the relayed member leads");
    let other = (1..3).find(|&i| i != leader).expect("a third member");
    // The writer's requests and the reads after the catch-up are not what
    // the test is about: on a machine loaded by other tests (their
    // ensembles' JVMs starting beside this one), a member can take longer
    // than the default 2 s to answer them, so they wait up to 10 s.
    let patient = || Client::builder().response_timeout(Duration::from_secs(10));
    let writer = connect(&ensemble.member(leader).hosts(), patient()).await;
    // A client of its own (a session) for each read below: a session's
    // requests are answered in order, so one waiting on the leader holds
    // back the ones sent after it.
    let mut readers = Vec::new();
    for _ in 0..5 {
        readers.push(
            connect(
                &ensemble.member(0).hosts(),
                Client::builder().response_timeout(Duration::from_millis(500)),
            )
            .await,
        );
    }
    let reader = &readers[0];
    writer.counter("views").set(1).await.unwrap();
    writer.counter("stock").set(0).await.unwrap();
    writer
        .fenced("ledger")
        .write(FencingToken::new(1), b"old")
        .await
        .unwrap();
    assert_eq!(reader.counter("views").get().await.unwrap(), 1);

    // Member 0 hears nothing more from the leader, from a point where it
    // has applied every write so far.
    hold_level(&ensemble, other, &quorum_links, None).await;

    // Committed by the leader and the other follower, and answered.
    assert_eq!(writer.counter("views").incr_by(1).await.unwrap(), 2);
    let current = writer.counter("views").get_versioned().await.unwrap();
    assert_eq!(writer.counter("stock").incr_by(5).await.unwrap(), 5);
    writer
        .fenced("ledger")
        .write(FencingToken::new(2), b"new")
        .await
        .unwrap();
    let led = writer.lock("led").try_acquire().await.unwrap();
    assert!(
        !level(&ensemble, other),
        "member 0 applied the writes through a held link; the test holds nothing back"
    );
    match reader.counter("views").get().await {
        Ok(v) => assert_eq!(v, 2, "a read returned a value a completed write replaced"),
        Err(e) => assert!(e.is_timeout() || e.is_unavailable(), "{e}"),
    }
    match readers[1].fenced("ledger").read().await {
        Ok(v) => assert_eq!(
            v.map(|v| v.value),
            Some(b"new".to_vec()),
            "a fenced read returned a value a completed write replaced"
        ),
        Err(e) => assert!(e.is_timeout() || e.is_unavailable(), "{e}"),
    }
    // Nor is a refusal decided on what the member has: stock is there, and
    // the version is the current one.
    match readers[2].counter("stock").decr_if_at_least(1).await {
        Ok(left) => assert_eq!(
            left,
            Some(4),
            "stock refused that a completed write put there"
        ),
        Err(e) => assert!(e.is_timeout() || e.is_unavailable(), "{e}"),
    }
    match readers[3]
        .counter("views")
        .compare_and_set(current.version, 7)
        .await
    {
        Ok(swapped) => assert!(swapped, "refused from a version a completed write replaced"),
        Err(e) => assert!(e.is_timeout() || e.is_unavailable(), "{e}"),
    }
    // Nor is a lock taken seen free (what `Leader::current` reads).
    match readers[4].lock("led").inspect().await {
        Ok(seen) => assert!(seen.is_held(), "a lock seen free after it was taken"),
        Err(e) => assert!(e.is_timeout() || e.is_unavailable(), "{e}"),
    }

    for link in &quorum_links {
        link.release();
    }
    let caught_up = eventually(Duration::from_secs(10), || async {
        reader.counter("stock").get().await.is_ok()
    })
    .await;
    assert!(caught_up, "member 0 never answered again");
    // What the timed-out requests did, if anything, is done once.
    let settled = connect(&ensemble.member(0).hosts(), patient()).await;
    let views = settled.counter("views").get().await.unwrap();
    assert!(views == 2 || views == 7, "views {views}");
    let stock = settled.counter("stock").get().await.unwrap();
    assert!(stock == 5 || stock == 4, "stock {stock}");
    assert!(led.release().await.unwrap());
}

/// Set to the connect string, makes `zookeeper_child` act as a client
/// process: `hold` or `wait` for the lock "victim".
const CHILD_ENV: &str = "LOCKGUARD_ZOOKEEPER_CHILD";

/// The child half of the process tests below, run only in the child
/// process they start (which sets `LOCKGUARD_ZOOKEEPER_CHILD`): it holds,
/// or waits for, the lock "victim" in a session of 1 s, says so on its
/// standard output, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the zookeeper process tests"]
async fn zookeeper_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (role, hosts) = spec.split_once(' ').expect("role and hosts");
    let lg = Client::builder()
        .zookeeper_session_timeout(Duration::from_secs(1))
        .connect_zookeeper(hosts)
        .await
        .expect("the child connects");
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

/// This test binary run again as `zookeeper_child`, holding or waiting.
fn child_client(role: &str, hosts: &str) -> ChildProcess {
    let module = module_path!().split_once("::").expect("a module").1;
    ChildProcess::spawn(
        &format!("{module}::zookeeper_child"),
        (CHILD_ENV, &format!("{role} {hosts}")),
    )
}

/// A waiter process killed with SIGKILL while first in the queue leaves it
/// when the ensemble expires its 1 s session: the waiter behind it is
/// served within that (plus slack), never after the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_waiter_process_leaves_the_queue_with_its_session() {
    let server = ZooKeeperServer::start();
    let hosts = server.hosts();
    let holder = connect(&hosts, Client::builder()).await;
    let guard = holder.lock("victim").acquire().await.unwrap();
    let mut child = child_client("wait", &hosts);
    child.expect("waiting");
    let second = connect(&hosts, Client::builder()).await;
    let bound = Duration::from_secs(1) + Duration::from_secs(2);
    a_killed_waiter_delays_the_queue_by_less_than(&holder, guard, child, second, bound).await;
}

/// A holder process killed with SIGKILL frees the lock when the ensemble
/// expires its 1 s session: a waiter in this process, woken by the node's
/// deletion, takes it with a greater fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_holder_process_frees_the_lock_with_its_session() {
    let server = ZooKeeperServer::start();
    let hosts = server.hosts();
    let mut child = child_client("hold", &hosts);
    let held = child.expect("held");
    let old_fence: u64 = held
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("the child's fencing token");
    let lg = connect(&hosts, Client::builder()).await;
    let busy = lg.lock("victim").try_acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    child.kill();
    let killed = Instant::now();
    let guard = lg
        .lock("victim")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the lock is freed when the dead holder's session expires");
    let freed_after = killed.elapsed();
    println!("the dead holder's lock was taken {freed_after:?} after the kill");
    assert!(freed_after < Duration::from_secs(4), "{freed_after:?}");
    assert!(guard.fencing_token().get() > old_fence);
    assert!(guard.release().await.unwrap());
}

/// The session of the kit's killed holders (`zookeeper_child_holder`), and
/// the lease its watchdog keeps (under two thirds of it).
const KILLED_SESSION: Duration = Duration::from_secs(1);

/// The child of the kit's killed-holder tests below: a client in a 1 s
/// session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the killed-holder tests"]
async fn zookeeper_child_holder() {
    hold_until_killed(KILLED_SESSION * 3 / 5, async |hosts| {
        Client::builder()
            .zookeeper_session_timeout(KILLED_SESSION)
            .connect_zookeeper(hosts)
            .await
    })
    .await;
}

/// The child of the job test below: a client in a session long enough
/// for the job's 4 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the job test"]
async fn zookeeper_child_job() {
    hold_until_killed(Duration::from_secs(4), async |hosts| {
        Client::builder()
            .zookeeper_session_timeout(Duration::from_secs(10))
            .connect_zookeeper(hosts)
            .await
    })
    .await;
}

/// A scheduled job's process releases its lock before its `at_least` and
/// exits, its session gone with it: the lock stays taken until `at_least`
/// has passed (its kept node outlives the session). Before the kept node,
/// it was free once the process was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_at_least_outlives_the_job_process_that_took_it() {
    let server = ZooKeeperServer::start();
    let lg = connect(&server.hosts(), Client::builder()).await;
    let module = module_path!().split_once("::").expect("a module").1;
    let kill = Kill::new(
        &format!("{module}::zookeeper_child_job"),
        &server.hosts(),
        Duration::from_secs(4),
    );
    at_least_outlives_the_process_that_took_it(kill, &lg).await;
}

/// The kit's scenario on ZooKeeper: a waiter process frozen while the
/// lock is handed to it (its node heads the queue), past its 1 s session:
/// resumed, it does not hold the lock while another does (its session
/// expired, its node with it); it gets it after, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_paused_waiter_never_holds_a_grant_it_slept_through() {
    let server = ZooKeeperServer::start();
    let lg = connect(&server.hosts(), Client::builder()).await;
    let module = module_path!().split_once("::").expect("a module").1;
    let kill = Kill::new(
        &format!("{module}::zookeeper_child_holder"),
        &server.hosts(),
        KILLED_SESSION * 3 / 5,
    );
    a_paused_waiter_never_holds_a_grant_it_slept_through(kill, &lg).await;
}

/// The kit's scenario on ZooKeeper: what a killed process held is freed
/// when the ensemble expires its 1 s session (within 4 s of the kill, for
/// a loaded machine), to the waiters in this process, woken by its node's
/// deletion, with greater tokens, and never while the child lived (its
/// watchdog kept it through two leases).
async fn killed(holding: Holding) {
    let server = ZooKeeperServer::start();
    let lg = connect(&server.hosts(), Client::builder()).await;
    let module = module_path!().split_once("::").expect("a module").1;
    let kill = Kill::new(
        &format!("{module}::zookeeper_child_holder"),
        &server.hosts(),
        KILLED_SESSION * 3 / 5,
    )
    .served_within(Duration::from_secs(4));
    a_killed_holder_is_replaced(holding, kill, &lg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_multi_lock_holder_frees_every_key_with_its_session() {
    killed(Holding::MultiLock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_writer_process_frees_the_read_write_lock_with_its_session() {
    killed(Holding::Writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_leader_process_is_replaced_with_its_session() {
    killed(Holding::Leader).await;
}

/// Rate limiters and expiry are refused with a message naming the store;
/// a fixed lease past the session timeout is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_refuses_what_it_does_not_offer() {
    let server = ZooKeeperServer::start();
    let lg = connect_in_session(&server.hosts(), Client::builder(), Duration::from_secs(2)).await;
    let err: Error = lg
        .rate_limiter("api", lockguard_core::Quota::per_second(10))
        .check("k")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("zookeeper"), "{err}");
    let err = lg
        .counter("c")
        .expire_after(Duration::from_secs(60))
        .incr_by(1)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(
        lg.counter("c").get().await.unwrap(),
        0,
        "nothing was written"
    );
    let err = lg
        .lock("l")
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let guard = lg
        .lock("l")
        .lease(Duration::from_secs(1))
        .try_acquire()
        .await
        .unwrap();
    let err = guard.extend(Duration::from_secs(30)).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(guard.release().await.unwrap());
}

/// The application's own ZooKeeper client (here under a chroot) is used as
/// it is: the locks live under its chroot, in its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_an_application_session_is_used_as_it_is() {
    use lockguard_zookeeper::zookeeper_client as zk;
    let server = ZooKeeperServer::start();
    let admin = zk::Client::connect(&server.hosts()).await.unwrap();
    admin
        .create(
            "/app",
            &[],
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let session = Duration::from_secs(2);
    let app = zk::Client::connector()
        .with_session_timeout(session)
        .connect(&format!("{}/app", server.hosts()))
        .await
        .unwrap();
    let lg = Client::builder()
        .connect_zookeeper_client(app.clone())
        .await
        .unwrap();
    let guard = lg.lock("order:1").acquire().await.unwrap();
    let locks = admin.list_children("/app/lockguard").await.unwrap();
    assert_eq!(locks.len(), 1, "{locks:?}");
    let queue = admin
        .list_children(&format!("/app/lockguard/{}", locks[0]))
        .await
        .unwrap();
    assert_eq!(queue.len(), 1, "{queue:?}");

    let node = admin
        .check_stat(&format!("/app/lockguard/{}/{}", locks[0], queue[0]))
        .await
        .unwrap()
        .expect("the lock's node");
    assert_eq!(
        node.ephemeral_owner,
        app.session_id().0,
        "not the application's session"
    );
    assert_eq!(node.czxid as u64, guard.fencing_token().get());
    assert!(guard.release().await.unwrap());
}
