//! The ZooKeeper session a client works in, renewed when it expires.
//!
//! A ZooKeeper session outlives connections: the client library reconnects
//! within it (to another server of the ensemble, too) and its watches
//! survive. Only when the ensemble has not heard from the client for the
//! session timeout does the session expire, taking its ephemeral nodes
//! (held locks, queue places) with it; a client handle of an expired
//! session answers nothing but `SessionExpired`. This keeps the current
//! handle and replaces it with one of a new session when that happens,
//! noticed by a monitor task or by an operation, whichever comes first.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use lockguard_core::{Error, ErrorKind, Result};

use crate::error::zk_error;

/// How to open a session.
#[derive(Debug, Clone)]
pub(crate) struct SessionOptions {
    /// The connect string: `host:port,host:port[/chroot]`.
    pub(crate) hosts: String,
    /// The session timeout asked for (the ensemble may negotiate another).
    pub(crate) session_timeout: Duration,
    /// How long opening a session may take.
    pub(crate) connect_timeout: Duration,
}

/// The current session of a client.
#[derive(Debug)]
pub(crate) struct Session {
    /// How to open a new one; `None` for a client handed in by the
    /// application, which cannot be renewed here.
    options: Option<SessionOptions>,
    current: RwLock<zk::Client>,
    /// Held while a new session is opened, so concurrent callers open one.
    renewing: tokio::sync::Mutex<()>,
    /// Until when the session is not closed as the client closes: a lock
    /// kept past its release (`Lock::at_least`) whose kept node may not
    /// have been written is still held by its node of this session, which
    /// a close would delete (see [`Session::keep_until`]).
    kept_until: Mutex<Option<Instant>>,
}

impl Session {
    /// Opens a session.
    pub(crate) async fn open(options: SessionOptions) -> Result<Self> {
        let client = connect(&options).await?;
        Ok(Self {
            options: Some(options),
            current: RwLock::new(client),
            renewing: tokio::sync::Mutex::new(()),
            kept_until: Mutex::new(None),
        })
    }

    /// Works in the session of a client the application made.
    pub(crate) fn adopt(client: zk::Client) -> Self {
        Self {
            options: None,
            current: RwLock::new(client),
            renewing: tokio::sync::Mutex::new(()),
            kept_until: Mutex::new(None),
        }
    }

    /// The current session's client handle.
    pub(crate) fn client(&self) -> zk::Client {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The session timeout the ensemble granted.
    pub(crate) fn timeout(&self) -> Duration {
        self.client().session_timeout()
    }

    /// A lock kept until `until` may still be held by a node of this
    /// session (its keep failed, or its answer was lost): a client that
    /// closes before then leaves the session open until then (see
    /// [`Session::linger`]), since closing it would delete that node and
    /// free the lock at once.
    pub(crate) fn keep_until(&self, until: Instant) {
        let mut kept = self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        *kept = Some(kept.map_or(until, |k| k.max(until)));
    }

    /// The client closes: inside a kept time (see
    /// [`keep_until`](Session::keep_until)), a thread keeps a handle of
    /// the session, and so the session, open until it ends; the session
    /// then closes as it would have now. A thread, not a task, so that a
    /// client dropped outside its runtime lingers too; when the runtime
    /// itself ends, the connection ends unclosed, and the ensemble expires
    /// the session after its timeout, longer than any lease it allows.
    pub(crate) fn linger(&self) {
        let kept = *self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        let Some(left) = kept.and_then(|until| until.checked_duration_since(Instant::now())) else {
            return;
        };
        let client = self.client();
        tracing::debug!(
            session = %client.session_id(),
            ?left,
            "the zookeeper session stays open until a lock kept past its release is no longer kept"
        );
        let lingering = std::thread::Builder::new()
            .name("lockguard-zookeeper-linger".into())
            .spawn(move || {
                std::thread::sleep(left);
                drop(client);
            });
        if let Err(e) = lingering {
            tracing::warn!(error = %e, "cannot keep the zookeeper session open for a kept lock");
        }
    }

    /// Opens a new session in place of `expired`, unless that was done
    /// already. A client handed in by the application cannot be renewed:
    /// that is an error saying so.
    pub(crate) async fn renew(&self, expired: zk::SessionId) -> Result<()> {
        let _turn = self.renewing.lock().await;
        let current = self.client();
        // Only the session that ended is replaced: never a newer one, nor
        // one the client library still serves.
        if current.session_id() != expired || !current.state().is_terminated() {
            return Ok(());
        }
        drop(current);
        let Some(options) = &self.options else {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the zookeeper session expired; a client handed in by the application is not \
                 renewed: build a new lockguard client on a new session",
            ));
        };
        let client = connect(options).await?;
        tracing::warn!(
            expired = %expired,
            session = %client.session_id(),
            "zookeeper session expired; working in a new one (locks held in the old one are lost)"
        );
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = client;
        Ok(())
    }

    /// Renews the session `expired` in the background (see
    /// [`Session::renew`]), so the request that found it expired fails
    /// at once.
    pub(crate) fn renew_later(this: &Arc<Self>, expired: zk::SessionId) {
        let session = Arc::downgrade(this);
        tokio::spawn(async move {
            let Some(session) = session.upgrade() else {
                return;
            };
            if let Err(e) = session.renew(expired).await {
                tracing::debug!(error = %e, "renewing the zookeeper session failed");
            }
        });
    }

    /// Watches the session's state in the background: when it expires,
    /// opens a new one and calls `expired` (which wakes every waiter, whose
    /// queue places went with the session). Ends when the store is gone.
    pub(crate) fn monitor(this: Weak<Self>, expired: impl Fn() + Send + 'static) {
        tokio::spawn(async move {
            loop {
                let Some(session) = this.upgrade() else {
                    return;
                };
                // The watcher alone does not keep the session open: once the
                // store is dropped, the session closes.
                let client = session.client();
                let (id, mut states) = (client.session_id(), client.state_watcher());
                let mut state = client.state();
                drop((client, session));
                while !state.is_terminated() {
                    tokio::select! {
                        changed = states.changed() => state = changed,
                        () = tokio::time::sleep(Duration::from_secs(1)) => {
                            if this.strong_count() == 0 {
                                return;
                            }
                        }
                    }
                }
                tracing::debug!(?state, "zookeeper session ended");
                let mut pause = Duration::from_millis(50);
                loop {
                    let Some(session) = this.upgrade() else {
                        return;
                    };
                    match session.renew(id).await {
                        Ok(()) => break,
                        Err(e) if session.options.is_none() => {
                            tracing::error!(error = %e, "zookeeper session ended");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot open a new zookeeper session yet; retrying");
                        }
                    }
                    drop(session);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                expired();
            }
        });
    }
}

/// Opens a session with `options`, bounded by the connect timeout.
async fn connect(options: &SessionOptions) -> Result<zk::Client> {
    let connect = zk::Client::connector()
        .with_session_timeout(options.session_timeout)
        // Try each server once, then say so: the outer timeout bounds the
        // whole attempt, and the monitor retries.
        .with_fail_eagerly()
        .connect(&options.hosts);
    match tokio::time::timeout(options.connect_timeout, connect).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(zk_error(
            e,
            &format!("connecting to zookeeper at {}", options.hosts),
        )),
        Err(_) => Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "connecting to zookeeper at {}: no session within {:?}",
                options.hosts, options.connect_timeout
            ),
        )),
    }
}
