//! The deployment check of a MySQL or MariaDB server: what a lock's
//! guarantees depend on (durability of commits, the server's replication
//! role and replicas, lockguard's tables), read from the server. The
//! facade's `lockguard::check(url)` and `lockguard check URL` call it.

use std::time::Duration;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::store::net;
use lockguard_core::{Error, ErrorKind, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};

use crate::error::mysql_error;
use crate::options::DEFAULT_TABLE_PREFIX;
use crate::schema::VERSION;

const EXCLUSION: &str = "mutual exclusion and fencing";
const AVAILABILITY: &str = "availability";

/// How long connecting and each query may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The statements that make lockguard's tables: their names are read from
/// it.
const SCHEMA: &str = include_str!("schema.sql");

/// Checks the MySQL or MariaDB server at `url`
/// (`mysql://user:password@host:port/database`), and lockguard's tables in
/// that database under their default prefix.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL or one that names no
/// database, [`ErrorKind::Unavailable`] when the server cannot be reached,
/// [`ErrorKind::Unauthorized`] when it refuses the user.
pub async fn check(url: &str) -> Result<Report> {
    let opts = Opts::from_url(url)
        .map_err(|e| Error::new(ErrorKind::InvalidInput, "malformed mysql url").with_source(e))?;
    let opts = crate::tls::apply(opts, &crate::tls::TlsSettings::default())?;
    if opts.db_name().is_none_or(str::is_empty) {
        return Err(Error::invalid(
            "the mysql url names no database (mysql://user:password@host/DATABASE): \
             lockguard's tables are looked for there",
        ));
    }
    let what = "connecting to mysql to check";
    let mut conn = net::within(
        TIMEOUT,
        "mysql",
        || what.to_owned(),
        tokio::time::timeout(TIMEOUT, async {
            Conn::new(opts).await.map_err(|e| mysql_error(e, what))
        })
        .await,
    )?;
    let findings = findings(&mut conn).await;
    let _ = conn.disconnect().await;
    Ok(Report::new("mysql", findings?))
}

async fn findings(conn: &mut Conn) -> Result<Vec<Finding>> {
    let version: String = one(conn, "SELECT VERSION()").await?;
    let settings: (String, String, String, String, String) = one(
        conn,
        "SELECT CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS CHAR), \
         CAST(@@GLOBAL.log_bin AS CHAR), CAST(@@GLOBAL.sync_binlog AS CHAR), \
         CAST(@@GLOBAL.read_only AS CHAR), CAST(@@GLOBAL.binlog_format AS CHAR)",
    )
    .await?;
    let (flush, log_bin, sync_binlog, read_only, binlog_format) = settings;
    let mut out = vec![version_finding(&version)];
    out.push(flush_finding(&flush));
    out.push(binlog_format_finding(on(&log_bin), &binlog_format));
    out.push(if !on(&log_bin) {
        Finding::new(
            Verdict::Ok,
            "sync_binlog",
            "binary logging is off: no replica or binlog recovery depends on it",
            EXCLUSION,
        )
    } else if sync_binlog == "1" {
        Finding::new(
            Verdict::Ok,
            "sync_binlog",
            "1: every commit is in the binary log on disk before it is acknowledged",
            EXCLUSION,
        )
    } else {
        Finding::new(
            Verdict::Warn,
            "sync_binlog",
            format!(
                "{sync_binlog} with binary logging on: a machine crash can lose binary log \
                 events of commits the server acknowledged, so a replica (or a recovery from the \
                 log) misses a lock write and can grant the lock again; set sync_binlog = 1"
            ),
            EXCLUSION,
        )
    });
    out.push(replication(conn, on(&read_only)).await);
    let max: u64 = one(conn, "SELECT @@GLOBAL.max_connections").await?;
    let (_, connected): (String, u64) =
        one(conn, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").await?;
    out.push(connections_finding(max, connected));
    let schema = schema(conn).await?;
    let current = schema.verdict == Verdict::Ok;
    out.push(schema);
    if current {
        out.push(crash_wait(conn).await);
    }
    Ok(out)
}

/// How long locks wait after a restart (the longest lease any lock took,
/// `lock_bound`), and what is left of a wait running now.
async fn crash_wait(conn: &mut Conn) -> Finding {
    let p = DEFAULT_TABLE_PREFIX;
    let sql = format!(
        "SELECT COALESCE((SELECT MAX(b.lease_ms) FROM {p}lock_bound b), 0), \
                (SELECT MAX(e.until_us) FROM {p}lock_epoch e) - {now}",
        now = crate::schema::clock_us(crate::schema::NOW)
    );
    let answer = tokio::time::timeout(TIMEOUT, conn.query_first::<(i64, Option<i64>), _>(sql));
    match answer.await {
        Ok(Ok(Some((bound, left)))) => Finding::crash_wait(
            Duration::from_millis(u64::try_from(bound).unwrap_or(0)),
            left.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))),
            &format!("{p}lock_bound"),
            EXCLUSION,
        ),
        _ => Finding::new(
            Verdict::Warn,
            "crash wait",
            "unknown: the longest lease could not be read",
            EXCLUSION,
        ),
    }
}

/// Fewest connections left free before the check warns.
const FEW_CONNECTIONS: u64 = 32;

/// Each lock held or awaited is a connection of its client's own: the
/// server's `max_connections` bounds them, with every client's pool.
fn connections_finding(max: u64, connected: u64) -> Finding {
    let free = max.saturating_sub(connected);
    let what = format!(
        "{max} allowed, {connected} in use: each lock held or awaited (a lock, an election, \
         a scheduled job, each key of a multi-lock) is a connection of its client's own, \
         beside each client's pool"
    );
    if free < FEW_CONNECTIONS {
        Finding::new(
            Verdict::Warn,
            "max_connections",
            format!(
                "{what}; only {free} free, so further locks and waits fail to connect; \
                 raise max_connections"
            ),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Ok,
            "max_connections",
            format!("{what}; {free} free"),
            AVAILABILITY,
        )
    }
}

/// Whether a setting read as text is on.
fn on(value: &str) -> bool {
    matches!(value.to_ascii_uppercase().as_str(), "1" | "ON")
}

fn version_finding(version: &str) -> Finding {
    let mariadb = version.contains("MariaDB");
    let numbers: Vec<u32> = version
        .split(['.', '-'])
        .take(2)
        .filter_map(|p| p.parse().ok())
        .collect();
    let (major, minor) = (
        numbers.first().copied().unwrap_or(0),
        numbers.get(1).copied().unwrap_or(0),
    );
    let shown = version.split('-').next().unwrap_or(version);
    if mariadb && (major, minor) >= (10, 11) {
        Finding::new(
            Verdict::Ok,
            "version",
            format!("MariaDB {shown}"),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Warn,
            "version",
            format!(
                "{} {shown}: lockguard is tested on MariaDB 10.11 (MySQL 8 should work: nothing \
                 MariaDB-only is used); run its tests on this server before relying on it",
                if mariadb { "MariaDB" } else { "MySQL" }
            ),
            AVAILABILITY,
        )
    }
}

/// The binary log's format: in `STATEMENT`, InnoDB refuses every write of
/// a READ COMMITTED session, and lockguard's sessions are.
fn binlog_format_finding(log_bin: bool, format: &str) -> Finding {
    let subject = "binlog_format";
    if !log_bin {
        Finding::new(
            Verdict::Ok,
            subject,
            "binary logging is off: any format serves",
            AVAILABILITY,
        )
    } else if format.eq_ignore_ascii_case("STATEMENT") {
        Finding::new(
            Verdict::Fail,
            subject,
            "STATEMENT with binary logging on: InnoDB refuses every write of a READ COMMITTED \
             session, and lockguard's sessions are, so every operation fails; set \
             binlog_format = ROW (or MIXED) in the server's configuration and SET GLOBAL \
             binlog_format = 'ROW'",
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Ok,
            subject,
            format!("{format}: InnoDB logs lockguard's writes by row"),
            AVAILABILITY,
        )
    }
}

fn flush_finding(flush: &str) -> Finding {
    let subject = "innodb_flush_log_at_trx_commit";
    match flush {
        // 3 (MariaDB): as 1, without group commit's own flush.
        "1" | "3" => Finding::new(
            Verdict::Ok,
            subject,
            format!("{flush}: every commit is on disk before it is acknowledged"),
            EXCLUSION,
        ),
        "2" => Finding::new(
            Verdict::Warn,
            subject,
            "2: commits reach the operating system at once and the disk about once a second, \
             so a crash of the server keeps them but a machine crash or power loss can lose \
             the last second of acknowledged lock writes (two holders, a fencing token handed \
             out twice); set it to 1",
            EXCLUSION,
        ),
        other => Finding::new(
            Verdict::Fail,
            subject,
            format!(
                "{other}: commits are written about once a second, so a crash of the server \
                 loses the last second of acknowledged lock writes (two holders, a fencing \
                 token handed out twice); set it to 1"
            ),
            EXCLUSION,
        ),
    }
}

/// The server's replication role and its replicas.
async fn replication(conn: &mut Conn, read_only: bool) -> Finding {
    let subject = "replication";
    // The newer statement first; each server knows one of them at least.
    let status = first_answer(conn, &["SHOW REPLICA STATUS", "SHOW SLAVE STATUS"]).await;
    if status.as_ref().is_some_and(|rows| !rows.is_empty()) {
        return Finding::new(
            Verdict::Fail,
            subject,
            "a replica: it applies its primary's writes, and lockguard's writes there are \
             refused (read_only) or lost at the next change from the primary; point the URL at \
             the primary",
            AVAILABILITY,
        );
    }
    if read_only {
        return Finding::new(
            Verdict::Fail,
            subject,
            "read_only is on: the server refuses lockguard's writes (a user with SUPER or \
             READ ONLY ADMIN gets through, which is worse on a standby); point the URL at the \
             primary",
            AVAILABILITY,
        );
    }
    let replicas = first_answer(
        conn,
        &["SHOW REPLICAS", "SHOW REPLICA HOSTS", "SHOW SLAVE HOSTS"],
    )
    .await
    .map(|rows| rows.len());
    let semi_sync: Option<String> = net::within(
        TIMEOUT,
        "mysql",
        || subject.to_owned(),
        tokio::time::timeout(TIMEOUT, async {
            conn.query_first(
                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE \
             VARIABLE_NAME IN ('RPL_SEMI_SYNC_MASTER_ENABLED', 'RPL_SEMI_SYNC_SOURCE_ENABLED')",
            )
            .await
            .map_err(|e| mysql_error(e, subject))
        })
        .await,
    )
    .ok()
    .flatten();
    match (status, replicas) {
        (_, Some(0)) => Finding::new(
            Verdict::Ok,
            subject,
            "a primary with no replica: no failover can lose a lock",
            EXCLUSION,
        ),
        (_, Some(n)) if semi_sync.as_deref().is_some_and(on) => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "a primary with {n} replica(s), semi-synchronous: a commit waits for a replica \
                 to receive it, until the wait times out and replication goes on \
                 asynchronously; then promoting a replica may lose the last lock writes (two \
                 holders for up to a lease)"
            ),
            EXCLUSION,
        ),
        (_, Some(n)) => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "a primary with {n} replica(s), replicated asynchronously: promoting one may lose \
                 the last lock writes (two holders for up to a lease); fencing tokens still grow \
                 (they are drawn above the clock); semi-synchronous replication narrows the \
                 window"
            ),
            EXCLUSION,
        ),
        (None, None) | (Some(_), None) => Finding::new(
            Verdict::Warn,
            subject,
            "unknown: the user may not read the replication status (it needs REPLICATION \
             CLIENT, or REPLICA MONITOR on MariaDB); check by hand that the URL names the \
             primary",
            AVAILABILITY,
        ),
    }
}

/// The rows of the first of `statements` the server runs, or `None` when
/// it runs none (unknown syntax, or a privilege missing).
async fn first_answer(conn: &mut Conn, statements: &[&str]) -> Option<Vec<Row>> {
    for sql in statements {
        let rows = tokio::time::timeout(TIMEOUT, conn.query::<Row, _>(*sql)).await;
        if let Ok(Ok(rows)) = rows {
            return Some(rows);
        }
    }
    None
}

/// lockguard's tables under the default prefix: their version, and that
/// none is missing.
async fn schema(conn: &mut Conn) -> Result<Finding> {
    let p = DEFAULT_TABLE_PREFIX;
    let subject = "schema";
    let what = "reading the schema version";
    let found: std::result::Result<Option<i64>, _> = net::within(
        TIMEOUT,
        "mysql",
        || what.to_owned(),
        tokio::time::timeout(TIMEOUT, async {
            Ok(conn
                .query_first::<i64, _>(format!("SELECT version FROM {p}meta WHERE id = 1"))
                .await)
        })
        .await,
    )?;
    let version = match found {
        Ok(v) => v,
        Err(mysql_async::Error::Server(e)) if e.code == 1146 => {
            return Ok(Finding::new(
                Verdict::Warn,
                subject,
                format!(
                    "lockguard's tables ({p}*) do not exist yet: the first client creates them, \
                     which needs CREATE, ALTER, CREATE ROUTINE, ALTER ROUTINE and INDEX in the database \
                     (or run migration_sql by hand)"
                ),
                AVAILABILITY,
            ));
        }
        Err(e) => return Err(mysql_error(e, what)),
    };
    Ok(match version {
        Some(v) if v == VERSION => {
            let missing = missing_tables(conn).await?;
            if missing.is_empty() {
                Finding::new(
                    Verdict::Ok,
                    subject,
                    format!("{p}* at version {v}"),
                    AVAILABILITY,
                )
            } else {
                Finding::new(
                    Verdict::Fail,
                    subject,
                    format!(
                        "{p}* at version {v}, without {}: a client at this version creates \
                         nothing, and fails where it needs them; run migration_sql by hand",
                        missing.join(", ")
                    ),
                    AVAILABILITY,
                )
            }
        }
        Some(v) if v > VERSION => Finding::new(
            Verdict::Fail,
            subject,
            format!(
                "{p}* at version {v}, made by a newer lockguard: this one knows {VERSION} and \
                 refuses it"
            ),
            AVAILABILITY,
        ),
        v => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "{p}* at version {}: the next client brings it to {VERSION}",
                v.unwrap_or(0)
            ),
            AVAILABILITY,
        ),
    })
}

/// The tables of the schema that the database lacks.
async fn missing_tables(conn: &mut Conn) -> Result<Vec<String>> {
    let wanted = table_names(DEFAULT_TABLE_PREFIX);
    let what = "listing lockguard's tables";
    let present: Vec<String> = net::within(
        TIMEOUT,
        "mysql",
        || what.to_owned(),
        tokio::time::timeout(TIMEOUT, async {
            conn.exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE CONCAT(?, '%')",
                (DEFAULT_TABLE_PREFIX,),
            )
            .await
            .map_err(|e| mysql_error(e, what))
        })
        .await,
    )?;
    Ok(wanted
        .into_iter()
        .filter(|t| !present.iter().any(|p| p.eq_ignore_ascii_case(t)))
        .collect())
}

/// The names of the tables [`SCHEMA`] creates, with `prefix`.
fn table_names(prefix: &str) -> Vec<String> {
    SCHEMA
        .lines()
        .filter_map(|l| l.trim().strip_prefix("CREATE TABLE IF NOT EXISTS __P__"))
        .filter_map(|rest| rest.split([' ', '(']).next())
        .map(|name| format!("{prefix}{name}"))
        .collect()
}

/// The one row of `sql`, as `T`.
async fn one<T: mysql_async::prelude::FromRow + Send + 'static>(
    conn: &mut Conn,
    sql: &'static str,
) -> Result<T> {
    net::within(
        TIMEOUT,
        "mysql",
        || sql.to_owned(),
        tokio::time::timeout(TIMEOUT, async {
            conn.query_first::<T, _>(sql)
                .await
                .map_err(|e| mysql_error(e, sql))?
                .ok_or_else(|| Error::new(ErrorKind::Protocol, format!("{sql}: no row")))
        })
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_tables_are_read_from_it() {
        let names = table_names("lg_");
        assert!(names.contains(&"lg_meta".to_owned()), "{names:?}");
        assert!(names.contains(&"lg_limit_log".to_owned()), "{names:?}");
        assert!(names.contains(&"lg_rw_waiters".to_owned()), "{names:?}");
        assert_eq!(names.len(), 14, "{names:?}");
    }

    #[test]
    fn a_statement_binlog_fails_only_with_binary_logging_on() {
        assert_eq!(
            binlog_format_finding(true, "STATEMENT").verdict,
            Verdict::Fail
        );
        for (log_bin, format) in [(true, "ROW"), (true, "MIXED"), (false, "STATEMENT")] {
            assert_eq!(
                binlog_format_finding(log_bin, format).verdict,
                Verdict::Ok,
                "{log_bin} {format}"
            );
        }
    }

    #[test]
    fn few_free_connections_warn() {
        assert_eq!(connections_finding(151, 10).verdict, Verdict::Ok);
        assert_eq!(connections_finding(151, 130).verdict, Verdict::Warn);
        assert_eq!(connections_finding(10, 30).verdict, Verdict::Warn);
    }

    #[test]
    fn versions_are_read() {
        assert_eq!(
            version_finding("10.11.19-MariaDB-0+deb12u1").verdict,
            Verdict::Ok
        );
        assert_eq!(version_finding("11.4.2-MariaDB").verdict, Verdict::Ok);
        assert_eq!(version_finding("10.6.2-MariaDB").verdict, Verdict::Warn);
        assert_eq!(version_finding("8.0.36").verdict, Verdict::Warn);
    }
}
