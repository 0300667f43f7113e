//! A cluster subscriber's connection on each master.
//!
//! A cluster delivers a `PUBLISH` to a subscriber on another node over the
//! cluster bus, and Redis opens the bus's links to its peers without
//! `TCP_NODELAY` (traced on 7.0.15; Valkey tracks it as its issue 1758): a
//! message written while an earlier one is unacknowledged waits for the
//! peer's delayed acknowledgement, 40 ms on Linux. About one wake-up in
//! sixty that crossed the bus took that long (BENCHMARKS.md). A release's
//! `PUBLISH` runs on its key's master, so a subscriber there hears it at
//! once. So the cluster subscriber keeps, beside its cluster connection
//! (which subscribes each channel on the node its slot names, and is what
//! a wait relies on), a connection on each master with the same
//! subscriptions. Whichever hears a message first delivers it; the copy
//! that comes second is dropped (`Seen`, in `deliver.rs`).
//!
//! These connections only speed wake-ups up: a master they cannot reach,
//! or one that a failover made since they last looked, leaves its
//! releases to the cluster connection, over the bus, and the loss of one
//! wakes nobody (the cluster connection's does). So nothing a wait does
//! waits for them. A keeper task owns them: told of a change of the
//! subscriptions, it brings every master's in line, all masters at once,
//! so that a master that is paused or cut off (which answers nothing until
//! a timeout) delays neither a wait nor the other masters. It also looks
//! at the masters again (`CLUSTER SLOTS`) every 30 s and whenever one of
//! these connections is lost: it connects new masters, drops those that
//! are no longer masters, and pings the others, again with backoff while
//! one does not answer (a connection that reconnects subscribes again by
//! itself).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lockguard_core::store::Inbox;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::channels::{Channels, Known};
use super::deliver::{Deliver, Seen};
use crate::client::{client_from_info, manager_config, node_connect_timeout};
use crate::options::{RedisOptions, TlsSettings};

/// How long a look at the masters holds.
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// The shortest and the longest pause between the keeper's attempts to
/// reach a master again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// A master's address.
type Addr = (String, u16);

/// A connection on one master, and the channels it is subscribed to.
struct Master {
    conn: ConnectionManager,
    channels: HashSet<String>,
}

/// What connects a master: the first seed's settings, and where its
/// messages go.
#[derive(Clone)]
struct Dialer {
    seeds: Vec<ConnectionInfo>,
    tls: TlsSettings,
    opts: RedisOptions,
    inbox: Weak<dyn Inbox>,
    seen: Arc<Seen>,
    /// Told when a master's connection is lost (the keeper listens).
    lost: Arc<Notify>,
}

/// The connections on the cluster's masters, by address, owned by the
/// keeper task.
struct Masters {
    cluster: ClusterConnection,
    dialer: Dialer,
    conns: HashMap<Addr, Master>,
}

/// Stops the keeper task when dropped (with the subscriber), and tells it
/// of changed subscriptions.
#[derive(Debug)]
pub(crate) struct Keeper {
    task: tokio::task::AbortHandle,
    changed: Arc<Notify>,
}

impl Keeper {
    /// Starts the keeper of the connections on `cluster`'s masters, which
    /// brings their subscriptions in line with `subscribed` (its channels
    /// known to be subscribed) each time it is [told](Keeper::changed),
    /// beginning now.
    pub(crate) fn start(
        cluster: ClusterConnection,
        seeds: &[ConnectionInfo],
        tls: &TlsSettings,
        opts: RedisOptions,
        inbox: Weak<dyn Inbox>,
        seen: Arc<Seen>,
        subscribed: Channels,
    ) -> Self {
        let changed = Arc::new(Notify::new());
        let masters = Masters {
            cluster,
            dialer: Dialer {
                seeds: seeds.to_vec(),
                tls: tls.clone(),
                opts,
                inbox,
                seen,
                lost: Arc::new(Notify::new()),
            },
            conns: HashMap::new(),
        };
        let task = tokio::spawn(keep(masters, subscribed, changed.clone()));
        Self {
            task: task.abort_handle(),
            changed,
        }
    }

    /// The subscriptions changed: the keeper brings the masters' in line.
    /// Returns at once.
    pub(crate) fn changed(&self) {
        self.changed.notify_one();
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The keeper: brings the masters' subscriptions in line with the wanted
/// channels when told of a change, looks at the masters (and pings their
/// connections) every [`LOOK_AGAIN`] and after each loss of a master's
/// connection, and tries again with backoff while a master does not
/// answer. Runs until its [`Keeper`] is dropped.
async fn keep(mut masters: Masters, subscribed: Channels, changed: Arc<Notify>) {
    let lost = masters.dialer.lost.clone();
    let mut pause = BACKOFF.0;
    // The first round looks at the masters; a round after a loss, a
    // failure or a while looks again and pings every master.
    let mut look = true;
    let mut looked = tokio::time::Instant::now();
    loop {
        let mut failed = 0;
        if look {
            looked = tokio::time::Instant::now();
            failed += usize::from(!masters.look().await);
        }
        let channels: HashSet<String> = subscribed
            .lock()
            .await
            .iter()
            .filter(|(_, k)| **k == Known::Subscribed)
            .map(|(c, _)| c.clone())
            .collect();
        failed += masters.settle(&Arc::new(channels), look).await;
        if failed == 0 {
            pause = BACKOFF.0;
            tokio::select! {
                () = changed.notified() => look = looked.elapsed() >= LOOK_AGAIN,
                () = lost.notified() => look = true,
                () = tokio::time::sleep_until(looked + LOOK_AGAIN) => look = true,
            }
        } else {
            // A change need not wait out the pause: the masters that
            // answer take it at once.
            tokio::select! {
                () = changed.notified() => look = false,
                () = tokio::time::sleep(pause) => {
                    pause = (pause * 2).min(BACKOFF.1);
                    look = true;
                }
            }
        }
    }
}

impl Masters {
    /// Looks at the masters: drops the connections on nodes that are no
    /// longer masters, and adds a place (not yet connected) for each new
    /// one. A look that fails changes nothing, and says so (`false`).
    async fn look(&mut self) -> bool {
        let t = self.dialer.opts.response_timeout;
        let addrs =
            match tokio::time::timeout(t, masters(&mut self.cluster, &self.dialer.seeds)).await {
                Ok(Ok(addrs)) => addrs,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "listing the cluster's masters failed");
                    return false;
                }
                Err(_) => {
                    tracing::debug!("listing the cluster's masters timed out");
                    return false;
                }
            };
        self.conns.retain(|a, _| addrs.contains(a));
        for addr in addrs {
            if !self.conns.contains_key(&addr)
                && let Some(master) = self.connect_later(&addr)
            {
                self.conns.insert(addr, master);
            }
        }
        true
    }

    /// A place for the master at `addr`: a connection manager, which
    /// connects on its first request. `None` when it cannot be built.
    fn connect_later(&self, addr: &Addr) -> Option<Master> {
        match self.dialer.manager(addr) {
            Ok(conn) => Some(Master {
                conn,
                channels: HashSet::new(),
            }),
            Err(e) => {
                tracing::debug!(master = %addr.0, port = addr.1, error = %e,
                    "no pub/sub connection on a cluster master; its wake-ups cross the bus");
                None
            }
        }
    }

    /// Brings every master's subscriptions in line with `channels`, all
    /// masters at once, pinging each first when `ping` (a connection given
    /// up by its manager reconnects on a request, and subscribes again):
    /// how many masters failed.
    async fn settle(&mut self, channels: &Arc<HashSet<String>>, ping: bool) -> usize {
        let t = self.dialer.opts.response_timeout;
        let mut steps = JoinSet::new();
        for (addr, master) in &self.conns {
            let (addr, mut conn) = (addr.clone(), master.conn.clone());
            let (mut have, want) = (master.channels.clone(), channels.clone());
            steps.spawn(async move {
                let ok = settle_one(&mut conn, &addr, &mut have, &want, ping, t).await;
                (addr, have, ok)
            });
        }
        let mut failed = 0;
        while let Some(step) = steps.join_next().await {
            let Ok((addr, have, ok)) = step else {
                failed += 1;
                continue;
            };
            failed += usize::from(!ok);
            if let Some(master) = self.conns.get_mut(&addr) {
                master.channels = have;
            }
        }
        failed
    }
}

/// One master's step of [`Masters::settle`]: whether it answered every
/// request. `have` follows what the master confirmed; the step stops at
/// the first request that fails.
async fn settle_one(
    conn: &mut ConnectionManager,
    addr: &Addr,
    have: &mut HashSet<String>,
    want: &HashSet<String>,
    ping: bool,
    t: Duration,
) -> bool {
    if ping {
        let ping = redis::cmd("PING");
        if !matches!(
            tokio::time::timeout(t, ping.query_async::<()>(conn)).await,
            Ok(Ok(()))
        ) {
            tracing::debug!(master = %addr.0, port = addr.1, "a cluster master's pub/sub connection is down");
            return false;
        }
    }
    let add: Vec<String> = want.difference(have).cloned().collect();
    let drop: Vec<String> = have.difference(want).cloned().collect();
    for (channel, on) in add
        .into_iter()
        .map(|c| (c, true))
        .chain(drop.into_iter().map(|c| (c, false)))
    {
        let r = if on {
            tokio::time::timeout(t, conn.subscribe(&channel)).await
        } else {
            tokio::time::timeout(t, conn.unsubscribe(&channel)).await
        };
        if !matches!(r, Ok(Ok(()))) {
            tracing::debug!(master = %addr.0, port = addr.1, channel, on,
                "changing a subscription on a cluster master failed; its wake-ups cross the bus");
            return false;
        }
        if on {
            have.insert(channel);
        } else {
            have.remove(&channel);
        }
    }
    true
}

impl Dialer {
    /// A RESP3 connection manager for the master at `addr`, made as the
    /// first seed's (its credentials, TLS and TCP settings), that connects
    /// on its first request and subscribes again after a reconnect.
    fn manager(&self, addr: &Addr) -> lockguard_core::Result<ConnectionManager> {
        let Some(seed) = self.seeds.first() else {
            return Err(lockguard_core::Error::invalid("no seed node"));
        };
        let (host, port) = addr.clone();
        let node = match seed.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = client_from_info(seed.clone().set_addr(node))?;
        let client = if self.tls.is_set() {
            #[cfg(feature = "tls-rustls")]
            {
                redis::Client::build_with_tls(
                    client.get_connection_info().clone(),
                    self.tls.certificates(),
                )
                .map_err(|e| {
                    lockguard_core::Error::invalid("unusable TLS settings for a cluster master")
                        .with_source(e)
                })?
            }
            #[cfg(not(feature = "tls-rustls"))]
            return Err(lockguard_core::Error::invalid(
                "TLS certificates for a cluster need the tls-rustls feature",
            ));
        } else {
            client
        };
        let deliver = Deliver::master(self.inbox.clone(), self.lost.clone(), self.seen.clone());
        let config = manager_config(self.opts)
            .set_connection_timeout(Some(node_connect_timeout(self.opts.connect_timeout)))
            .set_push_sender(deliver)
            .set_automatic_resubscription();
        ConnectionManager::new_lazy_with_config(client, config).map_err(|e| {
            lockguard_core::Error::invalid("unusable settings for a cluster master's connection")
                .with_source(e)
        })
    }
}

/// The masters' addresses, from `CLUSTER SLOTS`.
async fn masters(
    cluster: &mut ClusterConnection,
    seeds: &[ConnectionInfo],
) -> redis::RedisResult<Vec<Addr>> {
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(cluster)
        .await?;
    let seed_host = seeds.first().and_then(|s| match s.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => Some(host.as_str()),
        _ => None,
    });
    Ok(slot_masters(&slots, seed_host))
}

/// The masters named in a `CLUSTER SLOTS` reply, each once. A node that
/// does not know its own address names it empty (or `?`): `seed_host`
/// then. Entries of another shape are skipped.
fn slot_masters(slots: &Value, seed_host: Option<&str>) -> Vec<Addr> {
    let mut addrs = Vec::new();
    let Value::Array(ranges) = slots else {
        return addrs;
    };
    for range in ranges {
        let Value::Array(range) = range else { continue };
        let Some(Value::Array(master)) = range.get(2) else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) if !h.is_empty() && h.as_slice() != b"?" => {
                String::from_utf8_lossy(h).into_owned()
            }
            _ => match seed_host {
                Some(h) => h.to_owned(),
                None => continue,
            },
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        if !addrs.contains(&(host.clone(), port)) {
            addrs.push((host, port));
        }
    }
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value::{Array, BulkString, Int, Nil};

    fn node(host: &str, port: i64) -> Value {
        Array(vec![
            BulkString(host.into()),
            Int(port),
            BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn slot_masters_are_each_master_once_and_skip_what_they_cannot_read() {
        let slots = Array(vec![
            Array(vec![
                Int(0),
                Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Array(vec![Int(5461), Int(10922), node("", 7001)]),
            Array(vec![Int(10923), Int(12000), node("10.0.0.1", 7000)]),
            Array(vec![Int(12001), Int(16383), node("?", 7002)]),
            Array(vec![Int(1), Int(2), node("10.0.0.9", 70_000)]),
            Array(vec![Int(1), Int(2)]),
            Nil,
        ]);
        assert_eq!(
            slot_masters(&slots, Some("seed")),
            vec![
                ("10.0.0.1".to_owned(), 7000),
                ("seed".to_owned(), 7001),
                ("seed".to_owned(), 7002),
            ]
        );
        assert_eq!(
            slot_masters(&slots, None),
            vec![("10.0.0.1".to_owned(), 7000)]
        );
        assert!(slot_masters(&Nil, Some("seed")).is_empty());
    }
}
