//! lockguard's tables and procedures: created on connect when missing or
//! older than this version.

use lockguard_core::{Error, ErrorKind, Result};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::error::mysql_error;

/// The schema's version, kept in the `meta` table: a client finding an
/// older one (re)creates the procedures and adds what is missing; one
/// finding a newer one refuses to run on it.
///
/// Version 3: the bell's ring looks at the process list again while it
/// shows the bell's connection as `Busy`. Version 4: the ring finds the
/// bell by the user lock the bell's connection holds (no process list),
/// and the bell reads its mail (`read_mail`) and removes what it read in
/// two statements. `drain` stays for clients of version 3 still running,
/// whose bells are no longer rung.
pub(crate) const VERSION: i64 = 4;

/// The default table prefix.
pub const DEFAULT_TABLE_PREFIX: &str = "lockguard_";

/// The longest table prefix: the longest name made from it (an index
/// name) stays within MySQL's 64 characters.
const MAX_PREFIX_LEN: usize = 40;

const SCHEMA: &str = include_str!("schema.sql");

/// The schema's statements, in order, for tables named with `prefix`.
fn statements(prefix: &str) -> Vec<String> {
    SCHEMA
        .replace("__P__", prefix)
        .split("\n-- ;;\n")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The SQL that creates lockguard's tables and procedures with table
/// prefix `prefix`, for a database administrator to run by hand (with the
/// `mariadb` or `mysql` client, which needs the `DELIMITER` lines): what a
/// client runs on connect when they are missing. The user lockguard
/// connects as then needs only `SELECT`, `INSERT`, `UPDATE`, `DELETE` and
/// `EXECUTE` on them (and `CONNECTION ADMIN`, or one user for every
/// client, for wake-ups: see the crate docs).
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
pub(crate) async fn ensure(conn: &mut Conn, prefix: &str) -> Result<()> {
    let what = format!("creating lockguard's tables {prefix}*");
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

async fn create(conn: &mut Conn, prefix: &str, what: &str) -> Result<()> {
    let all = statements(prefix);
    conn.query_drop(&all[0])
        .await
        .map_err(|e| mysql_error(e, what))?;
    let found: Option<i64> = conn
        .query_first(format!("SELECT version FROM {prefix}meta WHERE id = 1"))
        .await
        .map_err(|e| mysql_error(e, what))?;
    match found {
        Some(v) if v == VERSION => return Ok(()),
        Some(v) if v > VERSION => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{what}: the tables are of schema version {v}, made by a newer lockguard; \
                     this one knows version {VERSION}"
                ),
            ));
        }
        _ => {}
    }
    for s in &all[1..] {
        conn.query_drop(s).await.map_err(|e| mysql_error(e, what))?;
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
    }
}
