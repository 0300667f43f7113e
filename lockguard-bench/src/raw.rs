//! The yardstick: raw redis-rs doing the same Redis commands as lockguard,
//! on the same kind of connection (a reconnecting `ConnectionManager` with
//! `TCP_NODELAY` and the same timeouts).

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{IntoConnectionInfo, Script};

/// The classic compare-and-delete.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

/// lockguard's own limiter scripts, run directly.
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../lockguard-redis/src/store/scripts/gcra.lua"
    ))
});
pub(crate) static FIXED_WINDOW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../lockguard-redis/src/store/scripts/fixed_window.lua"
    ))
});
pub(crate) static SLIDING_WINDOW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../lockguard-redis/src/store/scripts/sliding_window.lua"
    ))
});

/// A connection like lockguard's.
pub(crate) async fn connect(url: &str) -> ConnectionManager {
    let info = url
        .into_connection_info()
        .expect("valid url")
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    let client = redis::Client::open(info).expect("client");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    ConnectionManager::new_with_config(client, config)
        .await
        .expect("connect")
}

/// One lock cycle: `SET key token NX PX 30000`, then `EVALSHA` release.
/// Returns whether the lock was taken.
pub(crate) async fn try_lock(conn: &mut ConnectionManager, key: &str, token: &str) -> bool {
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await
        .expect("SET");
    taken.is_some()
}

pub(crate) async fn unlock(conn: &mut ConnectionManager, key: &str, token: &str) {
    let _: i64 = RELEASE
        .key(key)
        .arg(token)
        .invoke_async(conn)
        .await
        .expect("release");
}
