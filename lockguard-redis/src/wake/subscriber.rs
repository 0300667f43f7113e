//! The one pub/sub connection of a client, shared by every waiting key.
//!
//! It is a RESP3 connection manager: it reconnects by itself and subscribes
//! again to every channel after a reconnect. Messages are routed to the
//! waiters as the connection reads them, with no task in between (a handoff
//! is on the critical path of every contended acquisition); a disconnect
//! wakes every waiter, so nobody sleeps through a handoff announced while
//! the connection was down.
//!
//! The connection manager gives up reconnecting after a few seconds, and a
//! listening connection sends nothing that would make it try again: after
//! a longer outage it would stay down for good, and waiters would fall back
//! to their timed refreshes without anyone noticing. So a keeper task, for
//! as long as the subscriber lives, answers each lost connection by pinging
//! (which makes the manager reconnect) with bounded backoff until the
//! server answers, then subscribes every wanted channel again and wakes
//! every waiter to check for a handoff announced while it was away.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::ProtocolVersion;
use redis::aio::ConnectionManager;
use tokio::sync::{Mutex, Notify, OnceCell};
use tokio::task::AbortHandle;

use super::channels::{Channels, Known};
use super::deliver::Deliver;
#[cfg(feature = "cluster")]
use super::deliver::Seen;
use crate::client::manager_config;
use crate::conn::Conn;
use crate::error::within;
use crate::options::RedisOptions;
use lockguard_core::store::{Inbox, Listener, StoreFuture};
use lockguard_core::{Error, ErrorKind, Result};

/// Where a subscriber connects.
#[derive(Debug, Clone)]
pub(crate) enum SubTarget {
    /// One server (RESP3 client).
    Single(redis::Client),
    /// A cluster, through these seed nodes. Releases are published with
    /// `PUBLISH`, which a cluster delivers on every node; a connection on
    /// each master hears them first (see `masters.rs`).
    #[cfg(feature = "cluster")]
    Cluster(Vec<redis::ConnectionInfo>, crate::options::TlsSettings),
    /// The master a group of sentinels names, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(crate::sentinel::SentinelTarget),
}

/// The shortest and the longest pause between the keeper's attempts to
/// reach the server again after the connection was lost.
const RECONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(500));

/// The subscriber connection, created on the first wait.
#[derive(Debug)]
pub(crate) struct Subscriber {
    target: SubTarget,
    opts: RedisOptions,
    conn: OnceCell<Conn>,
    subscribed: Channels,
    /// Told by the connection each time it is lost.
    lost: Arc<Notify>,
    /// The keeper task, started with the connection and stopped with the
    /// subscriber.
    keeper: OnceLock<Keeper>,
    /// The keeper of a cluster's connection on each master (see
    /// `masters.rs`), started at the first subscription.
    #[cfg(feature = "cluster")]
    masters: OnceLock<super::masters::Keeper>,
    /// The messages a cluster's subscriber delivered lately: each comes on
    /// its master's connection and on the cluster connection too.
    #[cfg(feature = "cluster")]
    seen: Arc<Seen>,
}

/// Aborts the keeper task when the subscriber is dropped: the task holds
/// the connection, which would otherwise outlive its client.
#[derive(Debug)]
struct Keeper(AbortHandle);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Subscriber {
    pub(crate) fn new(client: &redis::Client, opts: RedisOptions) -> Result<Self> {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings)).map_err(|e| {
            Error::new(ErrorKind::InvalidInput, "cannot build the pub/sub client").with_source(e)
        })?;
        Ok(Self::for_target(SubTarget::Single(client), opts))
    }

    pub(crate) fn for_target(target: SubTarget, opts: RedisOptions) -> Self {
        Self {
            target,
            opts,
            conn: OnceCell::new(),
            subscribed: Arc::new(Mutex::new(HashMap::new())),
            lost: Arc::new(Notify::new()),
            keeper: OnceLock::new(),
            #[cfg(feature = "cluster")]
            masters: OnceLock::new(),
            #[cfg(feature = "cluster")]
            seen: Arc::new(Seen::default()),
        }
    }

    /// What routes the messages of this subscriber's connection.
    fn deliver(&self, inbox: &Arc<dyn Inbox>) -> Deliver {
        Deliver::new(
            Arc::downgrade(inbox),
            self.lost.clone(),
            #[cfg(feature = "cluster")]
            matches!(self.target, SubTarget::Cluster(..)).then(|| self.seen.clone()),
        )
    }

    async fn connection(&self, inbox: &Arc<dyn Inbox>) -> Result<Conn> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let tx = self.deliver(inbox);
                let what = || "connecting the pub/sub connection".to_owned();
                let conn = match &self.target {
                    SubTarget::Single(client) => {
                        let config = manager_config(self.opts)
                            .set_push_sender(tx)
                            .set_automatic_resubscription();
                        let c = ConnectionManager::new_with_config(client.clone(), config);
                        let t = self.opts.connect_timeout;
                        Conn::Single(within(t, what, tokio::time::timeout(t, c).await)?)
                    }
                    #[cfg(feature = "sentinel")]
                    SubTarget::Sentinel(target) => {
                        let config = manager_config(self.opts)
                            .set_push_sender(tx)
                            .set_automatic_resubscription();
                        // On another master, a handoff announced meanwhile
                        // may have been missed: every waiter checks.
                        let woken = Arc::downgrade(inbox);
                        let on_switch: crate::sentinel::OnSwitch = Arc::new(move || {
                            if let Some(inbox) = woken.upgrade() {
                                inbox.wake_all();
                            }
                        });
                        let c = crate::sentinel::SentinelConn::connect(
                            target,
                            ProtocolVersion::RESP3,
                            config,
                            self.opts,
                            Some(on_switch),
                        );
                        Conn::Sentinel(c.await?)
                    }
                    #[cfg(feature = "cluster")]
                    SubTarget::Cluster(infos, tls) => {
                        let client =
                            crate::client::cluster_client_with(infos, self.opts, tls, |b| {
                                b.push_sender(tx)
                            })?;
                        let c = client.get_async_connection();
                        let t = self.opts.connect_timeout;
                        Conn::Cluster(within(t, what, tokio::time::timeout(t, c).await)?)
                    }
                };
                // A cluster connection reconnects each node for as long as
                // it lives, and subscribes it again, by itself.
                #[cfg(feature = "cluster")]
                let kept = !matches!(conn, Conn::Cluster(_));
                #[cfg(not(feature = "cluster"))]
                let kept = true;
                if kept {
                    let task = tokio::spawn(keep(
                        conn.clone(),
                        self.subscribed.clone(),
                        self.lost.clone(),
                        Arc::downgrade(inbox),
                        self.opts,
                    ));
                    let _ = self.keeper.set(Keeper(task.abort_handle()));
                }
                Ok::<_, Error>(conn)
            })
            .await?;
        Ok(conn.clone())
    }
}

/// Asks the server to subscribe `channel` (or unsubscribe it) and records
/// the outcome in `subscribed`: left as maybe subscribed when unknown.
async fn change(
    subscribed: &mut HashMap<String, Known>,
    conn: &mut Conn,
    channel: &str,
    wanted: bool,
    opts: RedisOptions,
) -> Result<()> {
    let what = || format!("changing the subscription to {channel:?}");
    let answer =
        tokio::time::timeout(opts.response_timeout, conn.set_subscribed(channel, wanted)).await;
    within(opts.response_timeout, what, answer)?;
    if wanted {
        subscribed.insert(channel.to_owned(), Known::Subscribed);
    } else {
        subscribed.remove(channel);
    }
    Ok(())
}

/// The keeper of a subscriber connection: after each loss, brings it back
/// and restores its subscriptions (see the module's docs). Runs until the
/// subscriber drops it.
async fn keep(
    mut conn: Conn,
    subscribed: Channels,
    lost: Arc<Notify>,
    inbox: Weak<dyn Inbox>,
    opts: RedisOptions,
) {
    loop {
        lost.notified().await;
        // The manager reconnects by itself for a few seconds; a request
        // that finds it given up makes it start again.
        let mut pause = RECONNECT_BACKOFF.0;
        loop {
            let ping = redis::cmd("PING");
            let what = || "pinging the pub/sub connection".to_owned();
            let answer =
                tokio::time::timeout(opts.response_timeout, ping.query_async::<()>(&mut conn))
                    .await;
            match within(opts.response_timeout, what, answer) {
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "pub/sub connection still down; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECONNECT_BACKOFF.1);
                }
            }
        }
        let Some(inbox) = inbox.upgrade() else {
            return;
        };
        // Every channel again, wanted or not: the manager's own
        // resubscription may have failed unseen, and a channel left maybe
        // subscribed must be settled either way.
        let mut subscribed = subscribed.lock().await;
        let channels: Vec<String> = subscribed.keys().cloned().collect();
        let mut restored = 0;
        for channel in channels {
            let wanted = inbox.is_wanted(&channel);
            subscribed.insert(channel.clone(), Known::Maybe);
            match change(&mut subscribed, &mut conn, &channel, wanted, opts).await {
                Ok(()) => restored += 1,
                Err(e) => {
                    // Left maybe subscribed: the next wait on it asks again.
                    tracing::warn!(channel, error = %e, "restoring a pub/sub subscription failed");
                }
            }
        }
        drop(subscribed);
        tracing::debug!(restored, "pub/sub connection back; subscriptions restored");
        // A handoff announced before the subscriptions were back was
        // missed: every waiter checks.
        inbox.wake_all();
    }
}

impl Listener for Subscriber {
    /// Brings the server's subscription for `channel` in line with whether
    /// anyone waits on it now.
    ///
    /// A change whose outcome is unknown (it failed or timed out, perhaps
    /// after the server ran it) leaves the channel recorded as maybe
    /// subscribed: the next change asks again, and a channel nobody wants
    /// is unsubscribed then, never left subscribed for good.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        StoreFuture::new(async move {
            let mut subscribed = self.subscribed.lock().await;
            let wanted = inbox.is_wanted(channel);
            match (subscribed.get(channel), wanted) {
                (Some(Known::Subscribed), true) | (None, false) => return Ok(()),
                _ => {}
            }
            // Recorded before asking: the server may run the change even if
            // its answer never arrives.
            subscribed.insert(channel.to_owned(), Known::Maybe);
            let mut conn = self.connection(&inbox).await?;
            change(&mut subscribed, &mut conn, channel, wanted, self.opts).await?;
            // The masters' subscriptions follow in the background: they
            // only speed wake-ups up, and a paused master must not hold up
            // the wait.
            #[cfg(feature = "cluster")]
            if let (SubTarget::Cluster(seeds, tls), Conn::Cluster(cluster)) = (&self.target, &conn)
            {
                self.masters
                    .get_or_init(|| {
                        super::masters::Keeper::start(
                            cluster.clone(),
                            seeds,
                            tls,
                            self.opts,
                            Arc::downgrade(&inbox),
                            self.seen.clone(),
                            self.subscribed.clone(),
                        )
                    })
                    .changed();
            }
            Ok(())
        })
    }
}
