//! The deployment check of a Redis Sentinel group: what each sentinel says
//! of the service (`SENTINEL MASTER`, `SENTINEL CKQUORUM`), whether they
//! agree on its master, and that master as a server.

use std::collections::HashMap;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, ErrorKind, Result};

use super::{AVAILABILITY, EXCLUSION, Node, ask, open};

/// Checks the Sentinel group at `urls` (each sentinel's
/// `redis://host:port`) for `service`: that a quorum of sentinels can
/// authorize a failover, that there are at least three, that they name one
/// master, and that master as a server (the findings of
/// [`server`](super::server)).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a malformed URL or none at all,
/// [`ErrorKind::Unavailable`] when no sentinel answers, or the master they
/// name does not.
pub async fn sentinel<S: AsRef<str>>(urls: &[S], service: &str) -> Result<Report> {
    let mut asked = Vec::new();
    let mut unreachable = Vec::new();
    for url in urls {
        match Said::ask(url.as_ref(), service).await {
            Ok(said) => asked.push(said),
            Err(e) if e.kind() == ErrorKind::InvalidInput => return Err(e),
            Err(e) => unreachable.push(e.message().to_owned()),
        }
    }
    if asked.is_empty() {
        return Err(if unreachable.is_empty() {
            Error::invalid("a sentinel check needs at least one sentinel")
        } else {
            Error::new(ErrorKind::Unavailable, unreachable.join("; "))
        });
    }
    let mut findings = Vec::new();
    if !unreachable.is_empty() {
        findings.push(Finding::new(
            Verdict::Warn,
            "sentinels reached",
            format!(
                "{} of {} could not be asked ({}): the check speaks for the others",
                unreachable.len(),
                urls.len(),
                unreachable.join("; ")
            ),
            AVAILABILITY,
        ));
    }

    // Quorum: every sentinel reached must be able to authorize a failover.
    let refused: Vec<String> = asked
        .iter()
        .filter_map(|s| s.quorum.as_ref().err().cloned())
        .collect();
    findings.push(if refused.is_empty() {
        Finding::new(
            Verdict::Ok,
            "quorum",
            asked[0].quorum.clone().unwrap_or_default(),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Fail,
            "quorum",
            format!(
                "{}: when the master fails no failover is authorized, and locks cannot be \
                 taken until it is back",
                refused.join("; ")
            ),
            AVAILABILITY,
        )
    });

    // How many sentinels watch the service, as each one knows them.
    let known = asked
        .iter()
        .filter_map(|s| s.field("num-other-sentinels").parse::<u32>().ok())
        .map(|others| others + 1)
        .min()
        .unwrap_or(0);
    findings.push(if known >= 3 {
        Finding::new(
            Verdict::Ok,
            "sentinels",
            format!("{known} sentinels watch {service:?}"),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Warn,
            "sentinels",
            format!(
                "{known} sentinel(s) watch {service:?}: with fewer than three, one down (or cut \
                 off) leaves no majority to authorize a failover; run three or more, on \
                 separate machines"
            ),
            AVAILABILITY,
        )
    });

    // The master: the sentinels must name one, and think it up.
    let mut named: HashMap<String, Vec<&str>> = HashMap::new();
    for s in &asked {
        named.entry(s.master()).or_default().push(&s.addr);
    }
    if named.len() > 1 {
        let mut each: Vec<String> = named
            .iter()
            .map(|(master, by)| format!("{} name {master}", by.join(", ")))
            .collect();
        each.sort();
        findings.push(Finding::new(
            Verdict::Fail,
            "master",
            format!(
                "the sentinels disagree ({}): clients that ask different sentinels write to \
                 different masters, and each grants the same lock; one group of sentinels per \
                 service",
                each.join("; ")
            ),
            EXCLUSION,
        ));
        return Ok(Report::new("redis-sentinel", findings));
    }
    let master = asked[0].master();
    let flags = asked[0].field("flags");
    let down = flags
        .split(',')
        .any(|f| f == "s_down" || f == "o_down" || f == "disconnected");
    findings.push(if down {
        Finding::new(
            Verdict::Fail,
            "master",
            format!("{master}, flagged {flags}: the sentinels see it down"),
            AVAILABILITY,
        )
    } else {
        Finding::new(
            Verdict::Ok,
            "master",
            format!("{master}, named by every sentinel reached"),
            EXCLUSION,
        )
    });
    if !down {
        // The master is reached as the sentinels are: with TLS or without.
        let scheme = urls
            .first()
            .and_then(|u| u.as_ref().split_once("://"))
            .map_or("redis", |(scheme, _)| scheme);
        let node = Node::connect(&format!("{scheme}://{master}")).await?;
        findings.extend(node.findings(""));
    }
    Ok(Report::new("redis-sentinel", findings))
}

/// What one sentinel says of the service.
struct Said {
    addr: String,
    /// `SENTINEL MASTER`'s fields.
    master: HashMap<String, String>,
    /// `SENTINEL CKQUORUM`'s answer, or its refusal.
    quorum: std::result::Result<String, String>,
}

impl Said {
    async fn ask(url: &str, service: &str) -> Result<Self> {
        let (addr, mut conn) = open(url).await?;
        let fields: Vec<String> = ask(
            &mut conn,
            &addr,
            "SENTINEL MASTER",
            redis::cmd("SENTINEL").arg("MASTER").arg(service),
        )
        .await?;
        let master = fields
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect();
        let quorum = ask::<String>(
            &mut conn,
            &addr,
            "SENTINEL CKQUORUM",
            redis::cmd("SENTINEL").arg("CKQUORUM").arg(service),
        )
        .await
        .map_err(|e| e.message().to_owned());
        Ok(Self {
            addr,
            master,
            quorum,
        })
    }

    fn field(&self, key: &str) -> &str {
        self.master.get(key).map_or("", String::as_str)
    }

    /// `ip:port` of the master it names.
    fn master(&self) -> String {
        format!("{}:{}", self.field("ip"), self.field("port"))
    }
}
