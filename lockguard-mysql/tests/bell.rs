//! The bell (see `src/bell.rs`) against a real MariaDB, through the race
//! that once left it deaf: a release's ring that comes while the bell
//! reads its mailbox, just after the read took the handoff the ring is
//! for. Its waiters are semaphores': a lock's waiter waits in the server,
//! with no bell.

use lockguard_mysql::ClientExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lockguard_core::Client;
use lockguard_testing::{MariaDbServer, faults};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

/// A mailbox row for the bell's client that is no waiter's (its token is
/// not a token, and the bell's read drops it).
const A_HANDOFF: &str = "INSERT INTO lockguard_handoffs (channel, token, fence, attempt, at_us) \
                         SELECT channel, 'none', 0, 0, 0 FROM lockguard_bells";

/// A connection of the test's own, as the clients' user.
async fn conn(server: &MariaDbServer) -> Conn {
    let opts = Opts::from_url(&server.url()).expect("a mysql url");
    Conn::new(opts).await.expect("connect to mariadb")
}

/// Waits until `sql` (run as root) answers `want`, for at most `within`.
async fn until(server: &MariaDbServer, sql: &str, want: &str, within: Duration, what: &str) {
    let started = Instant::now();
    loop {
        let got = server.sql(sql);
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < within,
            "{what}: after {within:?}, {sql:?} still answers {got:?}"
        );
        // No faster: InnoDB refreshes its `information_schema` tables of
        // transactions only when they were last read 100 ms ago or more.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Whether connection `id` waits for a row lock.
fn lock_wait(id: u64) -> String {
    format!(
        "SELECT COUNT(*) FROM information_schema.innodb_trx \
         WHERE trx_mysql_thread_id = {id} AND trx_state = 'LOCK WAIT'"
    )
}

/// A release's ring lands while the bell reads its mailbox and waits for
/// that read, which takes the very handoff the ring is for; the ring then
/// sets the bell's rung flag (the read had reset the flag) and kills the
/// bell's connection as its read ends or between statements, where the
/// kill does nothing. The bell must not go to sleep with the flag set: no
/// later ring would wake it (each sees the flag and leaves it), and every
/// handoff to its client's waiters would wait for their timed refresh
/// until the bell's period ended.
///
/// The interleaving is made, not hoped for: an uncommitted mailbox row of
/// the test's own holds the bell's read (which locks what it reads) until
/// the ring is queued behind it, and the bell's process is held from
/// sending its next statement until the ring has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_ring_that_races_the_bells_read_is_not_lost() {
    let server = MariaDbServer::start();
    let holder = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    // Refreshes every 20 s: woken sooner, the waiter was woken by its
    // bell. Its requests may wait 10 s for a row lock, longer than the
    // test holds one.
    let waiter = lockguard_mysql::MySqlBuilder::new(
        Client::builder()
            .waiter_timeout(Duration::from_secs(60))
            .retry_interval(Duration::from_secs(20))
            .response_timeout(Duration::from_secs(10)),
    )
    .connect_mysql(&server.url())
    .await
    .unwrap();
    let guard = holder.semaphore("k", 1).acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .semaphore("k", 1)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });

    // The waiter's bell, asleep in its query.
    let asleep = "SELECT COUNT(*) FROM lockguard.lockguard_bells b \
                  JOIN information_schema.PROCESSLIST p ON p.ID = b.conn \
                  WHERE p.STATE = 'User lock' AND b.rung = 0";
    until(&server, asleep, "1", Duration::from_secs(10), "the bell").await;
    let bell: u64 = server
        .sql("SELECT conn FROM lockguard.lockguard_bells")
        .trim()
        .parse()
        .expect("the bell's connection id");

    // A handoff row the bell's next read will take, and the row of a
    // handoff still being written, which that read must wait for.
    let mut setup = conn(&server).await;
    setup.query_drop(A_HANDOFF).await.unwrap();
    let taken = setup.last_insert_id().expect("the handoff's id");
    let mut writing = conn(&server).await;
    writing.query_drop("START TRANSACTION").await.unwrap();
    writing.query_drop(A_HANDOFF).await.unwrap();
    // Woken, the bell reads its mailbox (resetting its rung flag, which locks
    // its row) and waits for the row being written.
    server.sql(&format!("KILL QUERY {bell}"));
    until(
        &server,
        &lock_wait(bell),
        "1",
        Duration::from_secs(5),
        "the bell's read",
    )
    .await;
    // The release's ring: the handoff is still in the mailbox, so it rings
    // the bell, and waits for the read to let go of the bell's row.
    let mut ringer = conn(&server).await;
    let ringer_id = u64::from(ringer.id());
    let ring = tokio::spawn(async move {
        ringer
            .exec_drop("CALL lockguard_ring(?, ?)", (taken, taken))
            .await
    });
    until(
        &server,
        &lock_wait(ringer_id),
        "1",
        Duration::from_secs(5),
        "the ring",
    )
    .await;
    // The bell's process is slow to send its next statement (a busy
    // machine): this runtime's two workers, which run the bell, are held
    // until the server has played the race out.
    let gate = Arc::new(Barrier::new(3));
    for _ in 0..2 {
        let gate = gate.clone();
        tokio::spawn(async move {
            gate.wait();
            gate.wait();
        });
    }
    gate.wait();
    // The write is given up (its connection killed): the read takes the
    // handoff and lets go of the bell's row; the ring sets the bell's rung
    // flag and kills the bell's connection, which is done with its read.
    server.sql(&format!("KILL {}", writing.id()));
    let started = Instant::now();
    let state = loop {
        let state = server.sql(&format!(
            "SELECT b.rung, COALESCE(p.STATE = 'User lock', 0), \
             (SELECT COUNT(*) FROM lockguard.lockguard_handoffs WHERE id = {taken}) \
             FROM lockguard.lockguard_bells b \
             LEFT JOIN information_schema.PROCESSLIST p ON p.ID = b.conn"
        ));
        if state.starts_with('1') || started.elapsed() > Duration::from_secs(5) {
            break state;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    gate.wait();
    // The flag set, the bell not in its query, the handoff read but not yet
    // removed (the bell removes what it read in a statement of its own,
    // which its held process has not sent).
    assert_eq!(state, "1\t0\t1", "the race (rung, asleep, handoff left)");
    ring.await.unwrap().unwrap();
    drop(writing);

    // The bell reads its mailbox again, which resets the flag, before it
    // sleeps.
    until(
        &server,
        asleep,
        "1",
        Duration::from_secs(5),
        "the bell asleep with its flag reset (asleep with it set, no ring would wake it)",
    )
    .await;
    // So the next handoff rings it: the waiter has the lock well before
    // its refresh.
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let g = waiting.await.unwrap().unwrap();
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the waiter took {took:?}: woken by its refresh, not its bell"
    );
    g.release().await.unwrap();
}

/// A ring's kill lands on whatever statement the bell's connection runs:
/// its wait, its read of the mailbox (also just after that read
/// committed), the removal of what it read, or between statements. Here a
/// killer interrupts both clients' bells over and over while their tasks
/// hand one lock back and forth, and no handoff may be lost: every client
/// refreshes its waiters only every 30 s, so a lost one waits that long,
/// and no acquisition may wait 8 s (each waits for the 7 other tasks' turns
/// at most, tens of ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_kills_on_any_statement_of_the_bell_lose_no_handoff() {
    let server = MariaDbServer::start();
    let retry = Duration::from_secs(30);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let builder = Client::builder()
            .retry_interval(retry)
            .waiter_timeout(retry * 3);
        clients.push(
            lockguard_mysql::MySqlBuilder::new(builder)
                .connect_mysql(&server.url())
                .await
                .unwrap(),
        );
    }
    // Both bells listening (registered, their ring locks taken) before the
    // killer starts.
    for (n, c) in clients.iter().enumerate() {
        let g = c.semaphore("warm-up", 1).acquire().await.unwrap();
        let waiting = tokio::spawn({
            let c = c.clone();
            async move {
                c.semaphore("warm-up", 1)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
            }
        });
        let ring_locks = "SELECT COUNT(*) FROM lockguard.lockguard_bells \
             WHERE IS_USED_LOCK(CONCAT('lockguard ring ', RIGHT(channel, 40))) = conn";
        let want = (n + 1).to_string();
        until(
            &server,
            ring_locks,
            &want,
            Duration::from_secs(10),
            "the bell",
        )
        .await;
        g.release().await.unwrap();
        waiting.await.unwrap().unwrap().release().await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn({
        let stop = stop.clone();
        let mut c = conn(&server).await;
        async move {
            let mut kills = 0u64;
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let bells: Vec<u64> = c
                    .query("SELECT conn FROM lockguard_bells")
                    .await
                    .expect("read the bells");
                for bell in bells {
                    if c.query_drop(format!("KILL QUERY {bell}")).await.is_ok() {
                        kills += 1;
                    }
                }
                // Now at once, now after a millisecond: the kills land at
                // every point of the bell's cycle.
                round += 1;
                if round.is_multiple_of(2) {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            kills
        }
    });
    let longest = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let lock = clients[t % 2]
            .semaphore("handoffs", 1)
            .lease(Duration::from_secs(40))
            .retry_interval(retry)
            .wait(Duration::from_secs(120));
        let longest = longest.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..25 {
                let asked = Instant::now();
                let guard = lock
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, round {round}: acquire: {e}"));
                let waited = asked.elapsed();
                {
                    let mut l = longest.lock().unwrap();
                    *l = (*l).max(waited);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                assert!(
                    guard.release().await.unwrap(),
                    "task {t}, round {round}: lease lost"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let kills = killer.await.unwrap();
    let longest = *longest.lock().unwrap();
    println!("200 acquisitions under {kills} kills of the bells: longest wait {longest:?}");
    assert!(
        kills >= 200,
        "only {kills} kills landed: the test did not test"
    );
    assert!(
        longest < Duration::from_secs(8),
        "an acquisition waited {longest:?}: a handoff lost to a kill, found by the waiter's refresh"
    );
}

/// A bell row outlives its bell: its client gone, or the server restarted
/// since it registered (connection ids start again, so the row's id may
/// now be anyone's). A ring for it must interrupt no other connection.
/// Made here: a waiter of a client that is gone, at the head of the queue,
/// whose bell row names a connection of the test's own, asleep in a query;
/// the release hands the lock to that waiter and rings its bell, and the
/// test's query must run to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_ring_for_a_gone_bell_interrupts_no_other_connection() {
    let server = MariaDbServer::start();
    let holder = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    let guard = holder.semaphore("k", 1).acquire().await.unwrap();
    // A real waiter's row, to copy: its key and token as the store writes
    // them.
    let gone = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let gone = gone.clone();
        async move {
            gone.semaphore("k", 1)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let queued = "SELECT COUNT(*) FROM lockguard.lockguard_waiters";
    until(&server, queued, "1", Duration::from_secs(10), "the waiter").await;
    let row = server.sql("SELECT HEX(k), HEX(token), attempt FROM lockguard.lockguard_waiters");
    let row: Vec<&str> = row.trim().split('\t').collect();
    let [k, token, attempt] = row[..] else {
        panic!("the waiter's row: {row:?}")
    };
    waiting.abort();
    drop(gone);
    until(
        &server,
        queued,
        "0",
        Duration::from_secs(10),
        "the waiter gone",
    )
    .await;

    // The test's own connection, asleep in a query.
    let mut victim = conn(&server).await;
    let victim_id = victim.id();
    let asleep = tokio::spawn(async move {
        let r: Result<Option<i64>, _> = victim.query_first("SELECT SLEEP(2)").await;
        r.map_err(|e| e.to_string())
    });
    let sleeping = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {victim_id} \
         AND INFO = 'SELECT SLEEP(2)'"
    );
    until(&server, &sleeping, "1", Duration::from_secs(5), "the query").await;
    // The gone client's waiter, back at the head of the queue, and a bell
    // row naming the test's connection.
    let channel = "lockguard:waiters:0123456789abcdef0123456789abcdef";
    server.sql(&format!(
        "INSERT INTO lockguard.lockguard_waiters (k, token, arrival, deadline_us, attempt, channel) \
         VALUES (0x{k}, 0x{token}, 0, \
         CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) + 60000000, {attempt}, '{channel}'); \
         INSERT INTO lockguard.lockguard_bells (channel, conn, at_us, rung) \
         VALUES ('{channel}', {victim_id}, 0, 0)"
    ));
    assert!(guard.release().await.unwrap());
    // The release handed the lock to that waiter and rang its bell.
    assert_eq!(
        server
            .sql(&format!(
                "SELECT (SELECT COUNT(*) FROM lockguard.lockguard_handoffs WHERE channel = '{channel}'), \
                 (SELECT rung FROM lockguard.lockguard_bells WHERE channel = '{channel}')"
            ))
            .trim(),
        "1\t1",
        "the handoff and the ring (handoffs, rung)"
    );
    // Interrupted, SLEEP answers 1, or the query fails.
    assert_eq!(
        asleep.await.unwrap(),
        Ok(Some(0)),
        "the ring interrupted a connection that is no bell"
    );
}

/// A mailbox row the bell cannot read (a negative fence and attempt, which
/// no lockguard writes) is removed with the rest: left in the mailbox, it
/// would end every one of the bell's waits at once (the wait returns while
/// a handoff waits), a loop of reads for as long as the client lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_mailbox_row_the_bell_cannot_read_is_removed() {
    let server = MariaDbServer::start();
    let holder = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    // Its waiters refresh every 10 s: woken sooner, by the bell.
    let waiter = lockguard_mysql::MySqlBuilder::new(faults::patient())
        .connect_mysql(&server.url())
        .await
        .unwrap();
    // The waiter's bell, listening.
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "k").await;
    let mut setup = conn(&server).await;
    setup
        .query_drop(
            "INSERT INTO lockguard_handoffs (channel, token, fence, attempt, at_us) \
             SELECT channel, 'unreadable', -1, -1, 0 FROM lockguard_bells",
        )
        .await
        .unwrap();
    let bell: u64 = server
        .sql("SELECT conn FROM lockguard.lockguard_bells")
        .trim()
        .parse()
        .expect("the bell's connection id");
    setup
        .query_drop(format!("KILL QUERY {bell}"))
        .await
        .unwrap();
    until(
        &server,
        "SELECT COUNT(*) FROM lockguard.lockguard_handoffs",
        "0",
        Duration::from_secs(5),
        "the unreadable row removed",
    )
    .await;
    // And the bell still wakes its waiters.
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter, "k").await;
}

/// A bell's row may be gone while the bell waits: the sweep removes rows
/// not renewed within five minutes (a clock step, or a client paused that
/// long with its connections alive), and an operator may clear the table.
/// A ring must still reach the bell: the waiter, which refreshes only every
/// 20 s, is woken by the release at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_bell_whose_row_was_removed_is_still_rung() {
    let server = MariaDbServer::start();
    let holder = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    let waiter = lockguard_mysql::MySqlBuilder::new(faults::patient())
        .connect_mysql(&server.url())
        .await
        .unwrap();
    // The waiter's bell, up and asleep in its wait.
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "k").await;
    assert_eq!(
        server.sql("SELECT COUNT(*) FROM lockguard.lockguard_bells"),
        "1"
    );
    server.sql("DELETE FROM lockguard.lockguard_bells");
    let took = faults::permit_handoff_latency(&holder, waiter.clone(), "k").await;
    assert!(
        took < Duration::from_secs(2),
        "the waiter took {took:?}: its bell, without a row, was not rung"
    );
    // Rung, the bell has its row back, and the next handoff rings it too.
    assert_eq!(
        server.sql("SELECT COUNT(*) FROM lockguard.lockguard_bells"),
        "1"
    );
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter, "k").await;
}

/// A relay on loopback whose cut is silent towards the server: the client's
/// side of every connection is closed, while the server's side stays open
/// and unread, with no FIN and no reset. It is what a link that fails
/// without a reset leaves on the server (the client gave its connections
/// up; the server sees them idle until its `wait_timeout`, 8 h by default).
/// The kit's `Relay` cannot make it: its cut closes both sides, and the
/// server sees an idle connection go at once.
struct SilentRelay {
    port: u16,
    shared: Arc<SilentShared>,
}

#[derive(Default)]
struct SilentShared {
    cut: AtomicBool,
    /// Connections turned away while cut.
    refused: std::sync::atomic::AtomicUsize,
    /// Each connection's sockets: the client's, and the server's.
    sockets: std::sync::Mutex<Vec<(std::net::TcpStream, std::net::TcpStream)>>,
    /// The server's sides of cut connections, kept open.
    kept: std::sync::Mutex<Vec<std::net::TcpStream>>,
}

impl SilentRelay {
    fn start(target: u16) -> Self {
        use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(SilentShared::default());
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if accepting.cut.load(Ordering::SeqCst) {
                    accepting.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                    continue;
                };
                accepting
                    .sockets
                    .lock()
                    .unwrap()
                    .push((client.try_clone().unwrap(), server.try_clone().unwrap()));
                for (mut from, mut to, towards_server) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        true,
                    ),
                    (server, client, false),
                ] {
                    let shared = accepting.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if shared.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err()
                            {
                                break;
                            }
                        }
                        // Cut: nothing reaches the server, not even an end.
                        if !(towards_server && shared.cut.load(Ordering::SeqCst)) {
                            let _ = to.shutdown(Shutdown::Write);
                        }
                    });
                }
            }
        });
        Self { port, shared }
    }

    /// Closes the client's side of every connection, leaves the server's
    /// open and silent, and turns new connections away.
    fn cut(&self) {
        use std::net::Shutdown;
        self.shared.cut.store(true, Ordering::SeqCst);
        for (client, server) in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
            self.shared.kept.lock().unwrap().push(server);
        }
    }

    /// Passes new connections again.
    fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

/// A link that fails without a reset leaves the bell's connections open on
/// the server: the holder of the bell's user lock idle (alive to the server
/// until its `wait_timeout`, 8 h by default), the bell in its wait. Once
/// the link is back, the client's new bell must take the lock from that
/// stale holder; waiting for it would leave every handoff to the client's
/// waiters to their timed refreshes for hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_stale_holder_of_the_bells_lock_after_a_silent_cut_is_reclaimed() {
    let server = MariaDbServer::start();
    let relay = SilentRelay::start(server.port());
    let holder = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    // Not over the server's unix socket, which the driver prefers on
    // this host (and which the relay would not see).
    let through_relay = format!(
        "{}?prefer_socket=false",
        server.url().replace(
            &format!(":{}/", server.port()),
            &format!(":{}/", relay.port)
        )
    );
    let waiter = lockguard_mysql::MySqlBuilder::new(faults::patient())
        .connect_mysql(&through_relay)
        .await
        .unwrap();
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "k").await;
    let bell_lock = "SELECT COUNT(*) FROM lockguard.lockguard_bells \
         WHERE IS_USED_LOCK(CONCAT('lockguard bell ', RIGHT(channel, 40))) IS NOT NULL";
    assert_eq!(server.sql(bell_lock), "1", "the bell's lock, held");
    let holders_before = server.sql(
        "SELECT IS_USED_LOCK(CONCAT('lockguard bell ', RIGHT(channel, 40))) \
         FROM lockguard.lockguard_bells",
    );

    relay.cut();
    // The client saw its bell's connections close, and tries to open them
    // again (turned away while cut).
    let started = Instant::now();
    while relay.refused() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the bell did not try to reconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The server still sees the old holder, holding the bell's lock.
    assert_eq!(
        server.sql(
            "SELECT IS_USED_LOCK(CONCAT('lockguard bell ', RIGHT(channel, 40))) \
             FROM lockguard.lockguard_bells"
        ),
        holders_before,
        "the stale holder"
    );
    relay.heal();
    // The bell is back, and rings again: the waiter (refreshing every 20 s)
    // is woken by the handoff.
    faults::a_permit_waiter_is_woken_by_the_handoff(&holder, waiter, "k").await;
    assert_ne!(
        server.sql(
            "SELECT IS_USED_LOCK(CONCAT('lockguard bell ', RIGHT(channel, 40))) \
             FROM lockguard.lockguard_bells"
        ),
        holders_before,
        "the bell's lock, taken from the stale holder"
    );
}
