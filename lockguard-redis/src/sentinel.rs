//! A connection to the master that a group of Redis Sentinels names, which
//! follows it across a failover.
//!
//! redis-rs asks the sentinels for the master when a connection is made,
//! and its reconnecting connection keeps going back to that address. This
//! one holds a reconnecting connection to the master of the moment and,
//! when a request fails in a way a failover explains (the connection lost
//! or refused, `READONLY` from a master turned replica, `MASTERDOWN`), asks
//! the sentinels again in the background; when they name another master, it
//! switches to a connection to that one (subscribing again to the channels
//! it had, for a pub/sub connection). The request that failed is reported
//! as failed: its outcome is unknown, and callers clean up after it. Every
//! such connection also asks the sentinels once a second, so one idle
//! through a failover has usually moved before its next request. A command
//! connection renews on the new master, at once, every lease it renewed
//! (see `store/leases.rs`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, TlsMode, Value};

use crate::client::client_with;
use crate::error::within;
use crate::options::{RedisOptions, TlsSettings};
use lockguard_core::{Error, ErrorKind, Result};

/// How often a listening connection asks the sentinels where the master is.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Called after a switch to a new master (a pub/sub connection wakes every
/// waiter: a handoff announced meanwhile may have been missed).
pub(crate) type OnSwitch = Arc<dyn Fn() + Send + Sync>;

/// Where to find the master: the sentinels, and the settings of the
/// connection to it (database, user, password).
///
/// TLS: the master is reached over TLS when the sentinels are
/// (`rediss://` URLs, checked to agree), with the same certificates.
#[derive(Clone)]
pub(crate) struct SentinelTarget {
    pub(crate) sentinels: Vec<redis::ConnectionInfo>,
    pub(crate) service: String,
    pub(crate) master: redis::RedisConnectionInfo,
    pub(crate) tls: TlsSettings,
}

impl SentinelTarget {
    /// The settings of a connection to the master, in `protocol`.
    fn node(&self, protocol: redis::ProtocolVersion) -> Result<SentinelNodeConnectionInfo> {
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(self.master.clone().set_protocol(protocol));
        Ok(match self.tls_mode()? {
            Some(mode) => node.set_tls_mode(mode),
            None => node,
        })
    }

    /// How the sentinels are reached, which is how the master is: plain
    /// (`None`), or TLS with or without checking the certificate.
    fn tls_mode(&self) -> Result<Option<TlsMode>> {
        let mode = |info: &redis::ConnectionInfo| match info.addr() {
            redis::ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
            redis::ConnectionAddr::TcpTls { .. } => Some(TlsMode::Secure),
            _ => None,
        };
        let first = self.sentinels.first().and_then(mode);
        if self.sentinels.iter().any(|s| mode(s) != first) {
            return Err(Error::invalid(
                "the sentinels' urls mix TLS and plain connections; \
                 use rediss:// for all of them (the master is then reached over TLS too) or for none",
            ));
        }
        Ok(first)
    }

    /// A client of the sentinels that asks them for the master.
    fn client(&self, protocol: redis::ProtocolVersion) -> Result<SentinelClient> {
        let unusable =
            |e| Error::new(ErrorKind::InvalidInput, "unusable sentinel settings").with_source(e);
        if !self.tls.is_set() {
            return SentinelClient::build(
                self.sentinels.clone(),
                self.service.clone(),
                Some(self.node(protocol)?),
                SentinelServerType::Master,
            )
            .map_err(unusable);
        }
        self.client_with_certificates(protocol, unusable)
    }

    /// With certificates, the sentinels and the master are reached with
    /// them: redis-rs takes them for the master (whose role it checks when
    /// the sentinels name it) only through its builder, which gives every
    /// sentinel the first one's user and password.
    #[cfg(feature = "tls-rustls")]
    fn client_with_certificates(
        &self,
        protocol: redis::ProtocolVersion,
        unusable: impl Fn(RedisError) -> Error,
    ) -> Result<SentinelClient> {
        use redis::sentinel::SentinelClientBuilder;

        let Some(mode) = self.tls_mode()? else {
            return Err(Error::invalid(
                "TLS certificates were given, but the sentinels' urls are not TLS (rediss://) urls",
            ));
        };
        let certificates = self.tls.certificates();
        let addrs = self.sentinels.iter().map(|s| s.addr().clone());
        let mut b = SentinelClientBuilder::new(addrs, &self.service, SentinelServerType::Master)
            .map_err(&unusable)?
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates)
            .set_client_to_redis_tls_mode(mode)
            .set_client_to_redis_protocol(protocol)
            .set_client_to_redis_db(self.master.db());
        if let Some(user) = self.master.username() {
            b = b.set_client_to_redis_username(user);
        }
        if let Some(password) = self.master.password() {
            b = b.set_client_to_redis_password(password);
        }
        let first = self.sentinels[0].redis_settings();
        if let Some(user) = first.username() {
            b = b.set_client_to_sentinel_username(user);
        }
        if let Some(password) = first.password() {
            b = b.set_client_to_sentinel_password(password);
        }
        b.build().map_err(unusable)
    }

    /// redis-rs takes certificates for the master only with rustls.
    #[cfg(not(feature = "tls-rustls"))]
    fn client_with_certificates(
        &self,
        _protocol: redis::ProtocolVersion,
        _unusable: impl Fn(RedisError) -> Error,
    ) -> Result<SentinelClient> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "TLS certificates for Redis Sentinel need the tls-rustls feature \
             (without certificates, rediss:// sentinels and their master are checked against the system's roots)",
        ))
    }
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels.len())
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// The connection; clones share it.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    inner: Arc<Inner>,
}

struct Inner {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The master's address and the connection to it.
    current: RwLock<(String, ConnectionManager)>,
    config: ConnectionManagerConfig,
    opts: RedisOptions,
    /// Whether the sentinels are being asked now.
    resolving: AtomicBool,
    /// Channels subscribed (a pub/sub connection), to subscribe again on
    /// the next master.
    channels: Mutex<HashSet<String>>,
    on_switch: Option<OnSwitch>,
    service: String,
    /// Certificates for a master reached over TLS.
    tls: TlsSettings,
}

impl std::fmt::Debug for SentinelConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConn")
            .field("service", &self.inner.service)
            .field("master", &self.master_addr())
            .finish_non_exhaustive()
    }
}

/// Whether a failed request may mean the master moved.
fn master_may_have_moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

impl SentinelConn {
    /// Asks the sentinels for the master and connects to it.
    pub(crate) async fn connect(
        target: &SentinelTarget,
        protocol: redis::ProtocolVersion,
        config: ConnectionManagerConfig,
        opts: RedisOptions,
        on_switch: Option<OnSwitch>,
    ) -> Result<Self> {
        if target.sentinels.is_empty() {
            return Err(Error::invalid(
                "redis sentinel needs at least one sentinel url",
            ));
        }
        if target.service.is_empty() {
            return Err(Error::invalid(
                "redis sentinel needs the master's service name",
            ));
        }
        let sentinel = target.client(protocol)?;
        let sentinel = tokio::sync::Mutex::new(sentinel);
        let first = master(&sentinel, &config, opts, &target.service, &target.tls).await?;
        let conn = Self {
            inner: Arc::new(Inner {
                sentinel,
                current: RwLock::new(first),
                config,
                opts,
                resolving: AtomicBool::new(false),
                channels: Mutex::new(HashSet::new()),
                on_switch,
                service: target.service.clone(),
                tls: target.tls.clone(),
            }),
        };
        conn.watch();
        Ok(conn)
    }

    /// Asks the sentinels every [`WATCH_INTERVAL`] whether the master
    /// moved, until the connection is dropped: a listening connection sends
    /// nothing that could fail, and a command connection that was idle
    /// through a failover would otherwise fail its first request after it.
    fn watch(&self) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_INTERVAL).await;
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                inner.resolve_soon();
            }
        });
    }

    /// The master's address this connection talks to now.
    pub(crate) fn master_addr(&self) -> String {
        self.inner.current().0
    }

    fn conn(&self) -> ConnectionManager {
        self.inner.current().1
    }

    /// Notes the outcome of a request: one that a failover explains makes
    /// the sentinels be asked again, in the background.
    fn after<T>(&self, r: &RedisResult<T>) {
        if let Err(e) = r
            && master_may_have_moved(e)
        {
            self.inner.clone().resolve_soon();
        }
    }

    /// Subscribes `channel` (or unsubscribes it), now and on every master
    /// this connection switches to.
    pub(crate) async fn set_subscribed(&self, channel: &str, on: bool) -> RedisResult<()> {
        {
            let mut channels = self
                .inner
                .channels
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if on {
                channels.insert(channel.to_owned());
            } else {
                channels.remove(channel);
            }
        }
        let mut conn = self.conn();
        let r = if on {
            conn.subscribe(channel).await
        } else {
            conn.unsubscribe(channel).await
        };
        self.after(&r);
        r
    }
}

/// Asks the sentinels for the master of `service` and connects to it.
async fn master(
    sentinel: &tokio::sync::Mutex<SentinelClient>,
    config: &ConnectionManagerConfig,
    opts: RedisOptions,
    service: &str,
    tls: &TlsSettings,
) -> Result<(String, ConnectionManager)> {
    let (addr, client) = master_client(sentinel, opts, service, tls).await?;
    Ok((
        addr.clone(),
        connect_master(addr, client, config, opts).await?,
    ))
}

/// Asks the sentinels for the master of `service`: its address, and a
/// client for it (nothing connected yet), with `tls`'s certificates for a
/// TLS address.
async fn master_client(
    sentinel: &tokio::sync::Mutex<SentinelClient>,
    opts: RedisOptions,
    service: &str,
    tls: &TlsSettings,
) -> Result<(String, redis::Client)> {
    let what = || format!("asking the sentinels for the master of {service:?}");
    let client = {
        let mut sentinel = sentinel.lock().await;
        let answer = tokio::time::timeout(opts.connect_timeout, sentinel.async_get_client()).await;
        within(opts.connect_timeout, what, answer)?
    };
    let info = client.get_connection_info().clone();
    let addr = info.addr().to_string();
    Ok((addr, client_with(info, tls)?))
}

/// Connects to the master at `addr`.
async fn connect_master(
    addr: String,
    client: redis::Client,
    config: &ConnectionManagerConfig,
    opts: RedisOptions,
) -> Result<ConnectionManager> {
    let connecting = ConnectionManager::new_with_config(client, config.clone());
    let answer = tokio::time::timeout(opts.connect_timeout, connecting).await;
    within(
        opts.connect_timeout,
        || format!("connecting to the redis master at {addr}"),
        answer,
    )
}

impl Inner {
    fn current(&self) -> (String, ConnectionManager) {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the sentinels again, once at a time, until they answer; switches
    /// to the master they name if it is another one.
    fn resolve_soon(self: Arc<Self>) {
        if self.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            for _ in 0..20 {
                // Connected only when it is another master: this runs every
                // second, and the master rarely moves.
                let moved = match master_client(&self.sentinel, self.opts, &self.service, &self.tls)
                    .await
                {
                    Ok((addr, _)) if addr == self.current().0 => Ok(None),
                    Ok((addr, client)) => {
                        connect_master(addr.clone(), client, &self.config, self.opts)
                            .await
                            .map(|conn| Some((addr, conn)))
                    }
                    Err(e) => Err(e),
                };
                match moved {
                    Ok(Some((addr, conn))) => {
                        self.switch(addr, conn).await;
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "no master from the sentinels yet");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                }
            }
            self.resolving.store(false, Ordering::Release);
        });
    }

    async fn switch(&self, addr: String, mut conn: ConnectionManager) {
        let channels: Vec<String> = self
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        for channel in &channels {
            if let Err(e) = conn.subscribe(channel).await {
                tracing::warn!(channel, error = %e, "subscribing on the new master failed");
            }
        }
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|p| p.into_inner()),
            (addr.clone(), conn),
        );
        tracing::warn!(from = %old.0, to = %addr, service = %self.service, "redis master moved; following it");
        if let Some(f) = &self.on_switch {
            f();
        }
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.conn().req_packed_command(cmd).await;
            self.after(&r);
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self
                .conn()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.after(&r);
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.conn().get_db()
    }
}
