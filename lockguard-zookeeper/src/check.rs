//! The deployment check of a ZooKeeper ensemble: its voting members (the
//! `/zookeeper/config` node), the servers' versions (the `srvr` command,
//! which ZooKeeper allows by default), and the session timeout the
//! ensemble grants lockguard (with the bounds from `conf`, when the
//! servers allow it): a crashed holder's lease. The facade's
//! `lockguard::check(url)` and `lockguard check URL` call it.

use std::time::Duration;

use lockguard_core::check::{Finding, Report, Verdict};
use lockguard_core::{Error, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::DEFAULT_ZOOKEEPER_SESSION_TIMEOUT;
use crate::store::{Session, SessionOptions};

const SESSION: &str = "no deadlock (a crashed holder's lease); safety notes: ZooKeeper";
const AVAILABILITY: &str = "availability; safety notes: ZooKeeper";

/// How long connecting and each request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Checks the ZooKeeper ensemble at `hosts` (`"zk1:2181,zk2:2181"`) as a
/// client with lockguard's default session timeout
/// ([`DEFAULT_ZOOKEEPER_SESSION_TIMEOUT`]) sees it.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
/// for an empty connect string,
/// [`ErrorKind::Unavailable`](lockguard_core::ErrorKind::Unavailable) when
/// no server gives a session.
pub async fn ensemble(hosts: &str) -> Result<Report> {
    let hosts = hosts.trim();
    if hosts.is_empty() {
        return Err(Error::invalid("zookeeper connect string is empty"));
    }
    let asked = DEFAULT_ZOOKEEPER_SESSION_TIMEOUT;
    let session = Session::open(SessionOptions {
        hosts: hosts.to_owned(),
        session_timeout: asked,
        connect_timeout: TIMEOUT,
    })
    .await?;
    let client = session.client();
    let config = tokio::time::timeout(TIMEOUT, client.get_config())
        .await
        .ok()
        .and_then(std::result::Result::ok)
        .map(|(data, _)| String::from_utf8_lossy(&data).into_owned());
    let granted = session.timeout();
    drop(client);
    drop(session);

    let mut servers = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        // A chroot (`host:port/path`) follows the last host.
        let host = host.split('/').next().unwrap_or(host);
        servers.push((host.to_owned(), four_letter(host, "srvr").await));
    }
    let mut findings = vec![members_finding(config.as_deref(), &servers)];
    findings.push(version_finding(&servers));
    let mut bounds = None;
    for (host, _) in &servers {
        if let Some(conf) = four_letter(host, "conf").await
            && let (Some(min), Some(max)) = (
                field(&conf, "minSessionTimeout"),
                field(&conf, "maxSessionTimeout"),
            )
        {
            bounds = Some(format!(
                " (the servers' bounds: minSessionTimeout {min} ms, maxSessionTimeout {max} ms)"
            ));
            break;
        }
    }
    findings.push(session_finding(asked, granted, bounds.as_deref()));
    Ok(Report::new("zookeeper", findings))
}

/// The voting members, from the ensemble's configuration node (empty on a
/// standalone server, which `srvr` then names).
fn members_finding(config: Option<&str>, servers: &[(String, Option<String>)]) -> Finding {
    let subject = "ensemble";
    let voters = config.map(|c| {
        c.lines()
            .filter(|l| l.starts_with("server."))
            .filter(|l| !l.contains(":observer"))
            .count()
    });
    let standalone = servers
        .iter()
        .filter_map(|(_, srvr)| srvr.as_deref())
        .any(|s| field(s, "Mode").is_some_and(|m| m == "standalone"));
    let voters = match voters {
        Some(n) if n > 0 => n,
        _ if standalone => 1,
        _ => {
            return Finding::new(
                Verdict::Warn,
                subject,
                "unknown: neither the /zookeeper/config node nor srvr said how many servers vote; \
                 run an odd number, at least three",
                AVAILABILITY,
            );
        }
    };
    match voters {
        1 => Finding::new(
            Verdict::Warn,
            subject,
            "a single server: no fault tolerance, its failure stops every lock (and a lost \
             disk loses them); run three or five",
            AVAILABILITY,
        ),
        n if n % 2 == 0 => Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "{n} voting members: an even count survives no more failures than {} (a \
                 majority is {}), and adds one more server to wait for; run an odd number",
                n - 1,
                n / 2 + 1
            ),
            AVAILABILITY,
        ),
        n => Finding::new(
            Verdict::Ok,
            subject,
            format!(
                "{n} voting members: a majority of {} keeps serving with {} down",
                n / 2 + 1,
                (n - 1) / 2
            ),
            AVAILABILITY,
        ),
    }
}

/// The lowest version the servers report; lockguard needs 3.5 (container
/// nodes).
fn version_finding(servers: &[(String, Option<String>)]) -> Finding {
    let subject = "version";
    let mut versions: Vec<(Vec<u32>, String)> = servers
        .iter()
        .filter_map(|(_, srvr)| field(srvr.as_deref()?, "Zookeeper version"))
        .map(|v| {
            let v = v.split([',', '-']).next().unwrap_or(v).trim().to_owned();
            (v.split('.').filter_map(|p| p.parse().ok()).collect(), v)
        })
        .collect();
    versions.sort();
    match versions.first() {
        None => Finding::new(
            Verdict::Warn,
            subject,
            "unknown: no server answered srvr (allow it in 4lw.commands.whitelist); lockguard \
             needs ZooKeeper 3.5 or newer",
            AVAILABILITY,
        ),
        Some((numbers, v)) if numbers.as_slice() < [3, 5].as_slice() => Finding::new(
            Verdict::Fail,
            subject,
            format!("ZooKeeper {v}: lockguard needs 3.5 or newer (container nodes)"),
            AVAILABILITY,
        ),
        Some((_, v)) => {
            let last = &versions[versions.len() - 1].1;
            Finding::new(
                Verdict::Ok,
                subject,
                if last == v {
                    format!("ZooKeeper {v}")
                } else {
                    format!("ZooKeeper {v} to {last}")
                },
                AVAILABILITY,
            )
        }
    }
}

/// What the ensemble granted for the session timeout lockguard asked for:
/// the lease of a crashed holder.
fn session_finding(asked: Duration, granted: Duration, bounds: Option<&str>) -> Finding {
    let subject = "session timeout";
    let bounds = bounds.unwrap_or("");
    let ms = |d: Duration| d.as_millis();
    if granted == asked {
        Finding::new(
            Verdict::Ok,
            subject,
            format!(
                "{} ms granted as asked{bounds}: a crashed holder's locks are freed within it, \
                 and a live holder's lease counts for at most {} ms",
                ms(granted),
                ms(granted * 2 / 3)
            ),
            SESSION,
        )
    } else {
        Finding::new(
            Verdict::Warn,
            subject,
            format!(
                "lockguard asks for {} ms and the ensemble grants {} ms{bounds}: a crashed \
                 holder's locks are freed only after {} ms, and a live holder's lease counts for \
                 at most {} ms; ask for a timeout within the bounds \
                 (Builder::zookeeper_session_timeout) or widen them",
                ms(asked),
                ms(granted),
                ms(granted),
                ms(granted * 2 / 3)
            ),
            SESSION,
        )
    }
}

/// `name: value` (or `name=value`) in a four-letter command's answer.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let rest = rest.strip_prefix(':').or_else(|| rest.strip_prefix('='))?;
        Some(rest.trim())
    })
}

/// A four-letter command's answer from the server at `host`, or `None`
/// when it does not answer one (unreachable, or the command not allowed).
async fn four_letter(host: &str, cmd: &str) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
        stream.write_all(cmd.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    let text = tokio::time::timeout(TIMEOUT, ask).await.ok().flatten()?;
    (!text.contains("is not executed because it is not in the whitelist")).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_counted_from_the_configuration() {
        let config = "server.1=127.0.0.1:1:2:participant;127.0.0.1:3\n\
                      server.2=127.0.0.1:4:5:participant;127.0.0.1:6\n\
                      server.3=127.0.0.1:7:8:observer;127.0.0.1:9\nversion=100000000";
        let f = members_finding(Some(config), &[]);
        assert_eq!(f.verdict, Verdict::Warn, "{f}");
        assert!(f.detail.starts_with("2 voting members"), "{f}");
        let srvr = "Zookeeper version: 3.8.0-5a02a05, built on\nMode: standalone\n";
        let servers = [("h:1".to_owned(), Some(srvr.to_owned()))];
        assert!(
            members_finding(Some(""), &servers)
                .detail
                .starts_with("a single server")
        );
        assert_eq!(version_finding(&servers).detail, "ZooKeeper 3.8.0");
        let old = [(
            "h:1".to_owned(),
            Some("Zookeeper version: 3.4.14-4c2\n".to_owned()),
        )];
        assert_eq!(version_finding(&old).verdict, Verdict::Fail);
    }

    #[test]
    fn a_clamped_session_timeout_is_told_with_the_lease_it_gives() {
        let f = session_finding(Duration::from_secs(10), Duration::from_secs(4), None);
        assert_eq!(f.verdict, Verdict::Warn);
        assert!(f.detail.contains("grants 4000 ms"), "{f}");
        assert!(f.detail.contains("at most 2666 ms"), "{f}");
    }
}
