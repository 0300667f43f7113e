//! The PostgreSQL yardstick: raw tokio-postgres calling lockguard's own
//! functions, prepared once per connection, over a pool like lockguard's.

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

const ACQUIRE: &str = "SELECT * FROM lockguard.acquire($1, $2, $3, $4, $5, $6, $7)";
const RELEASE: &str = "SELECT lockguard.release($1, $2, $3)";

/// One raw attempt at the lock (never queued); whether it was taken.
pub(crate) async fn try_lock(pool: &Pool, key: &str, token: &str) -> bool {
    let conn = pool.get().await.expect("connection");
    let stmt = conn.prepare_cached(ACQUIRE).await.expect("prepare");
    let none: Option<i64> = None;
    let no_channel: Option<&str> = None;
    let row = conn
        .query_one(
            &stmt,
            &[&key, &token, &30_000i64, &1i32, &none, &no_channel, &none],
        )
        .await
        .expect("acquire");
    row.get(0)
}

pub(crate) async fn unlock(pool: &Pool, key: &str, token: &str) {
    let conn = pool.get().await.expect("connection");
    let stmt = conn.prepare_cached(RELEASE).await.expect("prepare");
    let released: bool = conn
        .query_one(&stmt, &[&key, &token, &1i32])
        .await
        .expect("release")
        .get(0);
    assert!(released);
}
