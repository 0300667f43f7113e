//! The constructors of ZooKeeper clients: [`ClientExt`] and [`BuilderExt`]
//! add them to lockguard-core's `Client` and `Builder`.

use std::future::Future;
use std::time::Duration;

use lockguard_core::store::Store;
use lockguard_core::{Builder, Client, Error, MAX_LEASE, Result};

use crate::options::ZooKeeperOptions;
use crate::store::{Session, SessionOptions, ZooKeeperStore};

/// `Client::connect_zookeeper(hosts)`: a client with default settings on
/// the ZooKeeper ensemble at `hosts`.
pub trait ClientExt: Sized {
    /// Connects to the ZooKeeper ensemble at `hosts`
    /// (`"zk1:2181,zk2:2181,zk3:2181"`), with default settings; see
    /// [`ZooKeeperBuilder::connect_zookeeper`].
    ///
    /// # Errors
    ///
    /// As [`ZooKeeperBuilder::connect_zookeeper`].
    fn connect_zookeeper(hosts: &str) -> impl Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    async fn connect_zookeeper(hosts: &str) -> Result<Self> {
        ZooKeeperBuilder::new(Client::builder())
            .connect_zookeeper(hosts)
            .await
    }
}

/// The ZooKeeper constructors on lockguard-core's [`Builder`]: each starts
/// a [`ZooKeeperBuilder`] from the builder's settings.
pub trait BuilderExt {
    /// See [`ZooKeeperBuilder::zookeeper_session_timeout`].
    fn zookeeper_session_timeout(self, timeout: Duration) -> ZooKeeperBuilder;

    /// See [`ZooKeeperBuilder::zookeeper_root`].
    fn zookeeper_root(self, root: impl Into<String>) -> ZooKeeperBuilder;

    /// See [`ZooKeeperBuilder::connect_zookeeper`].
    ///
    /// # Errors
    ///
    /// As [`ZooKeeperBuilder::connect_zookeeper`].
    fn connect_zookeeper(self, hosts: &str) -> impl Future<Output = Result<Client>> + Send;

    /// See [`ZooKeeperBuilder::connect_zookeeper_client`].
    ///
    /// # Errors
    ///
    /// As [`ZooKeeperBuilder::connect_zookeeper`].
    fn connect_zookeeper_client(
        self,
        client: zookeeper_client::Client,
    ) -> impl Future<Output = Result<Client>> + Send;
}

impl BuilderExt for Builder {
    fn zookeeper_session_timeout(self, timeout: Duration) -> ZooKeeperBuilder {
        ZooKeeperBuilder::new(self).zookeeper_session_timeout(timeout)
    }

    fn zookeeper_root(self, root: impl Into<String>) -> ZooKeeperBuilder {
        ZooKeeperBuilder::new(self).zookeeper_root(root)
    }

    fn connect_zookeeper(self, hosts: &str) -> impl Future<Output = Result<Client>> + Send {
        ZooKeeperBuilder::new(self).connect_zookeeper(hosts)
    }

    fn connect_zookeeper_client(
        self,
        client: zookeeper_client::Client,
    ) -> impl Future<Output = Result<Client>> + Send {
        ZooKeeperBuilder::new(self).connect_zookeeper_client(client)
    }
}

/// A client's settings ([`Builder`]) and the ZooKeeper store's own.
#[derive(Debug)]
pub struct ZooKeeperBuilder {
    builder: Builder,
    options: ZooKeeperOptions,
}

impl ZooKeeperBuilder {
    /// The store's settings at their defaults, with the client's settings
    /// of `builder`.
    pub fn new(builder: Builder) -> Self {
        Self {
            builder,
            options: ZooKeeperOptions::default(),
        }
    }

    /// The session timeout a ZooKeeper client asks the ensemble for
    /// (default 10 s; the servers bound it, by default between 2 and 20
    /// ticks). It is the lease of every lock the client holds: a holder
    /// whose process dies frees its locks when the ensemble expires its
    /// session. A live holder's lease counts for at most two thirds of it
    /// (a watchdog lease is shortened to that, a longer fixed lease is
    /// refused).
    pub fn zookeeper_session_timeout(mut self, timeout: Duration) -> Self {
        self.options.session_timeout = timeout;
        self
    }

    /// The persistent node under which lockguard keeps its locks (default
    /// [`DEFAULT_ROOT`](crate::DEFAULT_ROOT), `"/lockguard"`), created when missing. Clients that
    /// share locks must use the same root (and the same prefix).
    pub fn zookeeper_root(mut self, root: impl Into<String>) -> Self {
        self.options.root = root.into();
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
    /// [`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// for a malformed connect string, root or settings;
    /// [`ErrorKind::Unavailable`](lockguard_core::ErrorKind::Unavailable)
    /// when no server gives a session within the connect timeout.
    pub async fn connect_zookeeper(self, hosts: &str) -> Result<Client> {
        self.validate()?;
        if hosts.trim().is_empty() {
            return Err(Error::invalid("zookeeper connect string is empty"));
        }
        let session = Session::open(SessionOptions {
            hosts: hosts.to_owned(),
            session_timeout: self.options.session_timeout,
            connect_timeout: self.builder.connection_settings().connect_timeout,
        })
        .await?;
        let lg = self.store(session, Some(hosts)).await?;
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
    /// As [`ZooKeeperBuilder::connect_zookeeper`].
    pub async fn connect_zookeeper_client(
        self,
        client: zookeeper_client::Client,
    ) -> Result<Client> {
        self.validate()?;
        self.store(Session::adopt(client), None).await
    }

    fn validate(&self) -> Result<()> {
        self.builder.validate()?;
        let root = &self.options.root;
        if !root.starts_with('/')
            || root.len() < 2
            || root.ends_with('/')
            || root.contains("//")
            || root.split('/').any(|part| part == "." || part == "..")
            || root.chars().any(char::is_control)
        {
            return Err(Error::invalid(format!(
                "zookeeper root must be an absolute node path such as \"/lockguard\", got {root:?}"
            )));
        }
        let t = self.options.session_timeout;
        if t < Duration::from_millis(100) || t > MAX_LEASE {
            return Err(Error::invalid(format!(
                "zookeeper session timeout must be between 100ms and {MAX_LEASE:?}, got {t:?}"
            )));
        }
        Ok(())
    }

    async fn store(self, session: Session, hosts: Option<&str>) -> Result<Client> {
        let settings = self.builder.connection_settings();
        let timeouts = (settings.connect_timeout, settings.response_timeout);
        let store = ZooKeeperStore::new(session, self.options.root.clone(), timeouts).await?;
        let mut store = Store::new(store, Vec::new());
        if let Some(hosts) = hosts {
            store = store.at(hosts);
        }
        self.builder.build(store)
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
