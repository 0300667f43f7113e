//! The one pub/sub connection of a client, shared by every waiting key.
//!
//! It is a RESP3 connection manager: it reconnects by itself and subscribes
//! again to every channel after a reconnect. Messages are routed to the
//! waiters as the connection reads them, with no task in between (a handoff
//! is on the critical path of every contended acquisition); a disconnect
//! wakes every waiter, so nobody sleeps through a handoff announced while
//! the connection was down.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use redis::aio::{AsyncPushSender, ConnectionManager, SendError};
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{Mutex, OnceCell};

use super::{Conn, RedisOptions, bounded, manager_config};
use crate::backend::{Inbox, Listener, StoreFuture};
use crate::error::{Error, ErrorKind, Result};

/// Where a subscriber connects.
#[derive(Debug, Clone)]
pub(crate) enum SubTarget {
    /// One server (RESP3 client).
    Single(redis::Client),
    /// A cluster, through these seed nodes. Releases are published with
    /// `PUBLISH`, which a cluster delivers on every node.
    #[cfg(feature = "cluster")]
    Cluster(Vec<redis::ConnectionInfo>, super::TlsSettings),
    /// The master a group of sentinels names, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(super::SentinelTarget),
}

/// What this client knows of a channel's subscription on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// The server confirmed it.
    Subscribed,
    /// A change was asked for and its outcome is unknown.
    Maybe,
}

/// The subscriber connection, created on the first wait.
#[derive(Debug)]
pub(crate) struct Subscriber {
    target: SubTarget,
    opts: RedisOptions,
    conn: OnceCell<Conn>,
    /// Channels subscribed on the server; the lock also orders every
    /// SUBSCRIBE and UNSUBSCRIBE this client sends.
    subscribed: Mutex<HashMap<String, Known>>,
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
            subscribed: Mutex::new(HashMap::new()),
        }
    }

    async fn connection(&self, inbox: &Arc<dyn Inbox>) -> Result<Conn> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let tx = Deliver(Arc::downgrade(inbox));
                let what = || "connecting the pub/sub connection".to_owned();
                let conn = match &self.target {
                    SubTarget::Single(client) => {
                        let config = manager_config(self.opts)
                            .set_push_sender(tx)
                            .set_automatic_resubscription();
                        let c = ConnectionManager::new_with_config(client.clone(), config);
                        Conn::Single(bounded(self.opts.connect_timeout, what, c).await?)
                    }
                    #[cfg(feature = "sentinel")]
                    SubTarget::Sentinel(target) => {
                        let config = manager_config(self.opts)
                            .set_push_sender(tx)
                            .set_automatic_resubscription();
                        // On another master, a handoff announced meanwhile
                        // may have been missed: every waiter checks.
                        let woken = Arc::downgrade(inbox);
                        let on_switch: super::sentinel::OnSwitch = Arc::new(move || {
                            if let Some(inbox) = woken.upgrade() {
                                inbox.wake_all();
                            }
                        });
                        let c = super::sentinel::SentinelConn::connect(
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
                        let client = super::cluster_client_for(infos, self.opts, tls, Some(tx))?;
                        let c = client.get_async_connection();
                        Conn::Cluster(bounded(self.opts.connect_timeout, what, c).await?)
                    }
                };
                Ok::<_, Error>(conn)
            })
            .await?;
        Ok(conn.clone())
    }

    /// Brings the server's subscription for `channel` in line with whether
    /// anyone waits on it now.
    ///
    /// A change whose outcome is unknown (it failed or timed out, perhaps
    /// after the server ran it) leaves the channel recorded as maybe
    /// subscribed: the next change asks again, and a channel nobody wants
    /// is unsubscribed then, never left subscribed for good.
    async fn sync_channel(&self, channel: &str, inbox: Arc<dyn Inbox>) -> Result<()> {
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
        let t = self.opts.response_timeout;
        let what = || format!("changing the subscription to {channel:?}");
        bounded(t, what, conn.set_subscribed(channel, wanted)).await?;
        if wanted {
            subscribed.insert(channel.to_owned(), Known::Subscribed);
        } else {
            subscribed.remove(channel);
        }
        Ok(())
    }
}

impl Listener for Subscriber {
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        StoreFuture::boxed(self.sync_channel(channel, inbox))
    }
}

/// Routes pub/sub messages to a client's waiters, called by the connection
/// as it reads them: it only takes a lock and wakes a task, never blocks.
pub(crate) struct Deliver(Weak<dyn Inbox>);

impl std::fmt::Debug for Deliver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deliver")
    }
}

impl AsyncPushSender for Deliver {
    fn send(&self, push: PushInfo) -> std::result::Result<(), SendError> {
        let Some(inbox) = self.0.upgrade() else {
            // The client is gone: nobody listens any more.
            return Err(SendError);
        };
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(channel)) = push.data.first()
                    && let Ok(channel) = std::str::from_utf8(channel)
                {
                    // The payload is the waiter's token, or the released
                    // token for a Redlock release (the same release
                    // announced by several nodes wakes waiters once).
                    let payload = match push.data.get(1) {
                        Some(Value::BulkString(token)) => token.as_slice(),
                        _ => &[],
                    };
                    inbox.deliver(channel, payload);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("pub/sub connection lost; waking every waiter to retry");
                inbox.wake_all();
            }
            _ => {}
        }
        Ok(())
    }
}
