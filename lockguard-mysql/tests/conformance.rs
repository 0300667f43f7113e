//! The conformance kit on MySQL (on MariaDB): one server for the test
//! binary, a table prefix of each test's own. The wake-up groups run in a
//! binary of their own (`conformance_wake_ups`), after this one.

mod support;

use support::MySql;

lockguard_testing::conformance!(
    mysql => MySql::start();
    locks, semaphores, queue, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);

/// A multi-lock of free keys takes them in one statement, in one
/// transaction: every key's lease ends at the same microsecond of the
/// database's clock (taken key by key, each statement would read the clock
/// anew). All or none: one held key keeps the others free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_on_free_keys_is_one_statement() {
    use lockguard_core::Client;
    use lockguard_mysql::MySqlBuilder;

    let server = lockguard_testing::MariaDbServer::shared();
    let prefix = format!("multi{}_", std::process::id());
    let url = server.url();
    let connect = || {
        MySqlBuilder::new(Client::builder())
            .table_prefix(prefix.as_str())
            .connect_mysql(&url)
    };
    let lg = connect().await.unwrap();
    let g = lg
        .multi_lock(["m:1", "m:2", "m:\"3\\"])
        .try_acquire()
        .await
        .expect("three free keys");
    let ends = server.sql(&format!(
        "SELECT COUNT(*), COUNT(DISTINCT expires_us) FROM lockguard.{prefix}holders"
    ));
    assert_eq!(ends.trim(), "3\t1", "holders, distinct lease ends");
    let fences: Vec<u64> = g.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert_eq!(fences.len(), 3);

    let other = connect().await.unwrap();
    let e = other
        .multi_lock(["m:4", "m:5", "m:\"3\\"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    let free = other
        .multi_lock(["m:4", "m:5"])
        .try_acquire()
        .await
        .expect("m:4 and m:5 left free");
    assert!(g.release().await.unwrap());
    assert!(free.release().await.unwrap());
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
