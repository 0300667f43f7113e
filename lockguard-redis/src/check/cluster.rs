//! The deployment check of a Redis Cluster: the cluster's state and slot
//! coverage (`CLUSTER INFO`), its masters and their replicas (`CLUSTER
//! NODES`), and each master as a server.

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, ErrorKind, Result};

use super::{AVAILABILITY, EXCLUSION, Node, ask, open};

/// The slots of a cluster.
const SLOTS: u32 = 16_384;

/// Checks the Redis Cluster reached through the seed nodes `urls`
/// (`redis://[user:password@]host:port`, or `rediss://`): that every slot
/// is served, which masters have replicas, and each master as a server
/// (version, `maxmemory-policy`, persistence; subjects prefixed with the
/// master's address).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL or none at all,
/// [`ErrorKind::Unavailable`] when no seed node answers.
pub async fn cluster<S: AsRef<str>>(urls: &[S]) -> Result<Report> {
    let mut failures = Vec::new();
    let mut view = None;
    for url in urls {
        match View::read(url.as_ref()).await {
            Ok(v) => {
                view = Some(v);
                break;
            }
            Err(e) if e.kind() == ErrorKind::InvalidInput => return Err(e),
            Err(e) => failures.push(e.message().to_owned()),
        }
    }
    let Some(view) = view else {
        return Err(if failures.is_empty() {
            Error::invalid("a cluster check needs at least one seed node")
        } else {
            Error::new(ErrorKind::Unavailable, failures.join("; "))
        });
    };
    let Some(nodes) = &view.nodes else {
        return Ok(Report::new(
            "redis-cluster",
            vec![Finding::new(
                Verdict::Fail,
                "cluster state",
                format!(
                    "{} is not a cluster node (cluster support disabled): connect to it with \
                     redis://, or list the cluster's nodes",
                    view.addr
                ),
                AVAILABILITY,
            )],
        ));
    };
    let mut findings = vec![view.state_finding()];
    let masters: Vec<&ClusterNode> = nodes
        .iter()
        .filter(|n| n.is_master() && n.slots > 0)
        .collect();
    for master in masters {
        let prefix = format!("{} ", master.addr);
        if master.failed() {
            findings.push(Finding::new(
                Verdict::Fail,
                format!("{prefix}state"),
                format!(
                    "the cluster marks this master failed: its {} slots are down (no replica \
                     took over)",
                    master.slots
                ),
                AVAILABILITY,
            ));
            continue;
        }
        let replicas = nodes
            .iter()
            .filter(|n| n.master_id == master.id && !n.failed())
            .count();
        findings.push(if replicas == 0 {
            Finding::new(
                Verdict::Warn,
                format!("{prefix}replication"),
                format!(
                    "a master with no replica: no failover is possible, so its crash takes its \
                     {} slots down and a restart without persistence forgets their locks; add a \
                     replica per master",
                    master.slots
                ),
                AVAILABILITY,
            )
        } else {
            Finding::new(
                Verdict::Warn,
                format!("{prefix}replication"),
                format!(
                    "a master with {replicas} replica(s): a failover loses the lock writes the \
                     replicas had not received (replication is asynchronous; wait_for_replicas, \
                     which narrows that window on one server and under Sentinel, is not offered \
                     on a cluster client)"
                ),
                EXCLUSION,
            )
        });
        match Node::connect(&node_url(view.url.as_str(), &master.addr)).await {
            Ok(node) => findings.extend(node.server_findings(&prefix)),
            Err(e) => findings.push(Finding::new(
                Verdict::Fail,
                format!("{prefix}state"),
                format!(
                    "the cluster lists this master, and it does not answer ({}): its slots are \
                     down until a replica takes over",
                    e.message()
                ),
                AVAILABILITY,
            )),
        }
    }
    Ok(Report::new("redis-cluster", findings))
}

/// What one seed node says of the cluster.
struct View {
    /// The seed's URL and address.
    url: String,
    addr: String,
    info: String,
    /// `None` when the seed is not a cluster node.
    nodes: Option<Vec<ClusterNode>>,
}

impl View {
    async fn read(url: &str) -> Result<Self> {
        let (addr, mut conn) = open(url).await?;
        let info: std::result::Result<String, _> = ask(
            &mut conn,
            &addr,
            "CLUSTER INFO",
            redis::cmd("CLUSTER").arg("INFO"),
        )
        .await;
        let info = match info {
            Ok(info) => info,
            Err(e) if e.message().contains("cluster support disabled") => {
                return Ok(Self {
                    url: url.to_owned(),
                    addr,
                    info: String::new(),
                    nodes: None,
                });
            }
            Err(e) => return Err(e),
        };
        let text: String = ask(
            &mut conn,
            &addr,
            "CLUSTER NODES",
            redis::cmd("CLUSTER").arg("NODES"),
        )
        .await?;
        Ok(Self {
            url: url.to_owned(),
            addr,
            info,
            nodes: Some(text.lines().filter_map(ClusterNode::parse).collect()),
        })
    }

    fn get(&self, key: &str) -> &str {
        self.info
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v)
    }

    /// `cluster_state` and the slots served.
    fn state_finding(&self) -> Finding {
        let state = self.get("cluster_state");
        let ok: u32 = self.get("cluster_slots_ok").parse().unwrap_or(0);
        let masters = self.get("cluster_size");
        if state == "ok" && ok == SLOTS {
            Finding::new(
                Verdict::Ok,
                "cluster state",
                format!("ok: all {SLOTS} slots served, by {masters} master(s)"),
                AVAILABILITY,
            )
        } else {
            Finding::new(
                Verdict::Fail,
                "cluster state",
                format!(
                    "cluster_state {state:?}, {ok} of {SLOTS} slots served ({} assigned, {} \
                     failing, {} possibly failing), as {} sees it: the locks of the other slots \
                     cannot be taken or released",
                    self.get("cluster_slots_assigned"),
                    self.get("cluster_slots_fail"),
                    self.get("cluster_slots_pfail"),
                    self.addr
                ),
                AVAILABILITY,
            )
        }
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
struct ClusterNode {
    id: String,
    /// `host:port`, without the cluster bus port.
    addr: String,
    flags: Vec<String>,
    /// The master's id for a replica, `-` for a master.
    master_id: String,
    /// How many slots it serves.
    slots: u32,
}

impl ClusterNode {
    /// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong>
    /// <epoch> <link> <slot> ...`; `None` for a line that is not one.
    fn parse(line: &str) -> Option<Self> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() < 8 {
            return None;
        }
        let addr = parts[1].split(['@', ',']).next()?.to_owned();
        let slots = parts[8..]
            .iter()
            // Slots being migrated or imported: `[slot->-id]`.
            .filter(|s| !s.starts_with('['))
            .map(|s| match s.split_once('-') {
                Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                    (Ok(a), Ok(b)) if b >= a => b - a + 1,
                    _ => 0,
                },
                None => u32::from(s.parse::<u32>().is_ok()),
            })
            .sum();
        Some(Self {
            id: parts[0].to_owned(),
            addr,
            flags: parts[2].split(',').map(str::to_owned).collect(),
            master_id: parts[3].to_owned(),
            slots,
        })
    }

    fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Marked failed (`fail`), or without an address (`noaddr`).
    fn failed(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "noaddr")
    }
}

/// The URL of the node at `addr`, with the scheme and credentials of the
/// seed URL `seed`.
fn node_url(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let creds = rest.rsplit_once('@').map_or("", |(c, _)| c);
    if creds.is_empty() {
        format!("{scheme}://{addr}")
    } else {
        format!("{scheme}://{creds}@{addr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_are_read() {
        let master = ClusterNode::parse(
            "07c3 127.0.0.1:30004@40004,host myself,master - 0 0 1 connected 0-5460 5462 \
             [5463->-e7d1]",
        )
        .unwrap();
        assert_eq!(master.addr, "127.0.0.1:30004");
        assert_eq!(master.slots, 5462);
        assert!(master.is_master() && !master.failed());
        let replica =
            ClusterNode::parse("e7d1 127.0.0.1:30005@40005 slave,fail 07c3 0 0 1 disconnected")
                .unwrap();
        assert_eq!(replica.master_id, "07c3");
        assert!(!replica.is_master() && replica.failed());
        assert_eq!(ClusterNode::parse("garbage"), None);
    }

    #[test]
    fn node_urls_keep_the_seeds_scheme_and_credentials() {
        assert_eq!(
            node_url("rediss://u:p@10.0.0.1:7000", "10.0.0.2:7001"),
            "rediss://u:p@10.0.0.2:7001"
        );
        assert_eq!(
            node_url("redis://10.0.0.1:7000", "10.0.0.2:7001"),
            "redis://10.0.0.2:7001"
        );
    }
}
