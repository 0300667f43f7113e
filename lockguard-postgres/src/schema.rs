//! lockguard's schema in PostgreSQL: created on first connect, or by hand
//! from [`migration_sql`].

use lockguard_core::{Error, ErrorKind, Result};

use crate::pool::Conn;

/// The schema lockguard's tables and functions live in unless configured.
pub const DEFAULT_SCHEMA: &str = "lockguard";

/// The oldest PostgreSQL lockguard works with (`hashtextextended`, 11).
pub(crate) const MIN_SERVER_VERSION: i32 = 110_000;

/// The version of `schema.sql`; a schema of an older version is brought up
/// to date (every statement of the file is idempotent), a newer one is
/// refused.
pub(crate) const VERSION: i32 = 3;

const SQL: &str = include_str!("schema.sql");

/// Checks a schema name: a plain lowercase SQL identifier, so it needs no
/// quoting anywhere.
pub(crate) fn validate_schema(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let plain = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'));
    if !plain || name.len() > 63 {
        return Err(Error::invalid(format!(
            "postgres schema name {name:?} must be a lowercase identifier \
             (a-z, 0-9 and _, not starting with a digit, at most 63 bytes)"
        )));
    }
    Ok(())
}

/// The SQL that creates (or brings up to date) lockguard's tables and
/// functions in `schema`, for a database administrator who creates them
/// by hand.
pub(crate) fn migration_sql(schema: &str) -> Result<String> {
    validate_schema(schema)?;
    Ok(format!(
        "{}\nDELETE FROM {schema}.meta;\nINSERT INTO {schema}.meta (version) VALUES ({VERSION});\n",
        SQL.replace("__SCHEMA__", schema)
    ))
}

/// Creates the schema when it is missing or older than this version, in one
/// transaction under an advisory lock, so clients starting together create
/// it once.
pub(crate) async fn ensure(conn: &mut Conn, schema: &str) -> Result<()> {
    let what = || format!("creating lockguard's schema {schema:?}");
    let version: i32 = conn
        .query("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(|e| e.about("reading the server's version"))?
        .first()
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "no server version from postgres"))?
        .get(0, "reading the server's version")?;
    if version < MIN_SERVER_VERSION {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "postgres is version {}.{}; lockguard needs {} or newer",
                version / 10_000,
                version % 10_000,
                MIN_SERVER_VERSION / 10_000
            ),
        ));
    }
    let read = format!("SELECT max(version) FROM {schema}.meta");
    // Missing (an error): created below, where any other failure shows.
    if let Ok(rows) = conn.query(&read, &[]).await
        && let Some(row) = rows.first()
    {
        match row.get::<Option<i32>>(0, &what()) {
            Ok(Some(v)) if v == VERSION => return Ok(()),
            Ok(Some(v)) if v > VERSION => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "lockguard's schema {schema:?} is version {v}, made by a newer lockguard; this one knows version {VERSION}"
                    ),
                ));
            }
            _ => {}
        }
    }
    // One simple query: its statements run as one transaction, which holds
    // the advisory lock to its end.
    let sql = format!(
        "SELECT pg_advisory_xact_lock(hashtextextended('lockguard migration', 0));\n{}",
        migration_sql(schema)?
    );
    conn.batch(&sql).await.map_err(|e| e.about(&what()))?;
    tracing::info!(
        schema,
        version = VERSION,
        "created lockguard's postgres schema"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["lockguard", "_x", "app_locks_2"] {
            validate_schema(good).unwrap();
        }
        for bad in ["", "Lockguard", "1x", "a-b", "a.b", "a\"b", &"x".repeat(64)] {
            assert!(
                validate_schema(bad).unwrap_err().is_invalid_input(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_migration_names_only_the_schema_asked_for() {
        let sql = migration_sql("app_locks").unwrap();
        assert!(!sql.contains("__SCHEMA__"));
        assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS app_locks;"));
        assert!(!sql.to_lowercase().contains("drop table"));
    }
}
