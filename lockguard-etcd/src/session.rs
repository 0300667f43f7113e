//! The client's lease in etcd: every key a client creates for a hold or a
//! place in a queue is attached to it, so a client whose process dies frees
//! its locks when the lease's TTL runs out. A task keeps it alive, a third
//! of the TTL apart; an operation that needs it to last past a moment asks
//! for a keep-alive first when it might not ([`Session::ensure`]).
//!
//! What the client knows of the lease's end is a lower bound: a keep-alive
//! sent at `t` and answered with `ttl` keeps the lease until at least
//! `t + ttl` (the server counts from when it got the request, later). When
//! etcd says the lease is gone (its TTL ran out while the client could not
//! reach the cluster), every key of it went with it: the client grants a
//! new lease, and its holds and places of the old one are lost.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use etcd_client::{Client as EtcdClient, KvClient, LeaseKeepAliveStream, LeaseKeeper, WatchClient};
use lockguard_core::{Error, ErrorKind, Result};
use tokio::time::Instant;

use crate::error::{etcd_error, lease_not_found};

/// The client's lease.
pub(crate) struct Session {
    client: EtcdClient,
    /// The client's key-value service alone: the requests of a lock cycle
    /// clone it, not the whole client (eight services' channels).
    kv: KvClient,
    /// Its watch service alone, likewise (a waiter's watches).
    watch: WatchClient,
    /// The TTL asked for.
    ttl: Duration,
    /// How long one request may take.
    timeout: Duration,
    state: Mutex<Lease>,
    /// The keep-alive stream, opened on first use and after a failure.
    keeper: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
    /// Called when a new lease replaced one that etcd had let go.
    renewed: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Until when the lease is not revoked as the client closes: a lock
    /// kept past its release (`Lock::at_least`) that could not be moved to
    /// a lease of its own may be on it still (see [`Session::keep_until`]).
    kept_until: Mutex<Option<Instant>>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lease = self.lease();
        f.debug_struct("Session")
            .field("lease", &lease.id)
            .field("ttl", &lease.granted)
            .finish_non_exhaustive()
    }
}

/// What the client knows of its lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    /// Its ID.
    pub(crate) id: i64,
    /// The TTL etcd granted (at least the one asked for).
    pub(crate) granted: Duration,
    /// When it ends at the earliest, unless kept alive again.
    pub(crate) expires: Instant,
}

impl Session {
    /// Grants the client's lease, of `ttl` (whole seconds, rounded up; etcd
    /// may grant more), and starts keeping it alive. Every request may take
    /// `timeout`.
    pub(crate) async fn open(
        client: EtcdClient,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let lease = grant(&client, ttl, timeout).await?;
        let session = Arc::new(Self {
            kv: client.kv_client(),
            watch: client.watch_client(),
            client,
            ttl,
            timeout,
            state: Mutex::new(lease),
            keeper: tokio::sync::Mutex::new(None),
            renewed: OnceLock::new(),
            kept_until: Mutex::new(None),
        });
        tokio::spawn(keep_alive(Arc::downgrade(&session)));
        Ok(session)
    }

    /// The etcd client (cheap to clone; its requests take `&mut self`).
    pub(crate) fn client(&self) -> EtcdClient {
        self.client.clone()
    }

    /// The client's key-value service, to clone for a request.
    pub(crate) fn kv(&self) -> &KvClient {
        &self.kv
    }

    /// The client's watch service.
    pub(crate) fn watches(&self) -> WatchClient {
        self.watch.clone()
    }

    /// How long one request may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The lease as the client knows it now.
    pub(crate) fn lease(&self) -> Lease {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` each time a new lease replaces one etcd let go.
    pub(crate) fn on_renewed(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.renewed.set(Box::new(f));
    }

    /// The lease, once it is known to last until at least `until`: at once
    /// when it is, after a keep-alive when it might not.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Unavailable`] when the keep-alive failed or did not
    /// keep it that long (a lease replaced since is not the one asked for:
    /// the caller's keys went with the old one).
    pub(crate) async fn ensure(&self, until: Instant) -> Result<Lease> {
        let lease = self.lease();
        if lease.expires >= until {
            return Ok(lease);
        }
        self.keep_alive_now().await?;
        let kept = self.lease();
        if kept.id == lease.id && kept.expires >= until {
            return Ok(kept);
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "the etcd lease (TTL {:?}) could not be kept alive for {:?} more",
                kept.granted,
                until.saturating_duration_since(Instant::now())
            ),
        ))
    }

    /// Sends one keep-alive and records its answer; grants a new lease
    /// when etcd says the old one is gone.
    pub(crate) async fn keep_alive_now(&self) -> Result<()> {
        let mut keeper = self.keeper.lock().await;
        let lease = self.lease();
        let sent_at = Instant::now();
        let answer = tokio::time::timeout(self.timeout, async {
            match keeper.as_mut() {
                Some((sender, stream)) => {
                    sender.keep_alive().await?;
                    match stream.message().await? {
                        Some(r) => Ok(r.ttl()),
                        None => Err(etcd_client::Error::LeaseKeepAliveError(
                            "the keep-alive stream ended".to_owned(),
                        )),
                    }
                }
                None => {
                    // Opening the stream sends the first keep-alive and
                    // reads its answer.
                    let mut leases = self.client.lease_client();
                    let (sender, stream) = leases.keep_alive(lease.id).await?;
                    *keeper = Some((sender, stream));
                    Ok(lease.granted.as_secs().try_into().unwrap_or(i64::MAX))
                }
            }
        })
        .await;
        match answer {
            Ok(Ok(ttl)) if ttl > 0 => {
                let ttl = Duration::from_secs(ttl.unsigned_abs());
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.id == lease.id {
                    state.expires = state.expires.max(sent_at + ttl);
                }
                Ok(())
            }
            Ok(Ok(_)) => {
                *keeper = None;
                drop(keeper);
                self.renew(lease.id).await
            }
            Ok(Err(e)) if lease_not_found(&e) => {
                *keeper = None;
                drop(keeper);
                self.renew(lease.id).await
            }
            Ok(Err(e)) => {
                *keeper = None;
                Err(etcd_error(e, "keeping the etcd lease alive"))
            }
            Err(_) => {
                *keeper = None;
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "keeping the etcd lease alive: no answer within {:?}",
                        self.timeout
                    ),
                ))
            }
        }
    }

    /// Grants a new lease in place of `old`, which etcd let go (unless
    /// another caller did already).
    async fn renew(&self, old: i64) -> Result<()> {
        if self.lease().id != old {
            return Ok(());
        }
        let lease = grant(&self.client, self.ttl, self.timeout).await?;
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.id != old {
                return Ok(());
            }
            *state = lease;
        }
        tracing::warn!(
            old_lease = old,
            lease = lease.id,
            "the etcd lease ran out while the cluster could not be reached: \
             every lock and queue place of this client was lost; a new lease was granted"
        );
        if let Some(f) = self.renewed.get() {
            f();
        }
        Ok(())
    }

    /// A lock kept until `until` may be on this lease: as the client
    /// closes before then, the lease is left to run out (its TTL) rather
    /// than revoked, which would free the lock at once.
    pub(crate) fn keep_until(&self, until: Instant) {
        let mut kept = self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        *kept = Some(kept.map_or(until, |k| k.max(until)));
    }

    /// Revokes the lease (its keys go at once): the client closes. Not
    /// while a lock kept on it may still be kept (see
    /// [`keep_until`](Session::keep_until)): the lease then runs out.
    pub(crate) fn revoke_later(&self) {
        let kept = *self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        if kept.is_some_and(|until| until > Instant::now()) {
            tracing::debug!(
                lease = self.lease().id,
                "the etcd lease is left to run out: a lock kept past its release may be on it"
            );
            return;
        }
        let id = self.lease().id;
        let mut client = self.client.clone();
        let timeout = self.timeout;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = tokio::time::timeout(timeout, client.lease_revoke(id)).await;
            });
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.revoke_later();
    }
}

/// Grants a lease of `ttl`, rounded up to whole seconds.
async fn grant(client: &EtcdClient, ttl: Duration, timeout: Duration) -> Result<Lease> {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
    let sent_at = Instant::now();
    let mut client = client.clone();
    let granted = match tokio::time::timeout(timeout, client.lease_grant(secs, None)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(etcd_error(e, "granting the etcd lease")),
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("granting the etcd lease: no answer within {timeout:?}"),
            ));
        }
    };
    if !granted.error().is_empty() || granted.ttl() <= 0 {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "granting the etcd lease: etcd answered {:?}",
                granted.error()
            ),
        ));
    }
    let ttl = Duration::from_secs(granted.ttl().unsigned_abs());
    Ok(Lease {
        id: granted.id(),
        granted: ttl,
        expires: sent_at + ttl,
    })
}

/// Keeps the session's lease alive until the session is dropped: a third
/// of the TTL apart, and sooner after a failure.
async fn keep_alive(session: Weak<Session>) {
    let mut retry = Duration::from_millis(50);
    loop {
        let pause = match session.upgrade() {
            Some(s) => match s.keep_alive_now().await {
                Ok(()) => {
                    retry = Duration::from_millis(50);
                    s.lease().granted / 3
                }
                Err(e) => {
                    tracing::debug!(error = %e, "keeping the etcd lease alive failed; retrying");
                    retry = (retry * 2).min(Duration::from_millis(500));
                    retry
                }
            },
            None => return,
        };
        tokio::time::sleep(pause).await;
    }
}
