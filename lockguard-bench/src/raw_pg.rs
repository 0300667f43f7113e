//! The PostgreSQL yardstick: raw tokio-postgres calling lockguard's own
//! functions, prepared once per connection: a lock's on a connection of its
//! own, the rest over a pool like lockguard's.

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};

/// A pool like lockguard's own: 16 connections, handed out untested.
pub(crate) fn pool(url: &str) -> Pool {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(16)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("pool")
}

/// A connection of its own calling lockguard's lock functions, as a
/// lockguard lock's session does: a lock is held by the session that took
/// it, so its try and its unlock go over one connection.
pub(crate) struct Session {
    client: tokio_postgres::Client,
    try_lock: tokio_postgres::Statement,
    release: tokio_postgres::Statement,
}

impl Session {
    /// A session on `url`, its statements prepared.
    pub(crate) async fn connect(url: &str) -> Self {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect to postgres");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let try_lock = client
            .prepare("SELECT acquired FROM lockguard.lock_try($1, $2, $3)")
            .await
            .expect("prepare");
        let release = client
            .prepare("SELECT lockguard.lock_release($1, $2)")
            .await
            .expect("prepare");
        Self {
            client,
            try_lock,
            release,
        }
    }

    /// One raw attempt at the lock (never queued); whether it was taken.
    pub(crate) async fn try_lock(&self, key: &str, token: &str) -> bool {
        self.client
            .query_one(&self.try_lock, &[&key, &token, &30_000i64])
            .await
            .expect("lock_try")
            .get(0)
    }

    /// Unlocks the lock this session took with `token`.
    pub(crate) async fn unlock(&self, key: &str, token: &str) {
        let released: bool = self
            .client
            .query_one(&self.release, &[&key, &token])
            .await
            .expect("lock_release")
            .get(0);
        assert!(released);
    }
}
