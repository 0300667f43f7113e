//! The conformance kit on MySQL (on MariaDB): one server for the test
//! binary, a table prefix of each test's own. The wake-up groups run in a
//! binary of their own (`conformance_wake_ups`), after this one.

mod support;

use std::time::Duration;

use lockguard_core::Client;
use lockguard_mysql::MySqlBuilder;
use lockguard_testing::MariaDbServer;
use lockguard_testing::conformance::eventually;
use support::MySql;

lockguard_testing::conformance!(
    mysql => MySql::start();
    locks, semaphores, queue, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);

// The lock suites again, on clients whose locks are of session leases.
lockguard_testing::conformance!(
    mysql_session => MySql::session();
    locks, queue, inspection, survey, leader
);

/// A lock's holders, as the server sees them: each user lock of the
/// tables `prefix` names that a session holds, with the key and newest
/// token `lock_fences` keeps for it, and the holding connection's id.
fn user_locks(server: &MariaDbServer, prefix: &str) -> Vec<(String, u64, u64)> {
    server
        .sql(&format!(
            "SELECT HEX(f.k), f.fence, IS_USED_LOCK(CONCAT('lockguard ', HEX(f.h))) \
               FROM lockguard.{prefix}lock_fences f \
              WHERE IS_USED_LOCK(CONCAT('lockguard ', HEX(f.h))) IS NOT NULL ORDER BY 1"
        ))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            let mut next = || f.next().expect("three columns").to_owned();
            let (hex, fence, conn) = (next(), next(), next());
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (
                String::from_utf8(bytes).expect("a key"),
                fence.parse().expect("a fence"),
                conn.parse().expect("an id"),
            )
        })
        .collect()
}

/// A client on the shared server with tables of its own.
async fn prefixed(server: &MariaDbServer, prefix: &str) -> lockguard_core::Client {
    MySqlBuilder::new(Client::builder())
        .table_prefix(prefix)
        .connect_mysql(&server.url())
        .await
        .unwrap()
}

/// A multi-lock takes its keys one by one, each a user lock held by a
/// session of its own, with the guard's fencing token in `lock_fences`. A
/// multi-lock that finds a key busy takes none of the others, and a
/// release leaves no user lock behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_locks_keys_are_user_locks_of_sessions_of_their_own() {
    let server = MariaDbServer::shared();
    let prefix = format!("multi{}_", std::process::id());
    let lg = prefixed(server, &prefix).await;
    let g = lg
        .multi_lock(["m:1", "m:2", "m:\"3\\"])
        .try_acquire()
        .await
        .expect("three free keys");
    let holds = user_locks(server, &prefix);
    assert_eq!(holds.len(), 3, "{holds:?}");
    let mut conns: Vec<u64> = holds.iter().map(|h| h.2).collect();
    conns.sort_unstable();
    conns.dedup();
    assert_eq!(conns.len(), 3, "keys held by one session: {holds:?}");
    for (name, fence) in g.fencing_tokens() {
        let (_, kept, _) = holds
            .iter()
            .find(|h| h.0.contains(&name.replace('\\', "\\\\")))
            .unwrap_or_else(|| panic!("{name} is no user lock: {holds:?}"));
        assert_eq!(
            *kept,
            fence.get(),
            "{name}: lock_fences keeps another token"
        );
    }

    // All or none: the last key held, neither of the free two is taken.
    let other = prefixed(server, &prefix).await;
    let e = other
        .multi_lock(["m:4", "m:5", "m:\"3\\"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    let left = eventually(Duration::from_secs(2), || async {
        user_locks(server, &prefix).len() == 3
    })
    .await;
    assert!(
        left,
        "a busy multi-lock kept keys: {:?}",
        user_locks(server, &prefix)
    );
    let free = other
        .multi_lock(["m:4", "m:5"])
        .try_acquire()
        .await
        .unwrap();
    assert_eq!(user_locks(server, &prefix).len(), 5);
    assert!(g.release().await.unwrap());
    assert!(free.release().await.unwrap());
    let none = eventually(Duration::from_secs(2), || async {
        user_locks(server, &prefix).is_empty()
    })
    .await;
    assert!(
        none,
        "released keys still held: {:?}",
        user_locks(server, &prefix)
    );
}

/// A lock's waiter waits in the server: its session waits in `GET_LOCK`
/// for the lock's user lock, which the holder's release grants it at once
/// (well before the waiter's first refresh, 20 s in). Neither opens a bell
/// (no row of `bells`), nor writes a row of an InnoDB table (`keys`, and
/// the semaphores' `holders`, `waiters`, `handoffs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locks_waiter_waits_in_the_server_with_no_bell_and_no_row() {
    let server = MariaDbServer::shared();
    let prefix = format!("wait{}_", std::process::id());
    let holder = prefixed(server, &prefix).await;
    let waiter = MySqlBuilder::new(lockguard_testing::faults::patient())
        .table_prefix(prefix.as_str())
        .connect_mysql(&server.url())
        .await
        .unwrap();
    let held = holder
        .lock("w")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("w")
            .wait(Duration::from_secs(25))
            .acquire()
            .await
    });
    let waits = || {
        server.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
              WHERE STATE = 'User lock' AND INFO LIKE '%{prefix}lock_wait%'"
        ))
    };
    let queued = eventually(Duration::from_secs(10), || async { waits().trim() == "1" }).await;
    assert!(queued, "no session waits in GET_LOCK: {}", waits());
    assert_eq!(holder.lock("w").inspect().await.unwrap().waiters, 1);
    let rows = || {
        server.sql(&format!(
            "SELECT (SELECT COUNT(*) FROM lockguard.{prefix}holders) \
                  + (SELECT COUNT(*) FROM lockguard.{prefix}waiters) \
                  + (SELECT COUNT(*) FROM lockguard.{prefix}handoffs) \
                  + (SELECT COUNT(*) FROM lockguard.{prefix}bells)"
        ))
    };
    assert_eq!(
        rows().trim(),
        "0",
        "a lock's wait wrote InnoDB rows or a bell"
    );

    assert!(held.release().await.unwrap());
    let g = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the release did not grant the lock to its waiter")
        .unwrap()
        .expect("the waiter's lock");
    let holds = user_locks(server, &prefix);
    assert!(
        holds.len() == 1 && holds[0].1 == g.fencing_token().get(),
        "the waiter's hold as the server has it: {holds:?}"
    );
    assert_eq!(
        rows().trim(),
        "0",
        "a lock's handoff wrote InnoDB rows or a bell"
    );
    assert!(g.release().await.unwrap());
}

/// A survey lists the locks under its prefix alone, the prefix read as
/// bytes: one holding `_`, `%` and `\` (LIKE's wildcards and escape) never
/// lists another prefix's locks that a pattern would match, nor one that
/// merely starts the same; an empty prefix lists every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survey_lists_its_own_prefix_alone() {
    use lockguard_core::Client;
    use lockguard_mysql::MySqlOptions;

    let server = lockguard_testing::MariaDbServer::shared();
    let store = MySqlOptions::new()
        .table_prefix(format!("survey{}_", std::process::id()))
        .connect(&server.url())
        .await
        .unwrap();
    let prefixes = ["a_%\\:", "ab:", "a_%:", "a_%\\:x:", "a_%\\;"];
    let (mut guards, mut reads) = (Vec::new(), Vec::new());
    for prefix in prefixes {
        let lg = Client::builder()
            .prefix(prefix)
            .build(store.clone())
            .unwrap();
        guards.push(lg.lock("n").try_acquire().await.unwrap());
        reads.push(lg.rw_lock("d").read().try_acquire().await.unwrap());
    }
    let ids = |prefix: &'static str| {
        let store = store.clone();
        async move {
            let mut ids: Vec<String> = store
                .survey(prefix)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.id)
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(
        ids("a_%\\:").await,
        [
            "a_%\\:lock:{n}",
            "a_%\\:rw:{d}",
            "a_%\\:x:lock:{n}",
            "a_%\\:x:rw:{d}"
        ]
    );
    assert_eq!(ids("ab:").await, ["ab:lock:{n}", "ab:rw:{d}"]);
    assert_eq!(ids("").await.len(), 2 * prefixes.len());
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    for read in reads {
        assert!(read.release().await.unwrap());
    }
    assert!(ids("").await.is_empty());
}
