//! The constructors of ZooKeeper clients.

use std::time::Duration;

use super::{Builder, Client};
use crate::backend::zookeeper::{DEFAULT_ROOT, Session, SessionOptions, ZooKeeperStore};
use crate::error::Result;
use crate::store::Store;

/// The session timeout a ZooKeeper client asks for by default.
pub const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A ZooKeeper client's settings.
#[derive(Debug, Clone)]
pub(super) struct ZooKeeperSettings {
    session_timeout: Duration,
    root: String,
}

impl Default for ZooKeeperSettings {
    fn default() -> Self {
        Self {
            session_timeout: DEFAULT_ZOOKEEPER_SESSION_TIMEOUT,
            root: DEFAULT_ROOT.to_owned(),
        }
    }
}

impl Client {
    /// Connects to the ZooKeeper ensemble at `hosts`
    /// (`"zk1:2181,zk2:2181,zk3:2181"`), with default settings; see
    /// [`Builder::connect_zookeeper`].
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_zookeeper`].
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub async fn connect_zookeeper(hosts: &str) -> Result<Self> {
        Self::builder().connect_zookeeper(hosts).await
    }
}

impl Builder {
    /// The session timeout a ZooKeeper client asks the ensemble for
    /// (default 10 s; the servers bound it, by default between 2 and 20
    /// ticks). It is the lease of every lock the client holds: a holder
    /// whose process dies frees its locks when the ensemble expires its
    /// session. A live holder's lease counts for at most two thirds of it
    /// (a watchdog lease is shortened to that, a longer fixed lease is
    /// refused).
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub fn zookeeper_session_timeout(mut self, timeout: Duration) -> Self {
        self.zookeeper.session_timeout = timeout;
        self
    }

    /// The persistent node under which lockguard keeps its locks (default
    /// `"/lockguard"`), created when missing. Clients that share locks must
    /// use the same root (and the same prefix).
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub fn zookeeper_root(mut self, root: impl Into<String>) -> Self {
        self.zookeeper.root = root.into();
        self
    }

    /// Connects to the ZooKeeper ensemble at `hosts`, a connect string
    /// (`"zk1:2181,zk2:2181,zk3:2181"`, optionally with a chroot:
    /// `".../apps/shop"`), in a session of its own. When the session
    /// expires the client opens a new one by itself (the locks held in the
    /// old one are lost, and their guards say so).
    ///
    /// ZooKeeper offers locks, semaphores, counters (without expiry; each
    /// update a compare-and-set, two round trips), marks and fenced values;
    /// rate limiters and expiry answer
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// malformed connect string, root or settings;
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when no
    /// server gives a session within the connect timeout.
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub async fn connect_zookeeper(self, hosts: &str) -> Result<Client> {
        self.validate_zookeeper()?;
        if hosts.trim().is_empty() {
            return Err(crate::Error::invalid("zookeeper connect string is empty"));
        }
        let session = Session::open(SessionOptions {
            hosts: hosts.to_owned(),
            session_timeout: self.zookeeper.session_timeout,
            connect_timeout: self.opts.connect_timeout,
        })
        .await?;
        let lg = self.zookeeper_store(session).await?;
        tracing::debug!(hosts, "connected to zookeeper");
        Ok(lg)
    }

    /// Works in the session of a ZooKeeper client the application made
    /// (its connect string, chroot, authentication and session timeout).
    /// That session is not renewed here: once it expires, every operation
    /// fails as unavailable, and a new lockguard client must be built on a
    /// new session.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_zookeeper`].
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub async fn connect_zookeeper_client(
        self,
        client: zookeeper_client::Client,
    ) -> Result<Client> {
        self.validate_zookeeper()?;
        self.zookeeper_store(Session::adopt(client)).await
    }

    fn validate_zookeeper(&self) -> Result<()> {
        self.validate()?;
        let root = &self.zookeeper.root;
        if !root.starts_with('/')
            || root.len() < 2
            || root.ends_with('/')
            || root.contains("//")
            || root.split('/').any(|part| part == "." || part == "..")
            || root.chars().any(char::is_control)
        {
            return Err(crate::Error::invalid(format!(
                "zookeeper root must be an absolute node path such as \"/lockguard\", got {root:?}"
            )));
        }
        let t = self.zookeeper.session_timeout;
        if t < Duration::from_millis(100) || t > crate::MAX_LEASE {
            return Err(crate::Error::invalid(format!(
                "zookeeper session timeout must be between 100ms and {:?}, got {t:?}",
                crate::MAX_LEASE
            )));
        }
        Ok(())
    }

    async fn zookeeper_store(self, session: Session) -> Result<Client> {
        let store = ZooKeeperStore::new(
            session,
            self.zookeeper.root.clone(),
            self.opts.response_timeout,
        )
        .await?;
        Ok(self.finish(Store::new(store, Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_settings_are_invalid_input() {
        for root in ["", "/", "lockguard", "/a/", "/a//b", "/a/../b"] {
            let err = Client::builder()
                .zookeeper_root(root)
                .connect_zookeeper("127.0.0.1:1")
                .await
                .unwrap_err();
            assert!(err.is_invalid_input(), "{root:?}: {err}");
        }
        let err = Client::builder()
            .zookeeper_session_timeout(Duration::from_millis(10))
            .connect_zookeeper("127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        for hosts in ["", "  ", "127.0.0.1:notaport"] {
            let err = Client::connect_zookeeper(hosts).await.unwrap_err();
            assert!(err.is_invalid_input(), "{hosts:?}: {err}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_ensemble_is_unavailable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .connect_zookeeper(&format!("127.0.0.1:{port}"))
            .await
            .unwrap_err();
        assert!(err.is_unavailable(), "{err}");
    }
}
