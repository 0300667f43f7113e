//! The deployment check of a PostgreSQL server: what a lock's guarantees
//! depend on (durability of commits, standbys a failover could promote,
//! lockguard's schema), read from the server. The facade's
//! `lockguard::check(url)` and `lockguard check URL` call it.

use std::time::Duration;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, ErrorKind, Result};

use crate::error::pg_error;
use crate::schema::{self, DEFAULT_SCHEMA, MIN_SERVER_VERSION, VERSION};
use crate::tls::{Connector, TlsSettings};

const EXCLUSION: &str = "mutual exclusion and fencing; safety notes: PostgreSQL";
const AVAILABILITY: &str = "availability";

/// How long connecting and each query may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the PostgreSQL server at `url`, and lockguard's schema there
/// under its default name.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL,
/// [`ErrorKind::Unavailable`] when the server cannot be reached (and the
/// kinds of [`Client::connect_postgres`](crate::ClientExt::connect_postgres)
/// for refused credentials).
pub async fn check(url: &str) -> Result<Report> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::invalid(format!("not a PostgreSQL URL: {e}")))?;
    let connector = Connector::new(&TlsSettings::default(), &config)?;
    let (client, _notes, task) =
        tokio::time::timeout(TIMEOUT, connector.connect_listening(&config))
            .await
            .map_err(|_| Error::new(ErrorKind::Unavailable, "postgres: no answer"))?
            .map_err(|e| pg_error(e, "connecting to check"))?;
    let one = |sql: &'static str| {
        let client = &client;
        async move {
            tokio::time::timeout(TIMEOUT, client.query_one(sql, &[]))
                .await
                .map_err(|_| Error::new(ErrorKind::Timeout, format!("postgres: {sql}")))?
                .map_err(|e| pg_error(e, sql))
        }
    };
    let mut findings = Vec::new();

    let version: i32 = one("SELECT current_setting('server_version_num')::int")
        .await?
        .get(0);
    let shown = format!("{}.{}", version / 10_000, version % 10_000);
    findings.push(if version >= MIN_SERVER_VERSION {
        Finding::new(
            Verdict::Ok,
            "version",
            format!("PostgreSQL {shown}"),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Fail,
            "version",
            format!(
                "PostgreSQL {shown}: lockguard needs {} or newer",
                MIN_SERVER_VERSION / 10_000
            ),
            AVAILABILITY,
        )
    });

    let fsync: String = one("SHOW fsync").await?.get(0);
    let commit: String = one("SHOW synchronous_commit").await?.get(0);
    findings.push(if fsync == "off" {
        Finding::new(
            Verdict::Fail,
            "fsync",
            "off: a machine crash or power loss can lose or corrupt any commit, a held lock's \
             row included; turn it on",
            EXCLUSION,
        )
    } else {
        Finding::new(
            Verdict::Ok,
            "fsync",
            "on: commits reach the disk",
            EXCLUSION,
        )
    });
    findings.push(if commit == "off" {
        Finding::new(
            Verdict::Fail,
            "synchronous_commit",
            "off: a crash loses the last commits the server acknowledged, so a holder's lock \
             row can vanish while it works and a fencing token can be handed out twice; set it \
             to on (it can stay off for other databases or sessions)",
            EXCLUSION,
        )
    } else {
        Finding::new(
            Verdict::Ok,
            "synchronous_commit",
            format!("{commit}: an acknowledged lock survives a crash"),
            EXCLUSION,
        )
    });

    let standbys = one(
        "SELECT count(*)::int, (count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')))::int \
         FROM pg_stat_replication",
    )
    .await?;
    let (all, sync): (i32, i32) = (standbys.get(0), standbys.get(1));
    findings.push(match (all, sync) {
        (0, _) => Finding::new(
            Verdict::Ok,
            "standbys",
            "none: no failover can promote a server that missed a lock",
            EXCLUSION,
        ),
        (n, s) if s == n => Finding::new(
            Verdict::Ok,
            "standbys",
            format!("{n}, all synchronous: a promoted standby has every acknowledged lock"),
            EXCLUSION,
        ),
        (n, s) => Finding::new(
            Verdict::Warn,
            "standbys",
            format!(
                "{n}, {} asynchronous: promoting one may lose the last lock writes (two \
                 holders for up to a lease); fencing tokens still grow (they are drawn above \
                 the clock); use synchronous_standby_names to make failover safe",
                n - s
            ),
            EXCLUSION,
        ),
    });

    let schema = schema::version_query(DEFAULT_SCHEMA);
    let found = tokio::time::timeout(TIMEOUT, client.query_opt(schema.as_str(), &[]))
        .await
        .map_err(|_| Error::new(ErrorKind::Timeout, "postgres: reading the schema version"))?;
    let found = found.map(|row| {
        row.and_then(|row| Some((row.get::<_, Option<i32>>(0)?, row.get::<_, Option<i32>>(1))))
    });
    findings.push(match found.as_ref().map(|f| (f, schema::verdict(*f))) {
        Ok((_, schema::Verdict::Current)) => Finding::new(
            Verdict::Ok,
            "schema",
            format!("{DEFAULT_SCHEMA:?} at version {VERSION}"),
            AVAILABILITY,
        ),
        Ok((_, schema::Verdict::Newer(v))) => Finding::new(
            Verdict::Ok,
            "schema",
            format!(
                "{DEFAULT_SCHEMA:?} at version {v}, made by a newer lockguard that keeps it \
                 working for this one (version {VERSION})"
            ),
            AVAILABILITY,
        ),
        Ok((
            _,
            schema::Verdict::Refused {
                version,
                compatible_since,
            },
        )) => Finding::new(
            Verdict::Fail,
            "schema",
            format!(
                "{DEFAULT_SCHEMA:?} at version {version}, made by a newer lockguard for clients \
                 of version {compatible_since} or newer: this one knows {VERSION} and refuses it"
            ),
            AVAILABILITY,
        ),
        Ok((f, schema::Verdict::Migrate)) => Finding::new(
            Verdict::Warn,
            "schema",
            format!(
                "{DEFAULT_SCHEMA:?} at version {}: the next client brings it to {VERSION}",
                f.map_or(0, |(v, _)| v)
            ),
            AVAILABILITY,
        ),
        Err(_) => Finding::new(
            Verdict::Warn,
            "schema",
            format!(
                "{DEFAULT_SCHEMA:?} does not exist yet: the first client creates it, which needs \
                 the CREATE privilege on the database (or run migration_sql by hand)"
            ),
            AVAILABILITY,
        ),
    });
    if let Ok(Some(_)) = found {
        findings.push(crash_wait(&client).await);
    }
    drop(client);
    let _ = task.await;
    Ok(Report::new("postgres", findings))
}

/// How long locks wait after a crash or a failover (the longest lease any
/// lock took, `lock_lease_bound`), and what is left of a wait running now.
async fn crash_wait(client: &tokio_postgres::Client) -> Finding {
    let sql = format!(
        "SELECT coalesce((SELECT max(b.lease_ms) FROM {DEFAULT_SCHEMA}.lock_lease_bound b), 0), \
                (SELECT ceil(extract(epoch FROM max(e.until) - clock_timestamp()) * 1000)::bigint \
                   FROM {DEFAULT_SCHEMA}.lock_epoch e)"
    );
    let row = match tokio::time::timeout(TIMEOUT, client.query_one(sql.as_str(), &[])).await {
        Ok(Ok(row)) => row,
        // A schema older than version 9 has no such tables: its
        // finding above says the next client brings it up to date.
        _ => {
            return Finding::new(
                Verdict::Warn,
                "crash wait",
                "unknown: the schema records no lease yet (older than version 9)",
                EXCLUSION,
            );
        }
    };
    let (bound, left): (i64, Option<i64>) = (row.get(0), row.get(1));
    let ms = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    Finding::crash_wait(ms(bound), left.map(ms), "lock_lease_bound", EXCLUSION)
}
