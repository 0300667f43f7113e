//! The MySQL store as a database administrator deploys it, on real MariaDB
//! servers: the schema installed by hand and used by a user with only the
//! grants the docs name, and a server whose binary log is in a format
//! lockguard's sessions cannot write to.

use lockguard_mysql::ClientExt as _;
use std::time::Duration;

use lockguard_core::ErrorKind;
use lockguard_core::check::Verdict;
use lockguard_testing::{MariaDbServer, faults};

/// The grants docs/mysql.md names for a user of an installed schema.
const GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE, EXECUTE";

/// A DBA installs the schema (the SQL of `migration_sql`, through the
/// `mariadb` client, as root) and the service's user has only
/// `SELECT, INSERT, UPDATE, DELETE, EXECUTE` on the database: it connects,
/// locks, waits (its bell up, rung by another client's release), counts
/// and limits. A client of another user shares the locks: rings run as the
/// procedures' definer, so they reach the bells of either user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_least_privileged_user_works_on_an_installed_schema() {
    let server = MariaDbServer::start();
    let install = lockguard_mysql::migration_sql(lockguard_mysql::DEFAULT_TABLE_PREFIX).unwrap();
    server.sql(&format!("USE lockguard;\n{install}"));
    server.sql(&format!(
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; \
         GRANT {GRANTS} ON lockguard.* TO 'app'@'%';"
    ));
    let url = server.url_as("app", "app", "lockguard");
    let app = lockguard_core::Client::connect_mysql(&url)
        .await
        .unwrap_or_else(|e| panic!("the least-privileged user connects: {e}"));
    let guard = app.lock("order:1").try_acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
    assert_eq!(app.counter("stock").incr_by(3).await.unwrap(), 3);
    let waiter = lockguard_mysql::MySqlBuilder::new(faults::patient())
        .connect_mysql(&url)
        .await
        .unwrap();
    faults::a_waiter_is_woken_by_the_handoff(&app, waiter.clone(), "k").await;
    // Another user's client (the harness's, with every privilege), either
    // side of a handoff.
    let other = lockguard_mysql::MySqlBuilder::new(faults::patient())
        .connect_mysql(&server.url())
        .await
        .unwrap();
    faults::a_waiter_is_woken_by_the_handoff(&other, waiter, "k").await;
    faults::a_waiter_is_woken_by_the_handoff(&app, other, "k").await;
    // The user never created anything: the schema is as installed.
    assert_eq!(
        server.sql(
            "SELECT COUNT(*) FROM information_schema.ROUTINES \
             WHERE ROUTINE_SCHEMA = 'lockguard' AND DEFINER <> 'root@localhost'"
        ),
        "0"
    );
}

/// With the binary log in `STATEMENT` format, InnoDB refuses every write of
/// a READ COMMITTED session (lockguard's): a setting of the server to fix,
/// `Misconfigured` with the fix in the message, at connect and at any
/// operation that writes InnoDB rows, and a failure of `lockguard check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_statement_binlog_format_is_misconfigured_and_checked() {
    let server = MariaDbServer::start_with(&["--log-bin=binlog", "--binlog-format=STATEMENT"]);
    let err = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(
        err.to_string().contains("binlog_format = ROW") && !err.is_retryable(),
        "{err}"
    );
    let report = lockguard_mysql::check::check(&server.url()).await.unwrap();
    let finding = report
        .about("binlog_format")
        .next()
        .unwrap_or_else(|| panic!("no binlog_format finding: {report:?}"));
    assert_eq!(finding.verdict, Verdict::Fail, "{finding:?}");
    assert!(finding.detail.contains("ROW"), "{finding:?}");

    // Installed while the format was ROW; then STATEMENT again, for the
    // sessions opened from now on.
    server.sql("SET GLOBAL binlog_format = 'ROW'");
    let report = lockguard_mysql::check::check(&server.url()).await.unwrap();
    let finding = report.about("binlog_format").next().unwrap();
    assert_eq!(finding.verdict, Verdict::Ok, "{finding:?}");
    drop(
        lockguard_core::Client::connect_mysql(&server.url())
            .await
            .unwrap(),
    );
    server.sql("SET GLOBAL binlog_format = 'STATEMENT'");
    let lg = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    let err = lg
        .semaphore("k", 2)
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    // A lock's fencing token comes from a sequence on MariaDB, whose
    // draws are logged by row: refused too, and told so.
    let err = lg.lock("k").try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    let err = lg.counter("c").incr_by(1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
}

/// Tables of schema version 5, whose fenced values had a `NOT NULL` value
/// and no removal, are brought up to date by a client of this version: a
/// value written before is removed, and its token stays; the read-write
/// locks of version 8 work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_schema_of_version_5_gets_removable_fenced_values() {
    use lockguard_core::FencingToken;
    let server = MariaDbServer::shared();
    let prefix = "v5_";
    let url = server.url();
    let connect = || {
        lockguard_mysql::MySqlBuilder::new(lockguard_core::Client::builder())
            .table_prefix(prefix)
            .connect_mysql(&url)
    };
    let before = connect().await.unwrap();
    before
        .fenced("old")
        .write(FencingToken::new(7), "before")
        .await
        .unwrap();
    let current = server.sql(&format!("SELECT version FROM lockguard.{prefix}meta"));
    // The tables taken back to what version 5 had.
    server.sql(&format!(
        "USE lockguard;\n\
         ALTER TABLE {prefix}fenced MODIFY value LONGBLOB NOT NULL;\n\
         DROP PROCEDURE {prefix}fenced_remove;\n\
         UPDATE {prefix}meta SET version = 5;"
    ));
    let lg = connect().await.unwrap();
    assert_eq!(
        server.sql(&format!("SELECT version FROM lockguard.{prefix}meta")),
        current,
        "brought back to the version a new schema has"
    );
    let fenced = lg.fenced("old");
    assert_eq!(
        fenced.read().await.unwrap().map(|v| v.value),
        Some(b"before".to_vec())
    );
    let stale = fenced.remove(FencingToken::new(6)).await.unwrap_err();
    assert!(stale.is_stale_fencing_token(), "{stale}");
    fenced.remove(FencingToken::new(7)).await.unwrap();
    assert_eq!(fenced.read().await.unwrap(), None);
    let stale = fenced
        .write(FencingToken::new(6), "late")
        .await
        .unwrap_err();
    assert!(stale.is_stale_fencing_token(), "{stale}");
    // Version 8's read-write locks are there too.
    let rw = lg.rw_lock("upgraded");
    let read = rw.read().try_acquire().await.unwrap();
    assert!(rw.write().try_acquire().await.unwrap_err().is_busy());
    assert!(read.release().await.unwrap());
}

/// `lockguard check` says how long locks wait after a restart: the
/// longest lease any lock took, a warning past five minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_check_says_how_long_locks_wait_after_a_restart() {
    let server = MariaDbServer::start();
    let lg = lockguard_core::Client::connect_mysql(&server.url())
        .await
        .unwrap();
    let crash_wait = async || {
        let report = lockguard_mysql::check::check(&server.url()).await.unwrap();
        report
            .about("crash wait")
            .next()
            .cloned()
            .unwrap_or_else(|| panic!("no crash wait finding: {report:?}"))
    };
    let finding = crash_wait().await;
    assert_eq!(finding.verdict, Verdict::Ok, "{finding:?}");
    // A lock on a lease of ten minutes: every restart now waits that long.
    let long = lg
        .lock("long")
        .lease(Duration::from_secs(600))
        .try_acquire()
        .await
        .unwrap();
    let finding = crash_wait().await;
    assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
    assert!(finding.detail.starts_with("600s"), "{finding:?}");
    assert!(long.release().await.unwrap());
}

/// Each lock held or awaited is a connection of its client's own:
/// `lockguard check` reads `max_connections` against the connections in
/// use, and warns when few are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_check_counts_connections_against_max_connections() {
    let server = MariaDbServer::start();
    let report = lockguard_mysql::check::check(&server.url()).await.unwrap();
    let finding = report
        .about("max_connections")
        .next()
        .unwrap_or_else(|| panic!("no max_connections finding: {report:?}"));
    assert_eq!(finding.verdict, Verdict::Ok, "{finding:?}");
    assert!(finding.detail.contains("allowed"), "{finding:?}");

    server.sql("SET GLOBAL max_connections = 20");
    let report = lockguard_mysql::check::check(&server.url()).await.unwrap();
    let finding = report.about("max_connections").next().unwrap();
    assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
    assert!(
        finding.detail.contains("raise max_connections"),
        "{finding:?}"
    );
}
