//! The MySQL yardsticks: raw `mysql_async` calling lockguard's own
//! procedures over a pool set up as lockguard's, and the server's own user
//! locks (`GET_LOCK`/`RELEASE_LOCK`) on connections of their own.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints};

/// The session lockguard's pool sets up (`lockguard-mysql`'s `session`):
/// `TCP_NODELAY`, UTC, READ COMMITTED, a 2 s row-lock wait; pooled
/// connections kept (idle up to a minute) and not reset when handed back,
/// at most 16.
pub(crate) fn opts(url: &str) -> Opts {
    let opts = Opts::from_url(url).expect("mysql url");
    let pool_opts = opts
        .pool_opts()
        .clone()
        .with_constraints(PoolConstraints::new(0, 16).expect("constraints"))
        .with_inactive_connection_ttl(Duration::from_secs(60))
        .with_reset_connection(false);
    OptsBuilder::from_opts(opts)
        .tcp_nodelay(true)
        .setup(vec![
            "SET time_zone = '+00:00'".to_owned(),
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
            "SET SESSION innodb_lock_wait_timeout = 2".to_owned(),
        ])
        .pool_opts(pool_opts)
        .into()
}

/// A pool like lockguard's own (see [`opts`]).
pub(crate) fn pool(url: &str) -> Pool {
    Pool::new(opts(url))
}

/// A connection of its own, set up as the pool's.
pub(crate) async fn connect(url: &str) -> Conn {
    Conn::new(opts(url)).await.expect("connect to mysql")
}

/// lockguard's statements with its default table prefix (`lockguard-mysql`'s
/// `Statements`), prepared once per connection by the driver's cache.
const ACQUIRE: &str = "CALL lockguard_acquire(?, ?, ?, ?, ?, ?, ?)";
const RELEASE: &str = "CALL lockguard_release(?, ?, ?)";

/// One raw attempt at the lock (never queued, 30 s lease); whether it was
/// taken.
pub(crate) async fn try_lock(pool: &Pool, key: &str, token: &str) -> bool {
    let mut conn = pool.get_conn().await.expect("connection");
    let none: Option<i64> = None;
    let no_channel: Option<String> = None;
    let (taken, _): (i64, Option<i64>) = conn
        .exec_first(
            ACQUIRE,
            (key, token, 30_000i64, 1i32, none, no_channel, none),
        )
        .await
        .expect("acquire")
        .expect("a row");
    taken == 1
}

/// Releases the lock `token` holds; panics when it was not held.
pub(crate) async fn unlock(pool: &Pool, key: &str, token: &str) {
    let mut conn = pool.get_conn().await.expect("connection");
    let held: i64 = conn
        .exec_first(RELEASE, (key, token, 1i32))
        .await
        .expect("release")
        .expect("a row");
    assert_eq!(held, 1, "released a lock not held");
}

/// `GET_LOCK(name, timeout)` on `conn`: waits in the server up to
/// `timeout` (whole seconds; 0 tries once); whether it was taken.
pub(crate) async fn get_lock(conn: &mut Conn, name: &str, timeout: u64) -> bool {
    let taken: Option<i64> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (name, timeout))
        .await
        .expect("GET_LOCK")
        .expect("a row");
    taken == Some(1)
}

/// `RELEASE_LOCK(name)` on `conn`; panics when `conn` did not hold it.
pub(crate) async fn release_lock(conn: &mut Conn, name: &str) {
    let released: Option<i64> = conn
        .exec_first("SELECT RELEASE_LOCK(?)", (name,))
        .await
        .expect("RELEASE_LOCK")
        .expect("a row");
    assert_eq!(released, Some(1), "released a user lock not held");
}
