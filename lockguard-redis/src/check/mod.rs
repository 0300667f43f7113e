//! The deployment check of a Redis server, Redlock's nodes, a Redis Cluster
//! (feature `cluster`) or a Sentinel group (feature `sentinel`): what a
//! lock's guarantees depend on, read from the servers (`INFO`, `CONFIG
//! GET`, `TIME`, `CLUSTER NODES`, `SENTINEL MASTER`). The facade's
//! `lockguard::check(url)` and `lockguard check URL` call it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;

#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "sentinel")]
mod sentinel;

#[cfg(feature = "cluster")]
pub use cluster::cluster;
#[cfg(feature = "sentinel")]
pub use sentinel::sentinel;

const EXCLUSION: &str = "mutual exclusion; safety notes: running Redis for locks";
const AVAILABILITY: &str = "availability";

/// How long one server may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the Redis server at `url`.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL,
/// [`ErrorKind::Unavailable`] when the server cannot be reached.
pub async fn server(url: &str) -> Result<Report> {
    let node = Node::connect(url).await?;
    Ok(Report::new("redis", node.findings("")))
}

/// Checks Redlock's nodes at `urls`: each as a server, and that they are
/// independent servers with clocks that agree.
///
/// # Errors
///
/// As [`server`], for any node.
pub async fn redlock<S: AsRef<str>>(urls: &[S]) -> Result<Report> {
    let mut nodes = Vec::new();
    for url in urls {
        nodes.push(Node::connect(url.as_ref()).await?);
    }
    let mut findings = Vec::new();
    for node in &nodes {
        findings.extend(node.findings(&format!("{} ", node.addr)));
    }
    let mut seen: HashMap<&str, &str> = HashMap::new();
    let mut shared = Vec::new();
    for node in &nodes {
        if let Some(id) = node.info.get("run_id")
            && let Some(first) = seen.insert(id, &node.addr)
        {
            shared.push(format!("{first} and {} are one server", node.addr));
        }
    }
    findings.push(if shared.is_empty() {
        Finding::new(
            Verdict::Ok,
            "independence",
            format!("{} distinct servers", nodes.len()),
            EXCLUSION,
        )
    } else {
        Finding::new(
            Verdict::Fail,
            "independence",
            format!(
                "{}: a quorum is then fewer servers than it counts",
                shared.join(", ")
            ),
            EXCLUSION,
        )
    });
    let offsets: Vec<i128> = nodes.iter().map(|n| n.clock_offset_ms).collect();
    let spread = offsets.iter().max().unwrap_or(&0) - offsets.iter().min().unwrap_or(&0);
    findings.push(Finding::new(
        if spread > 1000 {
            Verdict::Warn
        } else {
            Verdict::Ok
        },
        "clocks",
        format!(
            "the nodes' clocks differ by {spread} ms{}",
            if spread > 1000 {
                " (Redlock counts on clocks that run at the same rate; one this far off has been set by hand or lost its time source: check NTP)"
            } else {
                ""
            }
        ),
        EXCLUSION,
    ));
    Ok(Report::new("redlock", findings))
}

/// One server's answers.
struct Node {
    addr: String,
    info: HashMap<String, String>,
    appendfsync: Option<String>,
    /// The server's clock minus this machine's, at the middle of the
    /// round trip.
    clock_offset_ms: i128,
}

impl Node {
    async fn connect(url: &str) -> Result<Self> {
        let (addr, mut conn) = open(url).await?;
        let down = |e: String| Error::new(ErrorKind::Unavailable, format!("redis {addr}: {e}"));
        let text: String = ask(&mut conn, &addr, "INFO", redis::cmd("INFO").arg("all")).await?;
        let info = text
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // Managed services may refuse CONFIG: then the finding says so.
        let appendfsync: Option<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .query_async::<Vec<String>>(&mut conn)
            .await
            .ok()
            .and_then(|v| v.get(1).cloned());
        let before = now_ms();
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async::<(String, String)>(&mut conn)
            .await
            .map_err(|e| down(format!("TIME: {e}")))
            .map(|(s, u)| (s.parse().unwrap_or(0), u.parse().unwrap_or(0)))?;
        let after = now_ms();
        let server_ms = i128::from(secs) * 1000 + i128::from(micros) / 1000;
        Ok(Self {
            addr,
            info,
            appendfsync,
            clock_offset_ms: server_ms - (before + after) / 2,
        })
    }

    fn get(&self, key: &str) -> &str {
        self.info.get(key).map_or("", String::as_str)
    }

    /// The server's findings, each subject after `prefix`: its own
    /// ([`Node::server_findings`]), its replication, and whether it is a
    /// cluster node.
    fn findings(&self, prefix: &str) -> Vec<Finding> {
        let mut out = self.server_findings(prefix);
        out.push(self.replication(format!("{prefix}replication")));
        if self.get("cluster_enabled") == "1" {
            out.push(Finding::new(
                Verdict::Fail,
                format!("{prefix}cluster"),
                "a Redis Cluster node: connect with redis+cluster:// (a client of one node \
                 cannot reach the keys of other slots)",
                AVAILABILITY,
            ));
        }
        out
    }

    /// What any server that holds locks is checked for, whatever the
    /// deployment around it (one server, a Redlock node, a cluster master,
    /// the master the sentinels name): its version, `maxmemory-policy` and
    /// persistence, each subject after `prefix`.
    fn server_findings(&self, prefix: &str) -> Vec<Finding> {
        let subject = |s: &str| format!("{prefix}{s}");
        let mut out = Vec::new();
        let version = self.get("redis_version");
        let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
        let new_enough =
            parts.first().copied().unwrap_or(0) * 100 + parts.get(1).copied().unwrap_or(0) >= 602;
        out.push(Finding::new(
            if new_enough {
                Verdict::Ok
            } else {
                Verdict::Fail
            },
            subject("version"),
            if new_enough {
                format!("Redis {version}")
            } else {
                format!("Redis {version:?}: lockguard's scripts need 6.2 or newer")
            },
            AVAILABILITY,
        ));
        let policy = self.get("maxmemory_policy");
        let limit: u64 = self.get("maxmemory").parse().unwrap_or(0);
        out.push(match (policy, limit) {
            ("noeviction", _) => Finding::new(
                Verdict::Ok,
                subject("maxmemory-policy"),
                "noeviction: no held lock is evicted",
                EXCLUSION,
            ),
            (p, 0) => Finding::new(
                Verdict::Warn,
                subject("maxmemory-policy"),
                format!(
                    "{p}, with no memory limit yet: once one is set, Redis may evict a held lock \
                     before its lease ends; set noeviction"
                ),
                EXCLUSION,
            ),
            (p, _) => Finding::new(
                Verdict::Fail,
                subject("maxmemory-policy"),
                format!(
                    "{p} with maxmemory {limit}: Redis may evict a held lock before its lease \
                     ends, and a second client takes it; set noeviction"
                ),
                EXCLUSION,
            ),
        });
        let aof = self.get("aof_enabled") == "1";
        out.push(match (aof, self.appendfsync.as_deref()) {
            (true, Some("always")) => Finding::new(
                Verdict::Ok,
                subject("persistence"),
                "appendonly yes, appendfsync always: a restart keeps every lock it acknowledged",
                EXCLUSION,
            ),
            (true, fsync) => Finding::new(
                Verdict::Warn,
                subject("persistence"),
                format!(
                    "appendonly yes, appendfsync {}: a crash may lose the last second of lock \
                     writes; use appendfsync always, or keep a crashed server down for a lease",
                    fsync.unwrap_or("unknown (CONFIG refused)")
                ),
                EXCLUSION,
            ),
            (false, _) => Finding::new(
                Verdict::Warn,
                subject("persistence"),
                "appendonly no: a restart forgets the locks taken since the last snapshot, and \
                 their holders still believe they hold them; use appendonly yes with appendfsync \
                 always, or keep a restarted server down for a lease",
                EXCLUSION,
            ),
        });
        out
    }

    /// The server's role and replicas, as the finding `subject`.
    fn replication(&self, subject: String) -> Finding {
        let role = self.get("role");
        let replicas: u32 = self.get("connected_slaves").parse().unwrap_or(0);
        match role {
            "master" if replicas == 0 => Finding::new(
                Verdict::Ok,
                subject,
                "a master with no replica: no failover can lose a lock",
                EXCLUSION,
            ),
            "master" => Finding::new(
                Verdict::Warn,
                subject,
                format!(
                    "a master with {replicas} replica(s): a failover loses the lock writes the \
                     replicas had not received, unless the clients set wait_for_replicas"
                ),
                EXCLUSION,
            ),
            other => Finding::new(
                Verdict::Fail,
                subject,
                format!(
                    "role {other:?}: a replica refuses writes; point the URL at the master (or \
                     at the sentinels, redis+sentinel://)"
                ),
                AVAILABILITY,
            ),
        }
    }
}

/// A connection to the server at `url`, and its address for messages.
async fn open(url: &str) -> Result<(String, MultiplexedConnection)> {
    let client = redis::Client::open(url)
        .map_err(|e| Error::invalid(format!("{url:?} is not a Redis URL: {e}")))?;
    let addr = client.get_connection_info().addr().to_string();
    let down = |e: String| Error::new(ErrorKind::Unavailable, format!("redis {addr}: {e}"));
    let conn = tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| down("no answer".into()))?
        .map_err(|e| down(e.to_string()))?;
    Ok((addr, conn))
}

/// Sends `cmd` (named `what` in errors) to the server at `addr`, bounded
/// by [`TIMEOUT`].
async fn ask<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    addr: &str,
    what: &str,
    cmd: &redis::Cmd,
) -> Result<T> {
    match tokio::time::timeout(TIMEOUT, cmd.query_async(conn)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::new(
            ErrorKind::Unavailable,
            format!("redis {addr}: {what}: {e}"),
        )),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("redis {addr}: {what}: no answer within {TIMEOUT:?}"),
        )),
    }
}

fn now_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_millis()).unwrap_or(0))
}
