//! `FencedTable` on a real MariaDB: writes with stale tokens refused, rows
//! locked for the whole transaction, and a key column without a unique
//! index refused before it can lock a table.

use lockguard_mysql::ClientExt as _;
use std::time::Duration;

use lockguard_core::{ErrorKind, FencingToken};
use lockguard_mysql::FencedTable;
use lockguard_testing::MariaDbServer;
use lockguard_testing::conformance::eventually;
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts};

/// A pool on the shared server, and a fresh `table` of orders (`id` its
/// primary key) with the token column added as `add_column_sql` says and
/// order 1 in it.
async fn orders(table: &str) -> (Pool, FencedTable) {
    let pool = Pool::new(MariaDbServer::shared().url().as_str());
    let mut conn = pool.get_conn().await.unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, status VARCHAR(20) NOT NULL) ENGINE=InnoDB"
    ))
    .await
    .unwrap();
    let t = FencedTable::new(table, "id").unwrap();
    conn.query_drop(t.add_column_sql()).await.unwrap();
    conn.query_drop(format!(
        "INSERT INTO {table} (id, status) VALUES (1, 'new')"
    ))
    .await
    .unwrap();
    (pool, t)
}

async fn status(conn: &mut impl Queryable, table: &str) -> (String, u64) {
    conn.query_first(format!("SELECT status, fence FROM {table} WHERE id = 1"))
        .await
        .unwrap()
        .unwrap()
}

/// Tokens from real acquisitions: a write with the newer one is kept; one
/// with the older is refused as stale and changes nothing; the same write
/// again is no error; a missing row is `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_fenced_updates_refuse_older_tokens() {
    let (pool, t) = orders("fenced_orders").await;
    let lg = lockguard_core::Client::connect_mysql(&MariaDbServer::shared().url())
        .await
        .unwrap();
    let first = lg.lock("order:1").acquire().await.unwrap();
    let old = first.fencing_token();
    assert!(first.release().await.unwrap());
    let second = lg.lock("order:1").acquire().await.unwrap();
    let new = second.fencing_token();
    assert!(new > old);
    let mut conn = pool.get_conn().await.unwrap();

    assert!(
        t.update(&mut conn, 1u64, new, &[("status", "paid".into())])
            .await
            .unwrap()
    );
    let err = t
        .update(&mut conn, 1u64, old, &[("status", "cancelled".into())])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleFencingToken, "{err}");
    assert_eq!(
        status(&mut conn, "fenced_orders").await,
        ("paid".into(), new.get())
    );
    // Written again, unchanged (MySQL reports no row changed).
    assert!(
        t.update(&mut conn, 1u64, new, &[("status", "paid".into())])
            .await
            .unwrap()
    );
    assert!(
        !t.update(&mut conn, 2u64, new, &[("status", "paid".into())])
            .await
            .unwrap(),
        "no order 2"
    );
    assert!(second.release().await.unwrap());
}

/// `lock_row` holds the row until the transaction ends: another writer's
/// fenced update waits for it (seen waiting by the server), then goes
/// through after the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_locked_row_stays_locked_until_the_transaction_ends() {
    let (pool, t) = orders("fenced_locked").await;
    let mut conn = pool.get_conn().await.unwrap();
    let mut tx = conn.start_transaction(TxOpts::default()).await.unwrap();
    assert_eq!(
        t.lock_row(&mut tx, 1u64).await.unwrap(),
        Some(FencingToken::new(0))
    );
    assert_eq!(t.lock_row(&mut tx, 7u64).await.unwrap(), None);

    let (other, t2) = (pool.clone(), t.clone());
    let writer = tokio::spawn(async move {
        let mut conn = other.get_conn().await.unwrap();
        t2.update(
            &mut conn,
            1u64,
            FencingToken::new(5),
            &[("status", "shipped".into())],
        )
        .await
    });
    let waiting = eventually(Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            // InnoDB refreshes what INNODB_TRX shows only when it was not
            // read for 0.1 s: a quicker poll would read one picture forever.
            tokio::time::sleep(Duration::from_millis(150)).await;
            let mut watcher = pool.get_conn().await.unwrap();
            let n: Option<u64> = watcher
                .query_first(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX \
                     WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE '%fenced_locked%'",
                )
                .await
                .unwrap();
            n == Some(1)
        }
    })
    .await;
    if !waiting {
        let mut watcher = pool.get_conn().await.unwrap();
        let seen: Vec<(Option<String>, Option<String>)> = watcher
            .query("SELECT trx_state, trx_query FROM information_schema.INNODB_TRX")
            .await
            .unwrap();
        panic!("the other writer never waited for the row lock: {seen:?}");
    }
    assert!(!writer.is_finished());
    t.update(
        &mut tx,
        1u64,
        FencingToken::new(3),
        &[("status", "packed".into())],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(writer.await.unwrap().unwrap());
    let mut watcher = pool.get_conn().await.unwrap();
    assert_eq!(
        status(&mut watcher, "fenced_locked").await,
        ("shipped".into(), 5)
    );
}

/// A key column that leads no unique index would make InnoDB lock every
/// row the statement scans: refused with a clear error, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_an_unindexed_key_column_is_refused() {
    let (pool, _) = orders("fenced_unindexed").await;
    let mut conn = pool.get_conn().await.unwrap();
    let by_status = FencedTable::new("fenced_unindexed", "status").unwrap();
    let err = by_status
        .update(
            &mut conn,
            "new",
            FencingToken::new(9),
            &[("status", "x".into())],
        )
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("index"),
        "{err}"
    );
    assert_eq!(
        status(&mut conn, "fenced_unindexed").await,
        ("new".into(), 0)
    );
    let missing = FencedTable::new("no_such_table", "id").unwrap();
    let err = missing
        .update(
            &mut conn,
            1u64,
            FencingToken::new(9),
            &[("status", "x".into())],
        )
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}

/// In a REPEATABLE READ transaction (MySQL's default) whose snapshot is
/// older than a newer token's write, a write with an older token is stale:
/// the update finds the row's newest token, not the one its snapshot
/// shows (which would let it see nothing newer than its own token, and
/// answer that the row kept changing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_stale_token_in_a_repeatable_read_transaction_is_stale() {
    let (pool, t) = orders("fenced_repeatable").await;
    let mut conn = pool.get_conn().await.unwrap();
    let mut opts = TxOpts::default();
    opts.with_isolation_level(mysql_async::IsolationLevel::RepeatableRead)
        .with_consistent_snapshot(true);
    let mut tx = conn.start_transaction(opts).await.unwrap();
    // The snapshot sees the row as it is: token 0.
    assert_eq!(
        status(&mut tx, "fenced_repeatable").await,
        ("new".into(), 0)
    );
    // A newer holder writes, and commits.
    let mut other = pool.get_conn().await.unwrap();
    assert!(
        t.update(
            &mut other,
            1u64,
            FencingToken::new(5),
            &[("status", "shipped".into())]
        )
        .await
        .unwrap()
    );
    let err = t
        .update(
            &mut tx,
            1u64,
            FencingToken::new(3),
            &[("status", "packed".into())],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleFencingToken, "{err}");
    tx.rollback().await.unwrap();
    assert_eq!(
        status(&mut other, "fenced_repeatable").await,
        ("shipped".into(), 5)
    );
}
