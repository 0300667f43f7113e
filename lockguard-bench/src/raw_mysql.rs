//! The MySQL yardsticks: raw `mysql_async` calling lockguard's own lock
//! procedures on connections of a pool set up as lockguard's, and the
//! server's own user locks (`GET_LOCK`/`RELEASE_LOCK`).

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

/// lockguard's lock statements with its default table prefix
/// (`lockguard-mysql`'s `locks.rs`), prepared once per connection by the
/// driver's cache.
const TRY: &str = "CALL lockguard_lock_try(?, ?, ?)";
const RELEASE: &str = "CALL lockguard_lock_release(?, ?)";

/// One raw try at the lock on `conn` (30 s lease), as lockguard's lock
/// session sends it; whether it was taken.
pub(crate) async fn try_lock(conn: &mut Conn, key: &str, token: &str) -> bool {
    let (taken, _, _): (i64, Option<i64>, Option<i64>) = conn
        .exec_first(TRY, (key, token, 30_000i64))
        .await
        .expect("try")
        .expect("a row");
    taken == 1
}

/// Releases the lock `token` holds on `conn`; panics when it was not held.
pub(crate) async fn unlock(conn: &mut Conn, key: &str, token: &str) {
    let held: i64 = conn
        .exec_first(RELEASE, (key, token))
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
