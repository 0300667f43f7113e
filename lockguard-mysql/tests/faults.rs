//! The MySQL store against a real MariaDB under faults: the server killed
//! and restarted, paused past a lease, its connections killed, a holder
//! process killed.

use lockguard_mysql::ClientExt as _;
use std::time::{Duration, Instant};

use lockguard_core::{Client, ErrorKind};
use lockguard_testing::faults::{
    Holding, Kill, PausePlan, a_failed_keep_outlives_its_client,
    a_kill_fails_fast_and_a_restart_is_recovered, a_killed_holder_is_replaced,
    a_killed_waiter_delays_the_queue_by_less_than, a_lease_outlives_a_crash,
    a_lost_keep_outlives_its_client, a_pause_takes_the_leaders_lease,
    a_pause_takes_the_lease_and_the_fence, a_pause_takes_the_multi_locks_lease,
    a_paused_waiter_never_holds_a_grant_it_slept_through,
    a_wait_outlasts_the_servers_statement_limits, a_wait_rides_out_a_pause_longer_than_its_lease,
    a_wait_rides_out_an_outage, at_least_outlives_a_crash,
    at_least_outlives_the_process_that_took_it, hold_until_killed,
};
use lockguard_testing::{ChildProcess, MariaDbServer};

/// Retries `op` until it succeeds or `within` has passed.
async fn eventually<T>(
    within: Duration,
    mut op: impl AsyncFnMut() -> lockguard_core::Result<T>,
) -> T {
    let started = Instant::now();
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if started.elapsed() < within => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("still failing after {within:?}: {e}"),
        }
    }
}

async fn client(server: &MariaDbServer) -> Client {
    lockguard_core::Client::connect_mysql(&server.url())
        .await
        .expect("connect to mariadb")
}

/// A client whose requests time out after `response_timeout`.
async fn client_timing_out(server: &MariaDbServer, response_timeout: Duration) -> Client {
    let b = Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(response_timeout);
    lockguard_mysql::MySqlBuilder::new(b)
        .connect_mysql(&server.url())
        .await
        .expect("connect to mariadb")
}

/// The kit's scenario: killed, the server makes operations fail fast as
/// unavailable (or timed out, for a request cut off by the kill);
/// restarted, the same client recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_server_fails_fast_and_the_client_recovers_after_restart() {
    let mut server = MariaDbServer::start();
    let timeout = Duration::from_millis(500);
    let lg = client_timing_out(&server, timeout).await;
    a_kill_fails_fast_and_a_restart_is_recovered(&mut server, &lg, timeout, |e| {
        e.is_unavailable() || e.kind() == ErrorKind::Timeout
    })
    .await;
}

/// The kit's scenario: the server stops answering (SIGSTOP) under a
/// watchdog guard; the loss is signalled before the lease ends, and the
/// next holder's token fences the old holder's write out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_paused_server_makes_the_holder_lose_its_lease_and_its_fence() {
    let mut server = MariaDbServer::start();
    let a = client_timing_out(&server, Duration::from_millis(150)).await;
    let b = client_timing_out(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_lease_and_the_fence(&mut server, &a, &b).await;
}

/// The kit's scenario for a multi-lock: paused under a watchdog lease, it
/// signals the loss within the lease, and the next holders' tokens fence
/// its writes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_paused_server_makes_a_multi_lock_lose_its_lease_and_its_fences() {
    let mut server = MariaDbServer::start();
    let a = client_timing_out(&server, Duration::from_millis(150)).await;
    let b = client_timing_out(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_multi_locks_lease(&mut server, PausePlan::lease(), &a, &b).await;
}

/// The kit's scenario for a leader: paused under a watchdog lease, it
/// signals the loss within the lease, and the next leader's term fences
/// its writes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_paused_server_makes_a_leader_lose_its_lease_and_its_term() {
    let mut server = MariaDbServer::start();
    let a = client_timing_out(&server, Duration::from_millis(150)).await;
    let b = client_timing_out(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_leaders_lease(&mut server, PausePlan::lease(), &a, &b).await;
}

/// The kit's scenario: a short wait during an outage ends with the store's
/// error, a long one takes the lock once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_wait_rides_out_a_restart() {
    let mut server = MariaDbServer::start();
    let lg = client_timing_out(&server, Duration::from_millis(500)).await;
    a_wait_rides_out_an_outage(&mut server, &lg).await;
}

/// The kit's scenario: a grant answered after a pause longer than its
/// lease is given back and the wait queues again (it ended with `Timeout`
/// long before its deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_wait_rides_out_a_pause_longer_than_its_lease() {
    let mut server = MariaDbServer::start();
    let holder = client_timing_out(&server, Duration::from_secs(5)).await;
    let waiter = client_timing_out(&server, Duration::from_secs(5)).await;
    a_wait_rides_out_a_pause_longer_than_its_lease(&mut server, &holder, &waiter).await;
}

/// Killed (SIGKILL) and restarted on its data: requests fail while it is
/// down, and new connections serve them after. A lock held across the
/// crash died with its session (a user lock, its row in a MEMORY table):
/// the holder is told at its next renewal, and its release finds the lock
/// no longer its own; the lock is taken again once the holder's lease may
/// have ended (the restart's wait: its lease is the longest any lock
/// took), its next token still greater (above the clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_server_killed_and_restarted_fails_requests_then_frees_its_locks() {
    let mut server = MariaDbServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    // A lease longer than the outage: the holder learns of the loss from a
    // renewal that finds its session gone, before its lease runs out.
    let lease = Duration::from_secs(4);
    let guard = a.lock("held").watchdog(lease).acquire().await.unwrap();
    let lost = guard.lost();
    server.kill();
    let err = b.lock("other").try_acquire().await.unwrap_err();
    assert!(err.is_unavailable() || err.is_timeout(), "{err}");
    server.restart();
    let err = tokio::time::timeout(lease, lost)
        .await
        .expect("the holder was not told it lost the lock");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!guard.is_held());
    // The connections died with the server: new ones are made, and the
    // locks are taken again once the restart's wait is over.
    let other = eventually(Duration::from_secs(15), async || {
        b.lock("other").try_acquire().await
    })
    .await;
    assert!(other.release().await.unwrap());
    let after = b
        .lock("held")
        .try_acquire()
        .await
        .expect("the lock held across the crash is free once the restart's wait is over");
    assert!(
        after.fencing_token() > guard.fencing_token(),
        "token {} after {}",
        after.fencing_token().get(),
        guard.fencing_token().get()
    );
    assert!(!guard.release().await.unwrap());
    assert!(after.release().await.unwrap());
}

/// A lock and a multi-lock whose holder counts on a fixed lease across a
/// crash and restart: nobody takes them until that lease may have ended,
/// though the restart emptied the MEMORY table of their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_crash_frees_no_lock_inside_its_holders_lease() {
    let mut server = MariaDbServer::start();
    let holder = client(&server).await;
    let other = client(&server).await;
    a_lease_outlives_a_crash(&mut server, &holder, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_server_paused_past_a_lease_frees_the_lock_on_its_own_clock() {
    let mut server = MariaDbServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .lock("paused")
        .lease(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    server.pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.resume();
    // The database's clock ran while it was frozen: the lease is over.
    let next = eventually(Duration::from_secs(5), async || {
        b.lock("paused").try_acquire().await
    })
    .await;
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(!guard.release().await.unwrap(), "the lease had ended");
    assert!(next.release().await.unwrap());
}

/// Kills every connection of the test user, as a DBA or a proxy might.
fn kill_connections(server: &MariaDbServer) -> usize {
    let ids = server
        .sql("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'lockguard' ORDER BY ID");
    let ids: Vec<&str> = ids.lines().collect();
    for id in &ids {
        // A connection may end on its own meanwhile.
        let _ = std::panic::catch_unwind(|| server.sql(&format!("KILL {id}")));
    }
    ids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_connections_are_replaced_and_wake_ups_come_back() {
    let server = MariaDbServer::start();
    let holder = client(&server).await;
    let waiter = lockguard_mysql::MySqlBuilder::new(
        Client::builder()
            .waiter_timeout(Duration::from_secs(30))
            .retry_interval(Duration::from_secs(20)),
    )
    .connect_mysql(&server.url())
    .await
    .unwrap();
    // A first wait opens the waiter's bell.
    let guard = holder.lock("k").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .lock("k")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();

    let killed = kill_connections(&server);
    assert!(killed >= 2, "the pools and the bell: {killed} connections");
    // The next requests find their connections dead: within a wait they
    // are retried on new ones.
    let guard = holder
        .lock("k")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let started = Instant::now();
            let g = waiter
                .lock("k")
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (g, started)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (g, _) = waiting.await.unwrap();
    g.unwrap().release().await.unwrap();
    // Woken by the bell, reconnected, not by a refresh (20 s).
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "the waiter took {:?} after the release",
        released.elapsed()
    );
}

/// The child process of `mysql_a_killed_holder_process_frees_its_lock_at_lease_end`:
/// takes the lock, says so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a client process of mysql_a_killed_holder_process_frees_its_lock_at_lease_end"]
async fn mysql_holder_process() {
    let Ok(url) = std::env::var("LOCKGUARD_MYSQL_HOLDER_URL") else {
        return;
    };
    let lg = lockguard_core::Client::connect_mysql(&url).await.unwrap();
    let guard = lg
        .lock("crashed")
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    // On a line of its own: libtest may have begun one.
    println!("\nheld-fence={}", guard.fencing_token().get());
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_killed_holder_process_frees_its_lock_at_lease_end() {
    let server = MariaDbServer::start();
    let mut child = ChildProcess::spawn(
        "mysql_holder_process",
        ("LOCKGUARD_MYSQL_HOLDER_URL", &server.url()),
    );
    let fence: u64 = child
        .expect("held-fence=")
        .trim()
        .trim_start_matches("held-fence=")
        .parse()
        .expect("a fence");
    child.kill();
    let killed = Instant::now();
    let lg = client(&server).await;
    let busy = lg.lock("crashed").try_acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let guard = lg
        .lock("crashed")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    // Freed by its lease (2 s from the acquisition), not before.
    assert!(
        killed.elapsed() < Duration::from_secs(4),
        "{:?}",
        killed.elapsed()
    );
    assert!(guard.fencing_token().get() > fence);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lost_ring_is_caught_by_the_waiters_refresh() {
    let server = MariaDbServer::start();
    let holder = client(&server).await;
    // Refreshes every second or so (a third of the waiter timeout).
    let waiter = lockguard_mysql::MySqlBuilder::new(
        Client::builder().waiter_timeout(Duration::from_secs(3)),
    )
    .connect_mysql(&server.url())
    .await
    .unwrap();
    // A semaphore's waiter: a lock's waits in the server, with no bell.
    let guard = holder.semaphore("k", 1).acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .semaphore("k", 1)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    // The waiter's bell is open and asleep; marked as rung already, it is
    // not rung again: the handoff below is announced to nobody.
    let started = Instant::now();
    while server.sql("SELECT COUNT(*) FROM lockguard.lockguard_bells") == "0" {
        assert!(started.elapsed() < Duration::from_secs(10), "no bell");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.sql("UPDATE lockguard.lockguard_bells SET rung = 1");
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let g = waiting.await.unwrap().unwrap();
    let took = released.elapsed();
    // Claimed by its next refresh (at most a second away), well before
    // the bell's own period (30 s) would have found the handoff.
    assert!(took < Duration::from_secs(3), "the waiter took {took:?}");
    g.release().await.unwrap();
}

/// A mistake in how the service is set up is told apart from an outage: a
/// wrong password is `Unauthorized`, a database the server does not have
/// is `Misconfigured`, neither retryable, each message saying what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_set_up_mistakes_are_told_apart_from_outages() {
    let server = MariaDbServer::shared();
    let wrong = server.url().replacen(":lockguard@", ":wrong@", 1);
    assert_ne!(wrong, server.url(), "the test's URL has the password");
    let err = lockguard_core::Client::connect_mysql(&wrong)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(
        !err.is_retryable() && err.to_string().contains("credentials"),
        "{err}"
    );
    let err = lockguard_core::Client::connect_mysql(&server.url_for("nosuch"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(
        !err.is_retryable() && err.to_string().contains("nosuch"),
        "{err}"
    );
}

/// The lease of a killed holder's hold, renewed by its watchdog while it
/// lives.
const KILLED_LEASE: Duration = Duration::from_secs(1);

/// The child of the killed-holder tests below, run only in the process
/// they start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the killed-holder tests"]
async fn mysql_child_holder() {
    hold_until_killed(KILLED_LEASE, async |url| {
        lockguard_core::Client::connect_mysql(url).await
    })
    .await;
}

async fn killed(holding: Holding) {
    let server = MariaDbServer::start();
    let lg = client(&server).await;
    let kill = Kill::new("mysql_child_holder", &server.url(), KILLED_LEASE);
    a_killed_holder_is_replaced(holding, kill, &lg).await;
}

/// The kit's scenario: a multi-lock's holder process killed frees every
/// key within its lease, to the multi-lock waiting on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_killed_multi_lock_holder_frees_every_key_within_its_lease() {
    killed(Holding::MultiLock).await;
}

/// The kit's scenario: a leader process killed is replaced by the
/// candidate waiting behind it within its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_killed_leader_process_is_replaced_within_its_lease() {
    killed(Holding::Leader).await;
}

/// The kit's scenario: a waiter process frozen while the server grants it
/// the lock (its `GET_LOCK` waits in the server) and past the lease:
/// resumed, it does not count on that grant while another holds the lock;
/// it gets the lock after, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_paused_waiter_never_holds_a_grant_it_slept_through() {
    let server = MariaDbServer::start();
    let lg = client(&server).await;
    let kill = Kill::new("mysql_child_holder", &server.url(), KILLED_LEASE);
    a_paused_waiter_never_holds_a_grant_it_slept_through(kill, &lg).await;
}

/// The kit's scenario: a scheduled job's process releases its lock before
/// its `at_least` and exits; the lock stays taken until `at_least` has
/// passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_at_least_outlives_the_job_process_that_took_it() {
    let server = MariaDbServer::start();
    let lg = client(&server).await;
    let kill = Kill::new("mysql_child_holder", &server.url(), KILLED_LEASE);
    at_least_outlives_the_process_that_took_it(kill, &lg).await;
}

/// A lock released before its `at_least` passed stays taken until then
/// across a crash (SIGKILL) and restart: its kept time is an InnoDB row
/// (`lock_kept`), which the first hold after the crash reads (the MEMORY
/// table of leases is empty then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_at_least_outlives_a_crash() {
    let mut server = MariaDbServer::start();
    let holder = client(&server).await;
    let other = client(&server).await;
    at_least_outlives_a_crash(&mut server, &holder, &other).await;
}

/// A lock released before its `at_least` passed, across a crash and
/// restart of the server: `lockguard locks` (the survey) still lists it,
/// kept by its holder's token, from its InnoDB row (the MEMORY table of
/// leases is empty after the restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lock_kept_across_a_restart_is_listed() {
    let mut server = MariaDbServer::start();
    let lg = client(&server).await;
    let g = lg
        .lock("kept-listed")
        .at_least(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(g.release().await.unwrap());
    server.kill();
    server.restart();
    let listed = eventually(Duration::from_secs(20), async || lg.locks("*").await).await;
    assert!(
        listed
            .iter()
            .any(|l| l.name == "kept-listed" && !l.holders.is_empty()),
        "{listed:?}"
    );
}

/// A lease's record on a session of the test's own: `(session, fencing
/// token)` of a hold of `key` (the key as the store names it) for 30 s,
/// taken with lockguard's own try.
async fn raw_hold(server: &MariaDbServer, key: &str, token: &str) -> (mysql_async::Conn, i64) {
    raw_hold_for(server, key, token, 30_000).await
}

/// As [`raw_hold`], with a lease of `lease_ms`.
async fn raw_hold_for(
    server: &MariaDbServer,
    key: &str,
    token: &str,
    lease_ms: u64,
) -> (mysql_async::Conn, i64) {
    use mysql_async::prelude::Queryable as _;
    let opts = mysql_async::Opts::from_url(&server.url()).expect("a mysql url");
    let mut conn = mysql_async::Conn::new(opts).await.expect("connect");
    let (taken, fence, _): (i64, Option<i64>, Option<i64>) = conn
        .exec_first("CALL lockguard_lock_try(?, ?, ?)", (key, token, lease_ms))
        .await
        .expect("lock_try")
        .expect("lock_try's row");
    assert_eq!(taken, 1, "the raw session took {key:?}");
    (conn, fence.expect("a fencing token"))
}

/// A release ends its lease before it unlocks, so a lease a successor
/// finds running on a lock it was granted was never released: it is
/// waited out whether the session that recorded it lives (here: a
/// session that unlocked the lock with no release, its lease left
/// running) or ended (killed by an operator or a proxy, unbeknownst to
/// its holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_running_lease_is_waited_out_whatever_its_session() {
    use mysql_async::prelude::Queryable as _;
    let server = MariaDbServer::start();
    let lg = client(&server).await;
    let (key, name) = store_key(&server, &lg, "unlocked").await;
    let (key, name) = (key.as_str(), name.as_str());
    let busy_for_the_lease = async |what: &str| {
        let refused = lg.lock("unlocked").try_acquire().await;
        let e = refused.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Busy, "{what}: {e}");
        let left = e.retry_after().expect("the lease's time left");
        assert!(
            left > Duration::from_secs(20),
            "{what}: {left:?} left of a 30 s lease"
        );
        let state = lg.lock("unlocked").inspect().await.unwrap();
        assert_eq!(
            state.holders, 1,
            "{what}: the lease counts as a hold: {state:?}"
        );
    };

    // Unlocked by its live session with the lease still recorded.
    let (mut live, _) = raw_hold(&server, key, "raw-live").await;
    let unlocked: Option<i64> = live
        .exec_first("SELECT RELEASE_LOCK(?)", (name,))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(unlocked, Some(1));
    busy_for_the_lease("a lease whose session lives and unlocked with no release").await;
    let ended: i64 = live
        .exec_first("CALL lockguard_lock_forget(?, 'raw-live')", (key,))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended, 1, "the raw session's lease ended");
    let next = lg
        .lock("unlocked")
        .try_acquire()
        .await
        .expect("a lease ended is not waited out");
    assert!(next.release().await.unwrap());

    // The session of a hold ended unbeknownst to its holder (killed by an
    // operator or a proxy): its lease is waited out.
    let (cut, _) = raw_hold(&server, key, "raw-cut").await;
    server.sql(&format!("KILL {}", cut.id()));
    let ended = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {}",
        cut.id()
    );
    until_answers(&server, &ended, "0").await;
    busy_for_the_lease("a lease whose session ended").await;
    drop(live);
}

/// Waits (10 s at most) until `sql` answers `answer` on `server`.
async fn until_answers(server: &MariaDbServer, sql: &str, answer: &str) {
    eventually(Duration::from_secs(10), async || {
        let got = server.sql(sql);
        if got == answer {
            Ok(())
        } else {
            Err(lockguard_core::Error::new(
                ErrorKind::Unavailable,
                format!("{sql} answers {got}, not {answer}"),
            ))
        }
    })
    .await;
}

/// The store's name for lock `name`'s key, and the name of its user lock,
/// read from a hold of lockguard's own.
async fn store_key(server: &MariaDbServer, lg: &Client, name: &str) -> (String, String) {
    let g = lg.lock(name).acquire().await.unwrap();
    let row = server.sql(&format!(
        "SELECT k, CONCAT('lockguard ', HEX(h)) FROM lockguard.lockguard_lock_fences WHERE fence = {}",
        g.fencing_token().get()
    ));
    g.release().await.unwrap();
    let (key, lock) = row.split_once('\t').expect("the key's row");
    (key.to_owned(), lock.to_owned())
}

/// A holder's session ended by the server while a waiter blocks in
/// `GET_LOCK` (a cut connection, a client killed: the holder may still
/// count on its lease) hands the user lock to the waiter as the session's
/// locks are released, one by one; the waiter waits the holder's lease
/// out whatever is left of that session. The holder's session holds
/// thousands of other user locks, so its teardown takes a while; each
/// round kills it with the waiter queued and the lease running, and
/// checks on the server's clock that the waiter's hold began no sooner
/// than the holder's lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_holder_session_torn_down_under_a_waiter_keeps_its_lease() {
    use mysql_async::prelude::Queryable as _;
    // The holder's session idles up to 4 s (`wait_timeout`) before the kill.
    const LEASE_MS: u64 = 3000;
    let now_us = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    let server = MariaDbServer::start();
    let lg = client(&server).await;
    for round in 0..4 {
        let name = format!("torn-{round}");
        let (key, _) = store_key(&server, &lg, &name).await;
        let (mut holder, fence) = raw_hold_for(&server, &key, "raw-torn", LEASE_MS).await;
        let fillers: Vec<String> = (0..4000).map(|i| format!("filler {round} {i}")).collect();
        for chunk in fillers.chunks(500) {
            let sql = chunk
                .iter()
                .map(|f| format!("GET_LOCK('{f}', 0)"))
                .collect::<Vec<_>>()
                .join(", ");
            holder.query_drop(format!("DO {sql}")).await.unwrap();
        }
        let waiter = {
            let lg = lg.clone();
            tokio::spawn(
                async move { lg.lock(&name).wait(Duration::from_secs(20)).acquire().await },
            )
        };
        let waiting =
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'";
        until_answers(&server, waiting, "1").await;
        let lease = server.sql(&format!(
            "SELECT CONCAT(expires_us, ' ', expires_us - {now_us}) \
             FROM lockguard.lockguard_lock_fences WHERE token = 'raw-torn'"
        ));
        server.sql(&format!("KILL CONNECTION {}", holder.id()));
        let (ends, left) = lease.split_once(' ').expect("the holder's lease");
        let (ends, left): (i64, i64) = (ends.parse().unwrap(), left.parse().unwrap());
        assert!(
            left > 0,
            "round {round}: the holder's lease ended before the kill"
        );
        let g = waiter
            .await
            .unwrap()
            .expect("the waiter gets the lock once the lease ends");
        let began: i64 = server
            .sql(&format!(
                "SELECT at_us FROM lockguard.lockguard_lock_fences WHERE fence = {}",
                g.fencing_token().get()
            ))
            .parse()
            .unwrap();
        assert!(
            began >= ends,
            "round {round}: the waiter's hold began {} ms before the holder's lease ended",
            (ends - began) / 1000
        );
        assert!(g.fencing_token().get() > u64::try_from(fence).unwrap());
        assert!(g.release().await.unwrap());
        drop(holder);
    }
}

/// A waiter whose grant came while it was not looking (its task not
/// polled past its lease, as a paused process) gives that grant back and
/// waits again with the same token; the lock it then holds has its lease
/// recorded, running: giving the old grant back never ends the new one's
/// lease (as an end of the token's lease sent from another session could,
/// landing after the new grant's draw), so a successor still waits it out
/// if this holder's session is cut. Five rounds, a fixed lease (no
/// watchdog to write the lease again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_grant_given_back_for_its_lapse_leaves_the_next_grants_lease() {
    const LEASE: Duration = Duration::from_millis(600);
    let server = MariaDbServer::start();
    let (holder, waiter) = (client(&server).await, client(&server).await);
    for round in 0..5 {
        let name = format!("lapsed-{round}");
        let held = holder.lock(&name).acquire().await.unwrap();
        let lock = waiter
            .lock(&name)
            .lease(LEASE)
            .wait(Duration::from_secs(20));
        let mut asked = Box::pin(lock.acquire());
        // The wait is sent and queued in the server, then left unpolled.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut asked)
                .await
                .is_err(),
            "round {round}: acquired while held"
        );
        until_answers(
            &server,
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'",
            "1",
        )
        .await;
        assert!(held.release().await.unwrap());
        // Granted (no session waits any more), then left past its lease.
        until_answers(
            &server,
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'",
            "0",
        )
        .await;
        tokio::time::sleep(LEASE * 2).await;
        let g = asked
            .await
            .expect("the waiter waits again and gets the lock");
        let left = server.sql(&format!(
            "SELECT COALESCE(expires_us - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', \
             UTC_TIMESTAMP(6)), -1) FROM lockguard.lockguard_lock_fences WHERE fence = {}",
            g.fencing_token().get()
        ));
        let left: i64 = left.parse().unwrap_or(-1);
        assert!(
            left > 0,
            "round {round}: the new grant's lease is not running ({left} µs left)"
        );
        g.release().await.unwrap();
    }
}

/// A lock taken with `at_least` is released while the server is paused,
/// so its keep fails, and its client closes at once (its connections end,
/// and their user locks with them): the lock stays taken until its
/// `at_least` has passed, and is taken after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lock_whose_keep_failed_stays_kept_after_its_client_closes() {
    let mut server = MariaDbServer::start();
    let holder = client_timing_out(&server, Duration::from_millis(300)).await;
    let other = client(&server).await;
    a_failed_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// As above, with the keep lost: the server is killed while paused, so the
/// keep sent into it is never read, and restarted; the lock stays taken
/// until its `at_least` has passed, and is taken after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lock_whose_keep_was_lost_stays_kept_after_its_client_closes() {
    let mut server = MariaDbServer::start();
    let holder = client_timing_out(&server, Duration::from_millis(300)).await;
    let other = client(&server).await;
    a_lost_keep_outlives_its_client(&mut server, holder, &other).await;
}

/// A server whose sessions default to a short `max_statement_time`
/// (MariaDB's limit on every statement, as a service sets it for its own
/// queries): the kit's scenario, a wait in `GET_LOCK` past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_wait_outlasts_the_servers_statement_time_limit() {
    let server = MariaDbServer::start();
    server.sql("SET GLOBAL max_statement_time = 0.2");
    let holder = client(&server).await;
    let waiter = client(&server).await;
    a_wait_outlasts_the_servers_statement_limits(&holder, &waiter, "limits", || {
        server.sql(
            "SELECT COALESCE(GROUP_CONCAT(ID), '') FROM information_schema.PROCESSLIST \
             WHERE STATE = 'User lock'",
        )
    })
    .await;
}

/// The bell (how a release wakes another client's permit waiter) under a
/// server's short `max_statement_time`: its query waits on past the limit
/// (cut off, it would be sent again and again), and the release still
/// wakes the waiter through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_the_bell_outlasts_the_servers_statement_time_limit() {
    let server = MariaDbServer::start();
    server.sql("SET GLOBAL max_statement_time = 0.2");
    // How long the query waiting in `GET_LOCK` (the bell's) has run, in ms.
    let bell_waited_ms = || {
        server
            .sql(
                "SELECT COALESCE(MAX(TIME_MS), -1) FROM information_schema.PROCESSLIST \
                 WHERE STATE = 'User lock'",
            )
            .trim()
            .parse::<f64>()
            .expect("a number")
    };
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let permit = holder.semaphore("limits", 1).try_acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .semaphore("limits", 1)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let started = Instant::now();
    while bell_waited_ms() < 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no bell waits in GET_LOCK"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the limit, the bell's query still waits.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let waited = bell_waited_ms();
    assert!(waited >= 500.0, "the bell's query ran {waited} ms");
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    assert!(permit.release().await.unwrap());
    let second = waiting.await.unwrap().expect("handed on at the release");
    assert!(second.release().await.unwrap());
}

/// The child process of the killed-waiter tests: says it is about to wait,
/// then waits for the lock (on a lease of 20 s once it has it) until
/// killed, on a client whose waiter timeout is the milliseconds before the
/// space in `LOCKGUARD_MYSQL_WAITER` (the server's URL after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a client process of the killed-waiter tests"]
async fn mysql_waiter_process() {
    let Ok(given) = std::env::var("LOCKGUARD_MYSQL_WAITER") else {
        return;
    };
    let (ms, url) = given
        .split_once(' ')
        .expect("milliseconds, a space, the URL");
    let waiter_timeout = Duration::from_millis(ms.parse().expect("milliseconds"));
    let b = Client::builder().waiter_timeout(waiter_timeout);
    let lg = lockguard_mysql::MySqlBuilder::new(b)
        .connect_mysql(url)
        .await
        .unwrap();
    lockguard_testing::faults::wait_until_killed(&lg, Duration::from_secs(20)).await;
}

/// A waiter process whose client has `waiter_timeout`, killed with SIGKILL
/// while first in the queue (blocked in the server's `GET_LOCK`), delays
/// the waiter behind it by less than `bound` when the lock is released:
/// never by the 20 s lease it would have held.
async fn a_killed_waiter_process_delays_the_queue_by_less_than(
    waiter_timeout: Duration,
    bound: Duration,
) {
    let server = MariaDbServer::start();
    let holder = client(&server).await;
    let guard = holder.lock("victim").acquire().await.unwrap();
    let given = format!("{} {}", waiter_timeout.as_millis(), server.url());
    let mut child = ChildProcess::spawn("mysql_waiter_process", ("LOCKGUARD_MYSQL_WAITER", &given));
    child.expect("waiting");
    let second = client(&server).await;
    a_killed_waiter_delays_the_queue_by_less_than(&holder, guard, child, second, bound).await;
}

/// With the default waiter timeout (1 s), a killed waiter process delays
/// the queue by at most that and slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_killed_waiter_process_delays_the_queue_by_at_most_the_bound() {
    let waiter_timeout = lockguard_core::DEFAULT_WAITER_TIMEOUT;
    let bound = waiter_timeout + Duration::from_secs(2);
    a_killed_waiter_process_delays_the_queue_by_less_than(waiter_timeout, bound).await;
}

/// The bound is the dead waiter's own client's waiter timeout, not the
/// default: 250 ms configured, the queue is held up by less than 750 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_killed_waiter_process_with_a_short_waiter_timeout_delays_the_queue_by_at_most_it()
{
    let waiter_timeout = Duration::from_millis(250);
    let bound = waiter_timeout + Duration::from_millis(500);
    a_killed_waiter_process_delays_the_queue_by_less_than(waiter_timeout, bound).await;
}
