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
//! that comes second is dropped ([`Seen`]).
//!
//! These connections only speed wake-ups up: a master they cannot reach,
//! or one that a failover made since they last looked, leaves its
//! releases to the cluster connection, over the bus, and the loss of one
//! wakes nobody (the cluster connection's does). A keeper task looks at
//! the masters again (`CLUSTER SLOTS`) every 30 s and whenever one of
//! these connections is lost: it connects new masters, drops those that
//! are no longer masters, and pings the others until each answers (a
//! connection that reconnects subscribes again by itself).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lockguard_core::store::Inbox;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::{Mutex, Notify};

use super::subscriber::{Channels, Deliver, Known};
use super::{RedisOptions, TlsSettings, client_from_info, manager_config};

/// How long a look at the masters holds.
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// The shortest and the longest pause between the keeper's attempts to
/// reach a master again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// A master's address.
type Addr = (String, u16);

/// The connections on the cluster's masters, by address, and what makes
/// new ones.
pub(crate) struct Masters {
    cluster: ClusterConnection,
    seeds: Vec<ConnectionInfo>,
    tls: TlsSettings,
    opts: RedisOptions,
    inbox: Weak<dyn Inbox>,
    seen: Arc<Seen>,
    /// Told when a master's connection is lost (the keeper listens).
    lost: Arc<Notify>,
    conns: HashMap<Addr, ConnectionManager>,
    looked: Option<tokio::time::Instant>,
}

impl std::fmt::Debug for Masters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masters")
            .field("masters", &self.conns.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Stops the keeper task when dropped (with the subscriber).
#[derive(Debug)]
pub(crate) struct Keeper(tokio::task::AbortHandle);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Masters {
    /// No connection yet: the first [`Masters::sync`] looks at the
    /// masters. The keeper task starts too, and runs until the returned
    /// [`Keeper`] is dropped.
    pub(crate) fn start(
        cluster: ClusterConnection,
        seeds: &[ConnectionInfo],
        tls: &TlsSettings,
        opts: RedisOptions,
        inbox: Weak<dyn Inbox>,
        seen: Arc<Seen>,
        subscribed: Channels,
    ) -> (Arc<Mutex<Self>>, Keeper) {
        let lost = Arc::new(Notify::new());
        let masters = Arc::new(Mutex::new(Self {
            cluster,
            seeds: seeds.to_vec(),
            tls: tls.clone(),
            opts,
            inbox,
            seen,
            lost: lost.clone(),
            conns: HashMap::new(),
            looked: None,
        }));
        let task = tokio::spawn(keep(Arc::downgrade(&masters), subscribed, lost));
        (masters, Keeper(task.abort_handle()))
    }

    /// Brings `channel`'s subscription on every master in line with
    /// `wanted`, after looking at the masters if it is time (a master met
    /// for the first time subscribes every one of `channels`). Best
    /// effort: what fails is logged, and left to the cluster connection.
    pub(crate) async fn sync(&mut self, channel: &str, wanted: bool, channels: &[String]) {
        if self.looked.is_none_or(|at| at.elapsed() >= LOOK_AGAIN) {
            self.look(channels).await;
        }
        let t = self.opts.response_timeout;
        for (addr, conn) in &mut self.conns {
            subscribe(conn, addr, channel, wanted, t).await;
        }
    }

    /// Looks at the masters: connects those met for the first time (each
    /// subscribing `channels`) and drops those no longer masters.
    async fn look(&mut self, channels: &[String]) {
        self.looked = Some(tokio::time::Instant::now());
        let t = self.opts.response_timeout;
        let addrs = match tokio::time::timeout(t, masters(&mut self.cluster, &self.seeds)).await {
            Ok(Ok(addrs)) => addrs,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "listing the cluster's masters failed");
                return;
            }
            Err(_) => {
                tracing::debug!("listing the cluster's masters timed out");
                return;
            }
        };
        self.conns.retain(|a, _| addrs.contains(a));
        for addr in addrs {
            if self.conns.contains_key(&addr) {
                continue;
            }
            match self.connect(&addr).await {
                Ok(mut conn) => {
                    for c in channels {
                        subscribe(&mut conn, &addr, c, true, t).await;
                    }
                    self.conns.insert(addr, conn);
                }
                Err(e) => {
                    tracing::debug!(master = %addr.0, port = addr.1, error = %e,
                        "no pub/sub connection on a cluster master; its wake-ups cross the bus");
                }
            }
        }
    }

    /// Pings every master's connection (a connection given up by its
    /// manager reconnects on a request, and subscribes again): how many did
    /// not answer.
    async fn ping(&mut self) -> usize {
        let t = self.opts.response_timeout;
        let mut down = 0;
        for (addr, conn) in &mut self.conns {
            let ping = redis::cmd("PING");
            if !matches!(
                tokio::time::timeout(t, ping.query_async::<()>(conn)).await,
                Ok(Ok(()))
            ) {
                tracing::debug!(master = %addr.0, port = addr.1, "a cluster master's pub/sub connection is still down");
                down += 1;
            }
        }
        down
    }

    /// A RESP3 connection on the master at `addr`, made as the first
    /// seed's (its credentials, TLS and TCP settings), that subscribes
    /// again after a reconnect.
    async fn connect(&self, addr: &Addr) -> lockguard_core::Result<ConnectionManager> {
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
            .set_push_sender(deliver)
            .set_automatic_resubscription();
        let t = self.opts.connect_timeout;
        match tokio::time::timeout(t, ConnectionManager::new_with_config(client, config)).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(lockguard_core::Error::new(
                lockguard_core::ErrorKind::Unavailable,
                "connecting to a cluster master",
            )
            .with_source(e)),
            Err(_) => Err(lockguard_core::Error::new(
                lockguard_core::ErrorKind::Unavailable,
                "connecting to a cluster master timed out",
            )),
        }
    }
}

/// The keeper: every [`LOOK_AGAIN`] and after each loss of a master's
/// connection, looks at the masters again and pings their connections,
/// again and again (with backoff) while one does not answer. Ends when the
/// masters are dropped.
async fn keep(masters: Weak<Mutex<Masters>>, subscribed: Channels, lost: Arc<Notify>) {
    let mut pause = BACKOFF.0;
    let mut down = 0;
    loop {
        if down == 0 {
            pause = BACKOFF.0;
            tokio::select! {
                () = lost.notified() => {}
                () = tokio::time::sleep(LOOK_AGAIN) => {}
            }
        } else {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(BACKOFF.1);
        }
        let Some(masters) = masters.upgrade() else {
            return;
        };
        // The subscriptions first, then the masters: the order a wait's
        // `sync` takes them in.
        let channels: Vec<String> = subscribed
            .lock()
            .await
            .iter()
            .filter(|(_, k)| **k == Known::Subscribed)
            .map(|(c, _)| c.clone())
            .collect();
        let mut m = masters.lock().await;
        m.look(&channels).await;
        down = m.ping().await;
    }
}

/// Subscribes `channel` on one master (or unsubscribes it), logging a
/// failure.
async fn subscribe(
    conn: &mut ConnectionManager,
    addr: &Addr,
    channel: &str,
    on: bool,
    t: Duration,
) {
    let r = if on {
        tokio::time::timeout(t, conn.subscribe(channel)).await
    } else {
        tokio::time::timeout(t, conn.unsubscribe(channel)).await
    };
    if !matches!(r, Ok(Ok(()))) {
        tracing::debug!(master = %addr.0, port = addr.1, channel, on,
            "changing a subscription on a cluster master failed; its wake-ups cross the bus");
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

/// The messages delivered in the last [`Seen::WINDOW`], by a hash of their
/// channel and payload: a cluster's subscriber hears each release on the
/// key's master and over the bus, and delivers it once. A payload names
/// one handoff (its token, fence and attempt) or one waiter's turn, so two
/// different messages alike within the window are not expected; were one
/// dropped, its waiter's timed refresh would find what it said.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    hasher: RandomState,
    recent: std::sync::Mutex<VecDeque<(Instant, u64)>>,
}

impl Seen {
    /// How long a message is remembered: far longer than the bus delays
    /// the second copy.
    const WINDOW: Duration = Duration::from_secs(2);
    /// The most messages remembered.
    const MOST: usize = 4096;

    /// Whether this message is heard for the first time (and remembers it).
    pub(crate) fn first(&self, channel: &str, payload: &[u8]) -> bool {
        let hash = self.hasher.hash_one((channel, payload));
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        while recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= Self::WINDOW)
        {
            recent.pop_front();
        }
        if recent.iter().any(|(_, h)| *h == hash) {
            return false;
        }
        if recent.len() == Self::MOST {
            recent.pop_front();
        }
        recent.push_back((now, hash));
        true
    }
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

    #[test]
    fn a_message_heard_twice_within_the_window_is_delivered_once() {
        let seen = Seen::default();
        assert!(seen.first("c", b"handoff 1"));
        assert!(!seen.first("c", b"handoff 1"), "the copy over the bus");
        assert!(seen.first("c", b"handoff 2"));
        assert!(seen.first("other", b"handoff 1"), "another channel");
    }

    #[test]
    fn seen_forgets_the_oldest_beyond_its_bound() {
        let seen = Seen::default();
        for i in 0..=Seen::MOST {
            assert!(seen.first("c", i.to_string().as_bytes()));
        }
        // The first was forgotten to make room; the last is remembered.
        assert!(seen.first("c", b"0"));
        assert!(!seen.first("c", Seen::MOST.to_string().as_bytes()));
    }
}
