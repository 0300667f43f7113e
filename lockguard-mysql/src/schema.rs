//! lockguard's tables and procedures: created on connect when missing or
//! older than this version.

use lockguard_core::{Error, ErrorKind, Result};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::error::{is_no_such_table, mysql_error};

/// The schema's version, kept in the `meta` table: a client finding an
/// older one (re)creates the procedures and adds what is missing; one
/// finding a newer one refuses to run on it.
///
/// Version 3: the bell's ring looks at the process list again while it
/// shows the bell's connection as `Busy`. Version 4: the ring finds the
/// bell by the user lock the bell's connection holds (no process list),
/// and the bell reads its mail (`read_mail`) and removes what it read in
/// two statements. `drain` stays for clients of version 3 still running,
/// whose bells are no longer rung. Version 5: time is datetime arithmetic
/// on `SYSDATE(6)` (`UNIX_TIMESTAMP` is NULL past 2038 on MariaDB before
/// 11.5), and a ring puts back the row of a bell it finds without one.
/// Version 6: a fenced value's `value` is nullable, and `fenced_remove`
/// empties it and keeps its token. Version 7: `acquire_all` takes a
/// multi-lock's keys in one statement. Version 8: read-write locks
/// (`rw_holders`, `rw_waiters` and their procedures). Version 9: locks
/// are the server's user locks (`GET_LOCK`) on sessions of the client's
/// own, their fencing tokens and leases in MEMORY tables (`locks.sql`);
/// `acquire_all` is gone (a multi-lock takes its keys one by one).
/// Version 10: nothing runs between a lock's grant and the draw of its
/// token: a release unlocks before it ends the lease (a session that
/// records a lease holds a user lock named for it, by which its successor
/// reads the lease as released), a try or wait sets its session up before
/// it asks for the lock (`locks_session.sql`), and a wait's row stays
/// after its grant. Version 11: a release ends its lease before it
/// unlocks, and a successor waits out any running lease of another token
/// (a session being torn down releases its user locks one at a time, so
/// the session mark of version 10 could still be held when the lock's own
/// was handed on: the successor read an unreleased lease as released);
/// sessions no longer take the mark. Version 12: after a restart (which
/// empties the MEMORY tables) no lock is taken anew until the longest
/// lease any hold took (`lock_bound`, InnoDB) may have ended
/// (`lock_epoch`). Version 13: every lock's fencing token is drawn from
/// one sequence on MariaDB (`lock_fence_seq`, kept at or above the clock),
/// for the clients of session leases, which record no hold
/// (`LockLeases::Session`): `lock_fence_rebase`, `lock_kept_left` and
/// `lock_names` serve them, and a lock kept past its release lifts the
/// sequence. A client of version 12 refuses the schema: its tokens, of the
/// key's last and the clock alone, could fall below a session lease's.
pub(crate) const VERSION: i64 = 13;

/// The longest table prefix: the longest name made from it (an index
/// name) stays within MySQL's 64 characters.
const MAX_PREFIX_LEN: usize = 40;

const SCHEMA: &str = concat!(
    include_str!("schema.sql"),
    "\n-- ;;\n",
    include_str!("locks.sql")
);

/// The draw of a lock's try and wait (`__DRAW__` in `locks.sql`).
const DRAW: &str = include_str!("locks_draw.sql");

/// A lock's try's and wait's set-up of its session, before it asks for
/// the lock (`__BEFORE_LOCK__` in `locks.sql`).
const BEFORE_LOCK: &str = include_str!("locks_session.sql");

/// The expression for lock `key`'s row key (`__LOCK_H__` in `locks.sql`,
/// of the procedures' `p_key`) in tables named with `prefix`: the SHA-1 of
/// the database, the table prefix and the key. Its user lock is named
/// `lockguard ` and its hex digits.
pub(crate) fn lock_h(prefix: &str, key: &str) -> String {
    format!("UNHEX(SHA1(CONCAT(DATABASE(), '.{prefix}:', {key})))")
}

/// Sets no statement time limit of the server's or the user's on the
/// session it runs on, on MariaDB (`max_statement_time`): for the sessions
/// that wait in `GET_LOCK` for as long as their caller (a lock's) or their
/// refresh (the bell), which the client bounds. Cut off, a lock's wait
/// would leave its place in the queue. `/*M!` is what MySQL reads as a
/// comment: its own `max_execution_time` limits `SELECT`s only, not a
/// lock's `CALL`, and the bell's wait carries its own limit in a hint
/// (`bell::wait_sql`).
pub(crate) const NO_STATEMENT_LIMIT: &str =
    "SET /*M! SESSION max_statement_time = 0, */ @lockguard_no_statement_limit = 1";

/// The database's clock as lockguard reads it: the time when the
/// expression is evaluated, not when the statement began (so a lease is
/// measured from after the key's row lock was taken).
pub(crate) const NOW: &str = "SYSDATE(6)";

/// The expression for `datetime` (an SQL `DATETIME(6)` in UTC: every
/// session of lockguard's runs with `time_zone = '+00:00'`) in µs since
/// the Unix epoch, as every statement of lockguard's computes time
/// (`__NOW_US__` in `schema.sql` is `clock_us(NOW)`).
///
/// Datetime arithmetic, not `UNIX_TIMESTAMP`: MariaDB before 11.5 answers
/// NULL for a datetime past 2038-01-19 03:14:07 UTC (the end of its
/// `TIMESTAMP` range), where this holds to the year 9999.
pub(crate) fn clock_us(datetime: &str) -> String {
    format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {datetime})")
}

/// Whether a statement of the schema is MariaDB's alone (written as an
/// executable comment, `/*M! ... */`, after its comment lines): a MySQL
/// server would find it empty, and is not sent it.
fn mariadb_only(statement: &str) -> bool {
    statement
        .lines()
        .find(|l| !l.trim_start().starts_with("--"))
        .is_some_and(|l| l.trim_start().starts_with("/*M!"))
}

/// The schema's statements, in order, for tables named with `prefix`.
fn statements(prefix: &str) -> Vec<String> {
    SCHEMA
        .replace("__DRAW__", DRAW)
        .replace("__BEFORE_LOCK__", BEFORE_LOCK)
        .replace("__LOCK_H__", &lock_h(prefix, "p_key"))
        .replace("__P__", prefix)
        .replace("__NOW_US__", &clock_us(NOW))
        .split("\n-- ;;\n")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The SQL that creates lockguard's tables and procedures with table
/// prefix `prefix`, for a database administrator to run by hand (with the
/// `mariadb` or `mysql` client, which needs the `DELIMITER` lines): what a
/// client runs on connect when they are missing. On MySQL 8, leave out the
/// statements written as MariaDB's executable comments (`/*M! ... */`,
/// the sequence of session leases' fencing tokens and its procedures),
/// which a client connecting to MySQL does not send. The user lockguard
/// connects as then needs only `SELECT`, `INSERT`, `UPDATE`, `DELETE` and
/// `EXECUTE` on the database; the procedures run as the account that ran
/// this SQL, whose `CONNECTION ADMIN` lets a release wake the waiters of
/// every user's clients (see the [crate docs](crate#privileges)).
///
/// ```no_run
/// // lockguard.sql, for `mariadb -u admin -p app < lockguard.sql`
/// print!("{}", lockguard_mysql::migration_sql(lockguard_mysql::DEFAULT_TABLE_PREFIX)?);
/// # Ok::<(), lockguard_core::Error>(())
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a prefix that is not a lowercase
/// identifier of at most 40 characters.
pub fn migration_sql(prefix: &str) -> Result<String> {
    validate_prefix(prefix)?;
    let mut sql = String::from("DELIMITER //\n");
    for s in statements(prefix) {
        sql.push_str(&s);
        sql.push_str("\n//\n");
    }
    sql.push_str(&format!(
        "INSERT INTO {prefix}meta (id, version) VALUES (1, {VERSION}) \
         ON DUPLICATE KEY UPDATE version = VALUES(version)\n//\nDELIMITER ;\n"
    ));
    Ok(sql)
}

/// Checks that `prefix` can start lockguard's table names: lowercase ASCII
/// letters, digits and underscores, starting with a letter, at most 40
/// characters (empty is allowed).
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    let ok = prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && prefix.bytes().next().is_none_or(|b| b.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "table prefix {prefix:?} must be lowercase letters, digits and underscores, \
                 starting with a letter, at most {MAX_PREFIX_LEN} characters"
            ),
        ))
    }
}

/// Creates lockguard's tables and procedures on `conn` when they are
/// missing or older than [`VERSION`], under a named lock so that clients
/// starting together do it once.
///
/// The version is read first: a schema at this version (installed by a
/// database administrator, say) needs nothing created, so a user with only
/// the grants to use it connects.
pub(crate) async fn ensure(conn: &mut Conn, prefix: &str) -> Result<()> {
    let what = format!("creating lockguard's tables {prefix}*");
    if judge(installed(conn, prefix, &what).await?, &what)? {
        return Ok(());
    }
    let lock = "CONCAT('lockguard schema ', DATABASE(), '.', ?)";
    let got: Option<Option<i64>> = conn
        .exec_first(format!("SELECT GET_LOCK({lock}, 30)"), (prefix,))
        .await
        .map_err(|e| mysql_error(e, &what))?;
    if got.flatten() != Some(1) {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("{what}: another client held the schema lock for 30 s"),
        ));
    }
    let created = create(conn, prefix, &what).await;
    let released = conn
        .exec_drop(format!("DO RELEASE_LOCK({lock})"), (prefix,))
        .await;
    created?;
    released.map_err(|e| mysql_error(e, &what))
}

/// The schema version recorded in the `meta` table, `None` when there is
/// none (or no table).
async fn installed(conn: &mut Conn, prefix: &str, what: &str) -> Result<Option<i64>> {
    match conn
        .query_first(format!("SELECT version FROM {prefix}meta WHERE id = 1"))
        .await
    {
        Ok(v) => Ok(v),
        Err(e) if is_no_such_table(&e) => Ok(None),
        Err(e) => Err(mysql_error(e, what)),
    }
}

/// Whether a schema `found` at a version serves this client as it is
/// (false: it is to be created or brought up to date); an error for one
/// made by a newer lockguard.
fn judge(found: Option<i64>, what: &str) -> Result<bool> {
    match found {
        Some(v) if v == VERSION => Ok(true),
        Some(v) if v > VERSION => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{what}: the tables are of schema version {v}, made by a newer lockguard; \
                 this one knows version {VERSION}"
            ),
        )),
        _ => Ok(false),
    }
}

async fn create(conn: &mut Conn, prefix: &str, what: &str) -> Result<()> {
    let all = statements(prefix);
    conn.query_drop(&all[0])
        .await
        .map_err(|e| mysql_error(e, what))?;
    // Another client may have done it while this one waited for the lock.
    if judge(installed(conn, prefix, what).await?, what)? {
        return Ok(());
    }
    let mariadb = conn
        .query_first::<String, _>("SELECT VERSION()")
        .await
        .map_err(|e| mysql_error(e, what))?
        .is_some_and(|v| v.contains("MariaDB"));
    for s in &all[1..] {
        if mariadb || !mariadb_only(s) {
            conn.query_drop(s).await.map_err(|e| mysql_error(e, what))?;
        }
    }
    conn.query_drop(format!(
        "INSERT INTO {prefix}meta (id, version) VALUES (1, {VERSION}) \
         ON DUPLICATE KEY UPDATE version = VALUES(version)"
    ))
    .await
    .map_err(|e| mysql_error(e, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_identifiers() {
        for ok in ["", "lockguard_", "lg2_", "a"] {
            assert!(validate_prefix(ok).is_ok(), "{ok:?}");
        }
        for bad in ["Lock_", "1lg", "lg-", "lg`", "lg;drop", &"a".repeat(41)] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_sequence_and_its_procedures_are_mariadb_s_alone() {
        let only: Vec<String> = statements("lg_")
            .into_iter()
            .filter(|s| mariadb_only(s))
            .collect();
        assert_eq!(only.len(), 3, "{only:#?}");
        assert!(only[0].contains("CREATE SEQUENCE IF NOT EXISTS lg_lock_fence_seq"));
        assert!(only[1].contains("CREATE PROCEDURE lg_lock_fence_lift"));
        assert!(only[2].contains("CREATE PROCEDURE lg_lock_fence_rebase"));
        assert!(!mariadb_only("-- a comment\nSELECT 1 /*M! , 2 */"));
    }

    #[test]
    fn the_schema_splits_into_statements_with_the_prefix() {
        let all = statements("lg_");
        assert!(
            all[0].contains("CREATE TABLE IF NOT EXISTS lg_meta"),
            "{}",
            all[0]
        );
        assert!(
            all.iter()
                .all(|s| !s.contains("__P__") && !s.contains("-- ;;"))
        );
        assert!(
            all.iter()
                .any(|s| s.contains("CREATE PROCEDURE lg_acquire("))
        );
        let sql = migration_sql("lg_").unwrap();
        assert!(sql.ends_with("DELIMITER ;\n"));
        // Time is read one way only, the one that holds past 2038.
        let code: Vec<&str> = all
            .iter()
            .flat_map(|s| s.lines())
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        assert!(code.iter().any(|l| l.contains(&clock_us(NOW))));
        assert!(
            code.iter()
                .all(|l| !l.contains("UNIX_TIMESTAMP") && !l.contains("__NOW_US__")),
            "{code:?}"
        );
    }

    /// The clock's expression holds past 2038-01-19, where MariaDB before
    /// 11.5 answers NULL for `UNIX_TIMESTAMP` (its `TIMESTAMP` range ends),
    /// and the lease columns refuse NULL: evaluated on a real server over
    /// datetimes either side of that date and far past it, in a session
    /// set up as lockguard's are, and over the server's clock now.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_clock_holds_past_2038() {
        let server = lockguard_testing::MariaDbServer::shared();
        let mut conn = Conn::new(mysql_async::Opts::from_url(&server.url()).unwrap())
            .await
            .unwrap();
        conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
        for (at, us) in [
            ("1970-01-01 00:00:00.000001", 1),
            ("2038-01-19 03:14:07.999999", 2_147_483_647_999_999),
            ("2038-01-19 03:14:08.000000", 2_147_483_648_000_000),
            ("2040-01-01 00:00:00.000001", 2_208_988_800_000_001),
            ("2106-02-07 06:28:16.000000", 4_294_967_296_000_000),
            ("9999-12-31 23:59:59.999999", 253_402_300_799_999_999),
        ] {
            let sql = format!(
                "SELECT {}",
                clock_us(&format!("CAST('{at}' AS DATETIME(6))"))
            );
            let got: Option<Option<i64>> = conn.query_first(&sql).await.unwrap();
            assert_eq!(got, Some(Some(us)), "{at}: {sql}");
        }
        let now: Option<i64> = conn
            .query_first(format!("SELECT {}", clock_us(NOW)))
            .await
            .unwrap();
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros();
        let skew = i128::try_from(ours).unwrap() - i128::from(now.unwrap());
        assert!(
            skew.abs() < 60_000_000,
            "the server's clock, {skew} µs off ours"
        );
        conn.disconnect().await.unwrap();
    }
}
