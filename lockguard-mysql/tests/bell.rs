//! The bell (see `src/bell.rs`) against a real MariaDB, through the race
//! that once left it deaf: a release's ring that comes while the bell
//! reads its mailbox, just after the read took the handoff the ring is
//! for.

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
    let holder = lockguard_mysql::connect(&server.url()).await.unwrap();
    // Refreshes every 20 s: woken sooner, the waiter was woken by its
    // bell. Its requests may wait 10 s for a row lock, longer than the
    // test holds one.
    let waiter = lockguard_mysql::connect_with(
        Client::builder()
            .waiter_timeout(Duration::from_secs(60))
            .retry_interval(Duration::from_secs(20))
            .response_timeout(Duration::from_secs(10)),
        &server.url(),
    )
    .await
    .unwrap();
    let guard = holder.lock("k").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .lock("k")
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
            lockguard_mysql::connect_with(builder, &server.url())
                .await
                .unwrap(),
        );
    }
    // Both bells listening (registered, their ring locks taken) before the
    // killer starts.
    for (n, c) in clients.iter().enumerate() {
        let g = c.lock("warm-up").acquire().await.unwrap();
        let waiting = tokio::spawn({
            let c = c.clone();
            async move {
                c.lock("warm-up")
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
            .lock("handoffs")
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
    let holder = lockguard_mysql::connect(&server.url()).await.unwrap();
    let guard = holder.lock("k").acquire().await.unwrap();
    // A real waiter's row, to copy: its key and token as the store writes
    // them.
    let gone = lockguard_mysql::connect(&server.url()).await.unwrap();
    let waiting = tokio::spawn({
        let gone = gone.clone();
        async move { gone.lock("k").wait(Duration::from_secs(60)).acquire().await }
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
    let holder = lockguard_mysql::connect(&server.url()).await.unwrap();
    // Its waiters refresh every 10 s: woken sooner, by the bell.
    let waiter = lockguard_mysql::connect_with(faults::patient(), &server.url())
        .await
        .unwrap();
    // The waiter's bell, listening.
    faults::a_waiter_is_woken_by_the_handoff(&holder, waiter.clone(), "k").await;
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
    faults::a_waiter_is_woken_by_the_handoff(&holder, waiter, "k").await;
}
