//! The PostgreSQL yardstick: raw tokio-postgres sending lockguard's own
//! statements, prepared once per connection: a lock's on a connection of
//! its own, the rest (calls of its functions) over a pool like lockguard's.

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

/// lockguard's try, release and the try's rare path, as its lock sessions
/// send them (schema `lockguard`).
fn statements() -> [String; 3] {
    let [try_lock, _wait, release] = lockguard_postgres::lock_statements("lockguard");
    [
        try_lock,
        release,
        "SELECT acquired, n FROM lockguard.lock_take($1, $2, $3)".to_owned(),
    ]
}

/// A connection of its own (no pool), its connection task spawned; closed
/// when the client is dropped.
pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to postgres");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A connection of its own sending lockguard's lock statements, as a
/// lockguard lock's session does: a lock is held by the session that took
/// it, so its try and its unlock go over one connection.
pub(crate) struct Session {
    client: tokio_postgres::Client,
    try_lock: tokio_postgres::Statement,
    release: tokio_postgres::Statement,
    take: tokio_postgres::Statement,
}

impl Session {
    /// A session on `url`, its statements prepared.
    pub(crate) async fn connect(url: &str) -> Self {
        let client = connect(url).await;
        client
            .batch_execute("SELECT lockguard.lock_session()")
            .await
            .expect("lock_session");
        let [try_sql, release_sql, take_sql] = statements();
        let try_lock = client.prepare(&try_sql).await.expect("prepare");
        let release = client.prepare(&release_sql).await.expect("prepare");
        let take = client.prepare(&take_sql).await.expect("prepare");
        Self {
            client,
            try_lock,
            release,
            take,
        }
    }

    /// One raw attempt at the lock (never queued); whether it was taken.
    /// A key's first hold draws its fencing token in `lock_take`, as
    /// lockguard's does.
    pub(crate) async fn try_lock(&self, key: &str, token: &str) -> bool {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&key, &token, &30_000i64];
        let row = self
            .client
            .query_one(&self.try_lock, &params)
            .await
            .expect("try");
        let (taken, fence): (bool, Option<i64>) = (row.get(0), row.get(1));
        if taken && fence.is_none() {
            return self
                .client
                .query_one(&self.take, &params)
                .await
                .expect("lock_take")
                .get(0);
        }
        taken
    }

    /// Unlocks the lock this session took with `token`.
    pub(crate) async fn unlock(&self, key: &str, token: &str) {
        let released: bool = self
            .client
            .query_one(&self.release, &[&key, &token])
            .await
            .expect("release")
            .get(0);
        assert!(released);
    }
}

/// PostgreSQL's own advisory lock on a connection of its own, the native
/// yardstick: `pg_try_advisory_lock($1)` and `pg_advisory_unlock($1)`,
/// prepared once.
pub(crate) struct Native {
    client: tokio_postgres::Client,
    lock: tokio_postgres::Statement,
    unlock: tokio_postgres::Statement,
}

impl Native {
    /// A connection on `url`, its two statements prepared.
    pub(crate) async fn connect(url: &str) -> Self {
        let client = connect(url).await;
        let lock = client
            .prepare("SELECT pg_try_advisory_lock($1)")
            .await
            .expect("prepare");
        let unlock = client
            .prepare("SELECT pg_advisory_unlock($1)")
            .await
            .expect("prepare");
        Self {
            client,
            lock,
            unlock,
        }
    }

    /// One cycle on `key`, which nobody else takes: the lock, then the
    /// unlock, each asserted to succeed.
    pub(crate) async fn cycle(&self, key: i64) {
        let taken: bool = self
            .client
            .query_one(&self.lock, &[&key])
            .await
            .expect("lock")
            .get(0);
        assert!(taken);
        let freed: bool = self
            .client
            .query_one(&self.unlock, &[&key])
            .await
            .expect("unlock")
            .get(0);
        assert!(freed);
    }
}
