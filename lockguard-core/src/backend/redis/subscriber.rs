//! The one pub/sub connection of a client, shared by every waiting key.
//!
//! It is a RESP3 connection manager: it reconnects by itself and subscribes
//! again to every channel after a reconnect. Messages go to a dispatcher task
//! that wakes the waiters of the channel; a disconnect wakes every waiter, so
//! nobody sleeps through a release announced while the connection was down.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use redis::aio::ConnectionManager;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{Mutex, OnceCell, mpsc};

use super::{RedisOptions, bounded, manager_config};
use crate::error::{Error, ErrorKind, Result};
use crate::notify::Waiters;

/// The subscriber connection, created on the first wait.
#[derive(Debug)]
pub(crate) struct Subscriber {
    client: redis::Client,
    opts: RedisOptions,
    conn: OnceCell<ConnectionManager>,
    /// Channels subscribed on the server; the lock also orders every
    /// SUBSCRIBE and UNSUBSCRIBE this client sends.
    subscribed: Mutex<HashSet<String>>,
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
        Ok(Self {
            client,
            opts,
            conn: OnceCell::new(),
            subscribed: Mutex::new(HashSet::new()),
        })
    }

    async fn connection(&self, waiters: &Arc<Waiters>) -> Result<ConnectionManager> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let (tx, rx) = mpsc::unbounded_channel();
                let config = manager_config(self.opts)
                    .set_push_sender(tx)
                    .set_automatic_resubscription();
                let conn = bounded(
                    self.opts.connect_timeout,
                    || "connecting the pub/sub connection".to_owned(),
                    ConnectionManager::new_with_config(self.client.clone(), config),
                )
                .await?;
                tokio::spawn(dispatch(rx, Arc::downgrade(waiters)));
                Ok::<_, Error>(conn)
            })
            .await?;
        Ok(conn.clone())
    }

    /// Brings the server's subscription for `channel` in line with whether
    /// anyone waits on it now.
    pub(crate) async fn sync(&self, channel: &str, waiters: &Arc<Waiters>) -> Result<()> {
        let mut subscribed = self.subscribed.lock().await;
        let wanted = waiters.is_wanted(channel);
        let have = subscribed.contains(channel);
        if wanted == have {
            return Ok(());
        }
        let mut conn = self.connection(waiters).await?;
        if wanted {
            bounded(
                self.opts.response_timeout,
                || format!("subscribing to {channel:?}"),
                conn.subscribe(channel),
            )
            .await?;
            subscribed.insert(channel.to_owned());
        } else {
            bounded(
                self.opts.response_timeout,
                || format!("unsubscribing from {channel:?}"),
                conn.unsubscribe(channel),
            )
            .await?;
            subscribed.remove(channel);
        }
        Ok(())
    }
}

async fn dispatch(mut rx: mpsc::UnboundedReceiver<PushInfo>, waiters: Weak<Waiters>) {
    while let Some(push) = rx.recv().await {
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(channel)) = push.data.first()
                    && let Ok(channel) = std::str::from_utf8(channel)
                {
                    // The payload is the released token: the same release
                    // announced by several Redlock nodes wakes waiters once.
                    let release = match push.data.get(1) {
                        Some(Value::BulkString(token)) => token.as_slice(),
                        _ => &[],
                    };
                    waiters.notify_release(channel, release);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("pub/sub connection lost; waking every waiter to retry");
                waiters.notify_all();
            }
            _ => {}
        }
    }
}
