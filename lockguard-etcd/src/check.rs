//! The deployment check of an etcd cluster: its voting members (an odd
//! count, for a quorum that survives failures), whether each member named
//! answers with a leader, the members' versions, the lease TTL the
//! cluster grants lockguard (a crashed holder's lease), and whether it
//! compacts its history. The facade's `lockguard::check(url)` and
//! `lockguard check URL` call it.

use std::time::Duration;

use etcd_client::{Client as EtcdClient, ConnectOptions, GetOptions};
use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::store::net;
use lockguard_core::{Error, Result};

use crate::DEFAULT_ETCD_LEASE_TTL;
use crate::store::{bounded, retried};

const LEASE: &str = "no deadlock (a crashed holder's lease); safety notes: etcd";
const AVAILABILITY: &str = "availability; safety notes: etcd";
const COMPACTION: &str = "availability and speed; docs/etcd.md, compaction";

/// How many revisions a cluster that never compacted may hold before the
/// check warns: a few hours of a busy lock's cycles.
const UNCOMPACTED_WARN: i64 = 1_000_000;

/// How long connecting and each request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the etcd cluster at `endpoints` (`"etcd1:2379,etcd2:2379"`), as
/// `user` when given.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
/// for a malformed list of members,
/// [`ErrorKind::Unavailable`](lockguard_core::ErrorKind::Unavailable) when
/// no member answers.
pub async fn cluster(endpoints: &str, user: Option<(String, String)>) -> Result<Report> {
    let named: Vec<&str> = endpoints.split(',').map(str::trim).collect();
    if named.iter().any(|e| e.is_empty()) {
        return Err(Error::invalid(
            "etcd members must be listed as host:port,host:port",
        ));
    }
    let options = |user: &Option<(String, String)>| {
        let mut o = ConnectOptions::new().with_connect_timeout(TIMEOUT);
        if let Some((u, p)) = user {
            o = o.with_user(u.clone(), p.clone());
        }
        o
    };
    let urls: Vec<String> = named.iter().map(|e| format!("http://{e}")).collect();
    let client = bounded(
        TIMEOUT,
        "connecting to etcd",
        EtcdClient::connect(&urls, Some(options(&user))),
    )
    .await
    .map_err(net::unreachable)?;
    let members = retried(
        &client,
        TIMEOUT,
        "listing etcd's members",
        |mut c| async move { c.member_list().await },
    )
    .await
    .map_err(net::unreachable)?;
    let voters = members.members().iter().filter(|m| !m.is_learner()).count();

    let mut statuses = Vec::new();
    for (name, url) in named.iter().zip(&urls) {
        let status = async {
            let mut one = bounded(
                TIMEOUT,
                "connecting to an etcd member",
                EtcdClient::connect([url.as_str()], Some(options(&user))),
            )
            .await?;
            bounded(TIMEOUT, "asking an etcd member's status", one.status()).await
        }
        .await;
        statuses.push((
            (*name).to_owned(),
            status.map(|s| (s.version().to_owned(), s.leader(), s.errors().to_vec())),
        ));
    }

    let asked = DEFAULT_ETCD_LEASE_TTL;
    let secs = i64::try_from(asked.as_secs()).unwrap_or(10);
    let granted = retried(&client, TIMEOUT, "granting a lease", |mut c| async move {
        c.lease_grant(secs, None).await
    })
    .await?;
    let id = granted.id();
    let _ = retried(&client, TIMEOUT, "revoking a lease", |mut c| async move {
        c.lease_revoke(id).await
    })
    .await;
    let granted = Duration::from_secs(granted.ttl().unsigned_abs());

    // A read at the first revision is refused once etcd compacted past it.
    let first = retried(
        &client,
        TIMEOUT,
        "reading etcd's first revision",
        |mut c| async move {
            c.get(
                "lockguard-check",
                Some(GetOptions::new().with_revision(1).with_count_only()),
            )
            .await
        },
    )
    .await;
    let compaction = match first {
        Ok(answer) => compaction_finding(false, answer.header().map_or(0, |h| h.revision())),
        Err(e) if e.to_string().contains("compacted") => compaction_finding(true, 0),
        Err(e) => Finding::new(
            Verdict::Warn,
            "compaction",
            format!("unknown: reading the first revision failed ({e})"),
            COMPACTION,
        ),
    };

    let findings = vec![
        members_finding(voters),
        health_finding(&statuses),
        version_finding(&statuses),
        lease_finding(asked, granted),
        compaction,
    ];
    Ok(Report::new("etcd", findings))
}

/// A member's version, the leader it knows (0: none), and its errors.
type Status = Result<(String, u64, Vec<String>)>;

/// The voting members: an odd number, at least three.
fn members_finding(voters: usize) -> Finding {
    let subject = "members";
    match voters {
        0 | 1 => Finding::new(
            Verdict::Warn,
            subject,
            "a single member: no fault tolerance, its failure stops every lock (and a lost \
             disk loses them); run three or five",
            AVAILABILITY,
        ),
        n if n % 2 == 0 => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "{n} voting members: an even count survives no more failures than {} (a \
                 quorum is {}); run an odd number",
                n - 1,
                n / 2 + 1
            ),
            AVAILABILITY,
        ),
        n => Finding::new(
            Verdict::Ok,
            subject,
            format!(
                "{n} voting members: a quorum of {} keeps serving with {} down",
                n / 2 + 1,
                (n - 1) / 2
            ),
            AVAILABILITY,
        ),
    }
}

/// Whether every member named answers, with a leader and no errors.
fn health_finding(statuses: &[(String, Status)]) -> Finding {
    let subject = "quorum";
    let mut bad = Vec::new();
    for (name, status) in statuses {
        match status {
            Err(e) => bad.push(format!("{name} does not answer ({e})")),
            Ok((_, 0, _)) => bad.push(format!("{name} has no leader")),
            Ok((_, _, errors)) if !errors.is_empty() => {
                bad.push(format!("{name} reports {}", errors.join("; ")));
            }
            Ok(_) => {}
        }
    }
    if bad.is_empty() {
        return Finding::new(
            Verdict::Ok,
            subject,
            format!(
                "all {} members named answer and follow a leader",
                statuses.len()
            ),
            AVAILABILITY,
        );
    }
    let verdict = if bad.len() == statuses.len() {
        Verdict::Fail
    } else {
        Verdict::Warn
    };
    Finding::new(verdict, subject, bad.join("; "), AVAILABILITY)
}

/// The members' versions; lockguard is tested on 3.4 and 3.5.
fn version_finding(statuses: &[(String, Status)]) -> Finding {
    let subject = "version";
    let mut versions: Vec<&str> = statuses
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok().map(|(v, _, _)| v.as_str()))
        .collect();
    versions.sort_unstable();
    versions.dedup();
    match versions.as_slice() {
        [] => Finding::new(
            Verdict::Warn,
            subject,
            "unknown: no member answered",
            AVAILABILITY,
        ),
        [v] if v.starts_with("3.") => {
            Finding::new(Verdict::Ok, subject, format!("etcd {v}"), AVAILABILITY)
        }
        [v] => Finding::new(
            Verdict::Warn,
            subject,
            format!("etcd {v}: lockguard is tested on etcd 3.4 and 3.5"),
            AVAILABILITY,
        ),
        many => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "members run different versions ({}): an upgrade under way?",
                many.join(", ")
            ),
            AVAILABILITY,
        ),
    }
}

/// Whether the cluster compacted its history (`compacted`), else how many
/// revisions it holds (`revision`, its current one): a cluster that never
/// compacts grows to its quota and then refuses every write.
fn compaction_finding(compacted: bool, revision: i64) -> Finding {
    let subject = "compaction";
    let ask = "run etcd with --auto-compaction-mode=periodic --auto-compaction-retention=5m \
               (or compact it on a schedule): without it the database grows to its quota and \
               the cluster refuses every write";
    if compacted {
        return Finding::new(
            Verdict::Ok,
            subject,
            "etcd has compacted its history",
            COMPACTION,
        );
    }
    if revision > UNCOMPACTED_WARN {
        return Finding::new(
            Verdict::Warn,
            subject,
            format!("etcd never compacted its history ({revision} revisions): {ask}"),
            COMPACTION,
        );
    }
    Finding::new(
        Verdict::Ok,
        subject,
        format!("no compaction yet ({revision} revisions); {ask}"),
        COMPACTION,
    )
}

/// What the cluster granted for the lease TTL lockguard asks for.
fn lease_finding(asked: Duration, granted: Duration) -> Finding {
    let subject = "lease TTL";
    let verdict = if granted == asked {
        Verdict::Ok
    } else {
        Verdict::Warn
    };
    Finding::new(
        verdict,
        subject,
        format!(
            "{granted:?} granted for {asked:?} asked: a crashed holder's locks are freed \
             within it, and a live holder's lease counts for at most {:?}",
            granted * 2 / 3
        ),
        LEASE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_that_never_compacts_is_warned_of_once_its_history_grows() {
        assert_eq!(compaction_finding(true, 0).verdict, Verdict::Ok);
        let young = compaction_finding(false, 40);
        assert_eq!(young.verdict, Verdict::Ok);
        assert!(
            young.detail.contains("no compaction yet (40 revisions)"),
            "{}",
            young.detail
        );
        let old = compaction_finding(false, UNCOMPACTED_WARN + 1);
        assert_eq!(old.verdict, Verdict::Warn);
        assert!(
            old.detail.contains("--auto-compaction-mode"),
            "{}",
            old.detail
        );
    }
}
