//! lockguard's schema in PostgreSQL: created on first connect, or by hand
//! from [`migration_sql`].

use std::time::Duration;

use lockguard_core::store::net;
use lockguard_core::{Error, ErrorKind, Result};

use crate::pool::Conn;

/// The schema lockguard's tables and functions live in unless configured.
pub const DEFAULT_SCHEMA: &str = "lockguard";

/// The oldest PostgreSQL lockguard works with (`idle_session_timeout`,
/// `client_connection_check_interval` and `pg_locks.waitstart`, 14).
pub(crate) const MIN_SERVER_VERSION: i32 = 140_000;

/// The version of `schema.sql`; a schema of an older version is brought up
/// to date (every statement of the file is idempotent). A newer one is
/// used as it is when it is compatible with this version (see
/// [`COMPATIBLE_SINCE`]), and refused otherwise.
pub(crate) const VERSION: i32 = 12;

/// The oldest version of lockguard's clients that may use a schema of
/// [`VERSION`]: version 11. Version 12 only names no session of a client
/// of session leases per hold (`lock_idle` in place of `lock_name` in
/// their functions, `lock_keep` naming a kept hold), and reads such a hold
/// by its session (`lock_session_token`) where it read the session's name:
/// a version 11 client's named holds read as they did. Version 11 draws every lock's fencing
/// token from one sequence kept at or above the clock
/// (`lock_fence_next`), and its clients of session leases
/// ([`LockLeases::Session`](crate::LockLeases::Session)) record no row
/// per hold: a client of version 10 drawing from a key's row alone could
/// draw a token below one such a hold drew (up to a ms ahead of the
/// clock). (Version 10 only kept a lease a release ended from being
/// renewed by a renewal sent beside the release, and was compatible since
/// 9, whose clients record the longest lease a lock was taken with,
/// `lock_lease_bound`, which the wait after a crash or a failover waits
/// out. Version 8's locks are advisory locks, which the lock functions of
/// older clients, `acquire` and `acquire_all` over the tables, would not
/// see: those functions refuse, SQLSTATE `LG003`. Versions 4 to 7 kept
/// every function of version 3 with its signature and meaning, and were
/// compatible since 3.) Written to `meta` by the migration; clients read
/// it from a newer schema to decide whether they may use it.
pub(crate) const COMPATIBLE_SINCE: i32 = 11;

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
        "{}\nDELETE FROM {schema}.meta;\n\
         INSERT INTO {schema}.meta (version, compatible_since) VALUES ({VERSION}, {COMPATIBLE_SINCE});\n",
        SQL.replace("__SCHEMA__", schema)
            .replace("__VERSION__", &VERSION.to_string())
    ))
}

/// What a client of [`VERSION`] does with the schema it finds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Missing or older: created or brought up to date.
    Migrate,
    /// This very version.
    Current,
    /// A newer version that keeps working for clients of this one: used
    /// as it is.
    Newer(i32),
    /// A newer version that needs newer clients.
    Refused {
        /// The schema's version.
        version: i32,
        /// The oldest client version it works with (as written by the
        /// schema's migration; the version itself when it wrote none).
        compatible_since: i32,
    },
}

/// The verdict on a schema whose `meta` says `found` (version, and the
/// oldest client version it works with); `None` for no schema, or no row.
pub(crate) fn verdict(found: Option<(i32, Option<i32>)>) -> Verdict {
    match found {
        None => Verdict::Migrate,
        Some((v, _)) if v < VERSION => Verdict::Migrate,
        Some((v, _)) if v == VERSION => Verdict::Current,
        Some((v, since)) => match since.unwrap_or(v) {
            since if since <= VERSION => Verdict::Newer(v),
            since => Verdict::Refused {
                version: v,
                compatible_since: since,
            },
        },
    }
}

/// The error for a newer schema that needs newer clients.
fn refused(schema: &str, version: i32, compatible_since: i32) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "lockguard's schema {schema:?} is version {version}, made by a newer lockguard, \
             and works with lockguard clients of schema version {compatible_since} or newer; \
             this one knows version {VERSION}: upgrade this client"
        ),
    )
}

/// The statement that reads the version of `schema` and the oldest client
/// version it works with (NULL before version 4), whether or not it has
/// the `compatible_since` column: one row, none when `meta` is empty.
pub(crate) fn version_query(schema: &str) -> String {
    format!(
        "SELECT (to_jsonb(m) ->> 'version')::int, (to_jsonb(m) ->> 'compatible_since')::int \
         FROM {schema}.meta m ORDER BY 1 DESC LIMIT 1"
    )
}

/// The version and the oldest compatible client version in `schema`'s
/// `meta`, read whether or not the schema has the `compatible_since`
/// column (versions before 4 do not); `None` when there is no schema, or
/// no row.
async fn found(conn: &mut Conn, schema: &str) -> Option<(i32, Option<i32>)> {
    let rows = conn.query(&version_query(schema), &[]).await.ok()?;
    let row = rows.first()?;
    let version = row
        .get::<Option<i32>>(0, &|| "reading the schema's version".to_owned())
        .ok()??;
    let since = row
        .get::<Option<i32>>(1, &|| "reading the schema's version".to_owned())
        .ok()?;
    Some((version, since))
}

/// How long a migration may take at the least, whatever the connect
/// timeout: it is a transaction of some hundred statements, which waits
/// for another client's migration of the same schema, and runs once.
pub(crate) const MIGRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates the schema when it is missing or older than this version, in one
/// transaction under an advisory lock of the schema's own, so clients
/// starting together create it once (and clients of other schemas do not
/// wait for it). Reading the schema's version answers within `timeout`
/// (the connect timeout); a migration, when one is needed, within
/// [`MIGRATION_TIMEOUT`] or `timeout` if longer.
pub(crate) async fn ensure(conn: &mut Conn, schema: &str, timeout: Duration) -> Result<()> {
    let what = || format!("creating lockguard's schema {schema:?}");
    let answer = tokio::time::timeout(timeout, judge(conn, schema)).await;
    if !net::within(timeout, "postgres", what, answer)? {
        return Ok(());
    }
    let limit = timeout.max(MIGRATION_TIMEOUT);
    let answer = tokio::time::timeout(limit, migrate(conn, schema)).await;
    net::within(limit, "postgres", what, answer)
}

/// Whether `schema` is to be created or brought up to date (after checking
/// the server's version): false when it serves this client as it is; an
/// error when it is refused.
async fn judge(conn: &mut Conn, schema: &str) -> Result<bool> {
    let version: i32 = conn
        .query("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(|e| e.about("reading the server's version"))?
        .first()
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "no server version from postgres"))?
        .get(0, &|| "reading the server's version".to_owned())?;
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
    // Missing (an error): created by the migration, where any other
    // failure shows.
    match verdict(found(conn, schema).await) {
        Verdict::Current => Ok(false),
        Verdict::Newer(v) => {
            tracing::info!(
                schema,
                version = v,
                known = VERSION,
                "lockguard's postgres schema is newer than this client and compatible with it"
            );
            Ok(false)
        }
        Verdict::Refused {
            version,
            compatible_since,
        } => Err(refused(schema, version, compatible_since)),
        Verdict::Migrate => Ok(true),
    }
}

/// Creates `schema` or brings it up to date, in one transaction under the
/// schema's advisory lock.
async fn migrate(conn: &mut Conn, schema: &str) -> Result<()> {
    let what = || format!("creating lockguard's schema {schema:?}");
    // One simple query: its statements run as one transaction, which holds
    // the advisory locks to its end. The schema's own lock keeps two
    // migrations of it apart; the shared hold of the lock every earlier
    // client took for any schema keeps this one apart from theirs.
    let sql = format!(
        "SELECT pg_advisory_xact_lock_shared(hashtextextended('lockguard migration', 0));\n\
         SELECT pg_advisory_xact_lock(hashtextextended('lockguard migration of {schema}', 0));\n{}",
        migration_sql(schema)?
    );
    if let Err(e) = conn.batch(&sql).await {
        // A newer client may have migrated meanwhile (the migration then
        // refuses to go back, LG002): its schema is judged as above.
        return match verdict(found(conn, schema).await) {
            Verdict::Current | Verdict::Newer(_) => Ok(()),
            Verdict::Refused {
                version,
                compatible_since,
            } => Err(refused(schema, version, compatible_since)),
            Verdict::Migrate => Err(e.about(&what())),
        };
    }
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
    fn a_newer_schema_is_used_when_it_is_compatible_with_this_version() {
        assert_eq!(verdict(None), Verdict::Migrate);
        assert_eq!(verdict(Some((VERSION - 1, None))), Verdict::Migrate);
        assert_eq!(verdict(Some((1, Some(1)))), Verdict::Migrate);
        assert_eq!(
            verdict(Some((VERSION, Some(COMPATIBLE_SINCE)))),
            Verdict::Current
        );
        for since in [1, COMPATIBLE_SINCE, VERSION] {
            assert_eq!(
                verdict(Some((VERSION + 3, Some(since)))),
                Verdict::Newer(VERSION + 3),
                "compatible since {since}"
            );
        }
        assert_eq!(
            verdict(Some((VERSION + 3, Some(VERSION + 1)))),
            Verdict::Refused {
                version: VERSION + 3,
                compatible_since: VERSION + 1
            }
        );
        // A newer schema that says nothing works with its own version only.
        assert_eq!(
            verdict(Some((VERSION + 1, None))),
            Verdict::Refused {
                version: VERSION + 1,
                compatible_since: VERSION + 1
            }
        );
        let e = refused("app", VERSION + 3, VERSION + 1);
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let m = e.to_string();
        assert!(
            m.contains(&format!("version {}", VERSION + 3))
                && m.contains(&format!("version {} or newer", VERSION + 1))
                && m.contains(&format!("knows version {VERSION}"))
                && m.contains("upgrade"),
            "{m}"
        );
    }

    #[test]
    fn this_version_is_compatible_with_itself_and_says_so() {
        const { assert!(COMPATIBLE_SINCE <= VERSION) };
        let sql = migration_sql("s").unwrap();
        assert!(sql.contains(&format!(
            "INSERT INTO s.meta (version, compatible_since) VALUES ({VERSION}, {COMPATIBLE_SINCE});"
        )));
        assert!(!sql.contains("__VERSION__"));
    }

    #[test]
    fn the_migration_names_only_the_schema_asked_for() {
        let sql = migration_sql("app_locks").unwrap();
        assert!(!sql.contains("__SCHEMA__"));
        assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS app_locks;"));
        assert!(!sql.to_lowercase().contains("drop table"));
    }
}
