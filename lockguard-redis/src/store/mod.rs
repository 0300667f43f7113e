//! The Redis store: every operation is one `EVALSHA` (or one plain command)
//! on a connection that reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
#[cfg(feature = "cluster")]
use redis::io::tcp::TcpSettings;
use redis::{FromRedisValue, IntoConnectionInfo, RedisResult};

use crate::layout::RedisLockKeys as _;
use crate::redlock::RedlockLine;
use eval::{Eval, Lua};
use lockguard_core::FencingToken;
use lockguard_core::store::Token;
use lockguard_core::store::{
    AllOrNone, Attempt, LockStore, Occupancy, Place, Store, StoreFuture, Waiting, millis_ceil,
};
use lockguard_core::store::{LockKeys, Resource, RwMode};
use lockguard_core::{Error, ErrorKind, Result};

mod data;
mod eval;
#[cfg(feature = "cluster")]
mod masters;
#[cfg(feature = "sentinel")]
mod sentinel;
mod subscriber;

#[cfg(feature = "sentinel")]
pub(crate) use sentinel::SentinelTarget;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use subscriber::SubTarget;
pub(crate) use subscriber::Subscriber;

/// A script that uses the wait queue: `sequence.lua` and `queue.lua`
/// (their shared functions) followed by the script's own file.
macro_rules! queue_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("scripts/sequence.lua"),
                include_str!("scripts/queue.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}

static LOCK_ACQUIRE: LazyLock<Lua> = queue_script!("lock_acquire.lua");
static LOCK_RELEASE: LazyLock<Lua> = queue_script!("lock_release.lua");
static LOCK_ACQUIRE_ALL: LazyLock<Lua> = queue_script!("lock_acquire_all.lua");
static LOCK_EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/lock_extend.lua")));
static FENCE_RAISE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fence_raise.lua")));
static FENCE_CLAIM: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fence_claim.lua")));
static REDLOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/redlock_acquire.lua")
    ))
});
static REDLOCK_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/redlock_release.lua")));
static LOCK_RELEASE_ANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/lock_release_any.lua")));
static SEMAPHORE_ACQUIRE: LazyLock<Lua> = queue_script!("semaphore_acquire.lua");
static SEMAPHORE_RELEASE: LazyLock<Lua> = queue_script!("semaphore_release.lua");
static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/inspect.lua")));
static SEMAPHORE_EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/semaphore_extend.lua")));

/// A read-write lock's script: the wait queue's functions (see
/// [`queue_script!`]), then `rw_lib.lua` (its holders and handoffs), then
/// the script's own file.
macro_rules! rw_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("scripts/sequence.lua"),
                include_str!("scripts/queue.lua"),
                include_str!("scripts/rw_lib.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}

static RW_ACQUIRE: LazyLock<Lua> = rw_script!("rw_acquire.lua");
static RW_RELEASE: LazyLock<Lua> = rw_script!("rw_release.lua");
static RW_EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/rw_extend.lua")));
static RW_INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/rw_inspect.lua")));

/// A read-write lock's mode as its scripts name it.
fn rw_arg(mode: RwMode) -> &'static str {
    match mode {
        RwMode::Read => "r",
        RwMode::Write => "w",
    }
}

/// The oldest Redis server lockguard works with (major, minor): the scripts
/// use `SET KEEPTTL` and the subscriber speaks RESP3 (both 6.0), and 6.2 is
/// the oldest release still tested.
pub(crate) const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

/// The `redis_version` of an `INFO server` reply.
fn redis_version(info: &str) -> Option<(u32, u32, u32)> {
    let v = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))?;
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// How to reach Redis and how long to wait for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Replicas that must confirm each lock write (`WAIT`), and for how
    /// long to wait for them.
    pub(crate) replicas: Option<(u32, Duration)>,
}

/// Certificates for `rediss://` connections: a CA to trust instead of the
/// system's, and a client certificate for servers that ask for one.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) root_cert: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Certificates and keys are never printed.
        f.debug_struct("TlsSettings")
            .field("root_cert", &self.root_cert.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl TlsSettings {
    pub(crate) fn is_set(&self) -> bool {
        self.root_cert.is_some() || self.client.is_some()
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client.clone().map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            }),
            root_cert: self.root_cert.clone(),
        }
    }
}

/// Whether lockguard was built with a TLS feature.
const TLS: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

/// Reads a URL's connection settings; a `rediss://` URL without a TLS
/// feature is refused with the feature to turn on.
fn connection_info(url: &str) -> Result<redis::ConnectionInfo> {
    if !TLS && url.trim_start().to_ascii_lowercase().starts_with("rediss:") {
        return Err(Error::invalid(format!(
            "{:?} is a TLS url; build lockguard with the tls-rustls or tls-native-tls feature",
            redact(url)
        )));
    }
    url.into_connection_info().map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("malformed redis url {:?}", redact(url)),
        )
        .with_source(e)
    })
}

/// Reads the addresses of the sentinels.
#[cfg(feature = "sentinel")]
pub(crate) fn sentinel_infos(urls: &[String]) -> Result<Vec<redis::ConnectionInfo>> {
    urls.iter().map(|u| connection_info(u)).collect()
}

/// Reads the seed nodes of a cluster.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_infos(urls: &[String]) -> Result<Vec<redis::ConnectionInfo>> {
    urls.iter().map(|u| connection_info(u)).collect()
}

/// Parses a Redis URL, with `TCP_NODELAY` on: small requests must not wait
/// for Nagle's algorithm. `tls` applies to a `rediss://` URL.
pub(crate) fn client_for(url: &str, tls: &TlsSettings) -> Result<redis::Client> {
    client_with(connection_info(url)?, tls)
}

/// A client for connection settings, with `TCP_NODELAY` on and, for a TLS
/// address, `tls`'s certificates.
pub(crate) fn client_with(info: redis::ConnectionInfo, tls: &TlsSettings) -> Result<redis::Client> {
    if !tls.is_set() {
        return client_from_info(info);
    }
    let addr = info.addr().to_string();
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    {
        if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(Error::invalid(format!(
                "TLS certificates were given, but {addr} is not a TLS (rediss://) address"
            )));
        }
        let with_certs = redis::Client::build_with_tls(info, tls.certificates()).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("unusable TLS certificates for {addr}"),
            )
            .with_source(e)
        })?;
        client_from_info(with_certs.get_connection_info().clone())
    }
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    {
        let _ = (info, addr);
        Err(Error::invalid(
            "TLS certificates need the tls-rustls or tls-native-tls feature",
        ))
    }
}

/// The code of a server error that refuses a connection's commands for want
/// of credentials (`NOAUTH`, `WRONGPASS`). An ACL user refused `INFO`
/// alone (`NOPERM`) may still run scripts, so it is not one.
fn server_refusal(e: &Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<redis::RedisError>()
            && let Some(code) = refused_credentials(r)
        {
            return Some(code.to_owned());
        }
        source = s.source();
    }
    None
}

/// The server's code when it refused the client's credentials: a wrong
/// password (`WRONGPASS`), none given (`NOAUTH`). A user the server knows
/// but whose ACL forbids a command, key or channel (`NOPERM`) is not one:
/// see [`NEEDED_COMMANDS`].
fn refused_credentials(err: &redis::RedisError) -> Option<&str> {
    match err.code() {
        Some(code @ ("NOAUTH" | "WRONGPASS")) => Some(code),
        _ if err.kind() == redis::ErrorKind::AuthenticationFailed => Some("authentication failed"),
        _ => None,
    }
}

/// Whether the server refused the database index of the URL (`SELECT`
/// at connect time: "DB index is out of range").
fn refused_database(err: &redis::RedisError) -> bool {
    err.to_string().contains("refused to switch database")
}

/// A client for connection settings the application built, with
/// `TCP_NODELAY` on and RESP3.
///
/// RESP3 because over it a connection hears of its own loss (a disconnect
/// push) while idle, and its manager reconnects at once: a client idle
/// through a server restart does not send its next request into the dead
/// connection (where it would fail, the server perhaps having run it).
pub(crate) fn client_from_info(info: redis::ConnectionInfo) -> Result<redis::Client> {
    let addr = info.addr().to_string();
    // The application's other TCP settings (keepalive, ...) are kept.
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let info = info.set_tcp_settings(tcp).set_redis_settings(settings);
    redis::Client::open(info).map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("unusable redis connection settings for {addr}"),
        )
        .with_source(e)
    })
}

/// How long connecting to one node of a cluster may take: a third of the
/// client's connect timeout.
///
/// redis-rs connects a cluster in two steps, each waiting for its slowest
/// node: every seed node, then every node the slot map names. A node that
/// is down answers at once (the connection is refused), but one that is
/// paused or cut off by the network answers nothing, and each step waits
/// the node's timeout for it. With the whole connect timeout per node, a
/// client could not connect at all while one master hung (nor open its
/// pub/sub connection, so its waits relied on their refreshes): the two
/// steps took twice the time the connection was given. With a third, both
/// steps fit, and the connection comes up on the other nodes.
#[cfg(feature = "cluster")]
pub(crate) fn node_connect_timeout(connect_timeout: Duration) -> Duration {
    connect_timeout / 3
}

/// A cluster client over the given seed nodes, with the same response
/// timeout and `TCP_NODELAY` as single connections, and
/// [`node_connect_timeout`] per node.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_client_for(
    infos: &[redis::ConnectionInfo],
    opts: RedisOptions,
    tls: &TlsSettings,
    resp3_push: Option<subscriber::Deliver>,
) -> Result<redis::cluster::ClusterClient> {
    if infos.is_empty() {
        return Err(Error::invalid(
            "a redis cluster needs at least one node url",
        ));
    }
    let infos = infos.to_vec();
    let mut b = redis::cluster::ClusterClientBuilder::new(infos)
        .connection_timeout(node_connect_timeout(opts.connect_timeout))
        .response_timeout(opts.response_timeout)
        // No automatic retries: a request re-sent after a dropped
        // connection may run twice (a second acquire finds our own lock, a
        // counter is added to twice). An unknown outcome is an error, and
        // the callers clean up after it.
        .retries(0)
        // RESP3, so a node's connection lost while idle is reconnected at
        // once (see `client_from_info`).
        .use_protocol(redis::ProtocolVersion::RESP3)
        .tcp_settings(TcpSettings::default().set_nodelay(true));
    if tls.is_set() {
        #[cfg(feature = "tls-rustls")]
        {
            b = b.certs(tls.certificates());
        }
        #[cfg(not(feature = "tls-rustls"))]
        return Err(Error::invalid(
            "TLS certificates for a cluster need the tls-rustls feature",
        ));
    }
    if let Some(tx) = resp3_push {
        b = b.push_sender(tx);
    }
    b.build().map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            "unusable redis cluster configuration",
        )
        .with_source(e)
    })
}

/// Hides a password in a URL before it reaches an error message or a log.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// The reconnect policy shared by the command and subscriber connections:
/// explicit connect and response timeouts, and after a lost connection, a
/// few attempts with backoff (20 ms doubling up to 500 ms, with jitter).
///
/// The attempts are few because the manager's reconnecting task holds the
/// connection alive (a client dropped while its server is down would leave
/// a task retrying for ever), and because the first connection makes them
/// too (a server refusing the credentials must be reported within the
/// connect timeout). After they run out, the next request starts a new
/// round (see [`resent_if_unsent`]), and a subscriber has a keeper that
/// does.
pub(crate) fn manager_config(opts: RedisOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(opts.connect_timeout))
        .set_response_timeout(Some(opts.response_timeout))
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

/// [`manager_config`] for a connection whose every request is [`bounded`]:
/// without redis-rs's own response timeout, a second timer that would be
/// booked and cleared with every request for nothing.
fn command_config(opts: RedisOptions) -> ConnectionManagerConfig {
    manager_config(opts).set_response_timeout(None)
}

/// Sends a request with `send`, and once more if the first attempt failed
/// before it could reach the server.
///
/// Only a refused connection proves that: the connection manager had lost
/// its connection before the request (it hears of a loss at once over
/// RESP3) and could not make a new one, so nothing was sent; the failure
/// also made it start reconnecting, and the second attempt waits for that.
/// Any other failure (a connection lost after the request was written, a
/// timeout) leaves the outcome unknown: a script may have run, and running
/// it again could acquire twice or count twice, so it is reported instead.
pub(crate) async fn resent_if_unsent<T, F>(mut send: impl FnMut() -> F) -> RedisResult<T>
where
    F: Future<Output = RedisResult<T>>,
{
    match send().await {
        Err(e) if e.is_connection_refusal() => {
            tracing::debug!(error = %e, "redis connection was down; sending the request again");
            send().await
        }
        answer => answer,
    }
}

/// What an acquire script's reply says: a plain integer, the fencing token
/// of a hold taken (the common answer, and the cheapest to read); or `[0,
/// n]` or `[0, n, kept]`, the attempt that did not take it (`n` the
/// holder's PTTL; negative when it has none, or the key is free but others
/// are ahead), queued with its place kept for `kept` ms.
fn attempt_reply(keys: &LockKeys, reply: &redis::Value) -> Result<Result<FencingToken, Attempt>> {
    use redis::Value::{Array, Int};
    let ttl = |n: i64| u64::try_from(n).ok().map(Duration::from_millis);
    match reply {
        Int(fence) if *fence > 0 => return Ok(Ok(FencingToken::new(fence.unsigned_abs()))),
        Array(items) => match items.as_slice() {
            // PTTL 0: under a millisecond left.
            [Int(0), Int(n)] => return Ok(Err(Attempt::Busy(ttl(*n)))),
            [Int(0), Int(n), Int(kept)] if *kept > 0 => {
                return Ok(Err(Attempt::Queued {
                    ttl: ttl(*n),
                    kept: Duration::from_millis(kept.unsigned_abs()),
                }));
            }
            _ => {}
        },
        _ => {}
    }
    Err(Error::new(
        ErrorKind::Protocol,
        format!(
            "acquiring {:?}: unexpected script reply {reply:?}",
            keys.id()
        ),
    ))
}

/// The answer of `lock_acquire_all.lua` for `n` locks: every fencing token,
/// or which lock (0-based) was busy and its lease left; `None` for a reply
/// of another shape.
fn all_or_none_reply(n: usize, reply: &[i64]) -> Option<AllOrNone> {
    match reply {
        [1, fences @ ..] if fences.len() == n && fences.iter().all(|&f| f > 0) => {
            Some(AllOrNone::Acquired(
                fences
                    .iter()
                    .map(|f| FencingToken::new(f.unsigned_abs()))
                    .collect(),
            ))
        }
        &[0, i, ttl] if i >= 1 && (i as u64) <= n as u64 => Some(AllOrNone::Busy {
            index: usize::try_from(i - 1).ok()?,
            // PTTL 0: under a millisecond left; -1/-2: not known.
            ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        }),
        _ => None,
    }
}

/// The commands a Redis ACL user must be allowed for lockguard: those the
/// client sends (`EVALSHA`; `EVAL` after a script cache flush; `HMGET`,
/// a counter's read; `SUBSCRIBE`, `UNSUBSCRIBE` and `PING` on the wake-up
/// connection; `HELLO`, the RESP3 handshake), and those its scripts call,
/// which the ACL checks as well. With [`wait_for_replicas`], `WAIT` too; on
/// a cluster, `CLUSTER|SLOTS`. `INFO` and `CONFIG|GET` are asked at
/// connect time and skipped when refused.
///
/// [`wait_for_replicas`]: crate::RedisBuilder::wait_for_replicas
pub(crate) const NEEDED_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "hmget",
    "subscribe",
    "unsubscribe",
    "ping",
    "hello",
    // Called by the scripts.
    "del",
    "exists",
    "get",
    "hdel",
    "hget",
    "hincrby",
    "hlen",
    "hset",
    "incrby",
    "pexpire",
    "pttl",
    "publish",
    "sadd",
    "set",
    "sismember",
    "srem",
    "time",
    "zadd",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zrank",
    "zrem",
    "zremrangebyscore",
    "zscore",
];

/// The error for a user whose ACL forbids a command, key or channel
/// lockguard uses (`NOPERM`): what to grant it.
fn missing_permission(err: redis::RedisError, what: &str) -> Error {
    let refused = err.detail().unwrap_or("no detail");
    let commands: Vec<String> = NEEDED_COMMANDS.iter().map(|c| format!("+{c}")).collect();
    let message = format!(
        "{what}: the redis user lacks a permission lockguard needs (NOPERM {refused}); the password was accepted: allow the user lockguard's commands, keys and channels, e.g. ACL SETUSER <user> {} ~<prefix>* &<prefix>* (the key prefix, `lockguard:` unless set), with +wait for wait_for_replicas and +cluster|slots on a cluster",
        commands.join(" ")
    );
    Error::new(ErrorKind::Unauthorized, message).with_source(err)
}

/// The error for a failed Redis request about `what`.
pub(crate) fn redis_error(err: redis::RedisError, what: &str) -> Error {
    // Set-up mistakes first: nothing a retry can fix.
    if let Some(code) = refused_credentials(&err) {
        let message = format!(
            "{what}: the server refused the client's credentials ({code}); check the user and password of the URL"
        );
        return Error::new(ErrorKind::Unauthorized, message).with_source(err);
    }
    if err.code() == Some("NOPERM") {
        return missing_permission(err, what);
    }
    if refused_database(&err) {
        let message = format!(
            "{what}: the server has no such database index; use an index below the server's `databases` setting (16 by default) in the URL's path"
        );
        return Error::new(ErrorKind::Misconfigured, message).with_source(err);
    }
    let kind = match err.kind() {
        // A reply of the wrong shape: the store answered, with garbage.
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => ErrorKind::Protocol,
        redis::ErrorKind::InvalidClientConfig => ErrorKind::InvalidInput,
        _ if err.is_timeout() => ErrorKind::Timeout,
        _ if err.is_io_error()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || err.is_unrecoverable_error() =>
        {
            ErrorKind::Unavailable
        }
        redis::ErrorKind::Client | redis::ErrorKind::ClusterConnectionNotFound => {
            ErrorKind::Unavailable
        }
        // MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the cluster is moving or
        // failing over; trying again later may succeed.
        _ if err.is_cluster_error() => ErrorKind::Unavailable,
        _ => match err.code() {
            Some("LOADING" | "BUSY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "READONLY") => {
                ErrorKind::Unavailable
            }
            _ => ErrorKind::Protocol,
        },
    };
    Error::new(kind, what.to_owned()).with_source(err)
}

/// A connect that did not answer in time, or answered garbage, means the
/// server cannot be reached. One the server refused for its credentials or
/// database index stays a set-up mistake (over RESP3 the refusal comes at
/// connect time, in answer to `HELLO` or `SELECT`).
fn unreachable(e: Error) -> Error {
    if e.is_misconfigured() {
        return e;
    }
    match e.kind() {
        ErrorKind::Timeout | ErrorKind::Protocol => {
            Error::new(ErrorKind::Unavailable, e.message().to_owned()).with_source(e)
        }
        _ => e,
    }
}

/// The answer of one request given `timeout` (`tokio::time::timeout`'s
/// output), its error mapped, or a timeout error naming `what`.
///
/// Callers await the timeout in place, `within(t, what,
/// tokio::time::timeout(t, request).await)`: an `async fn` taking the
/// request's future by value would keep it twice in its state (the
/// argument and the running timeout), and every caller would move a future
/// of that size (a lock acquisition's future, boxed per request, then
/// outgrew the allocator's fast path for small blocks).
pub(crate) fn within<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    answer: std::result::Result<RedisResult<T>, tokio::time::error::Elapsed>,
) -> Result<T> {
    match answer {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(redis_error(e, &what())),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("{}: no answer from redis within {timeout:?}", what()),
        )),
    }
}

/// A connection that reconnects by itself: to one server, or to a cluster
/// (which follows slot moves and node failures).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    /// The master a group of sentinels names, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(sentinel::SentinelConn),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Single(c) => c.fmt(f),
            #[cfg(feature = "cluster")]
            Self::Cluster(_) => f.write_str("ClusterConnection"),
            #[cfg(feature = "sentinel")]
            Self::Sentinel(c) => c.fmt(f),
        }
    }
}

impl Conn {
    /// Subscribes `channel` (or unsubscribes it) on a RESP3 connection,
    /// which subscribes it again after a reconnect.
    async fn set_subscribed(&mut self, channel: &str, on: bool) -> RedisResult<()> {
        match (self, on) {
            (Self::Single(c), true) => c.subscribe(channel).await,
            (Self::Single(c), false) => c.unsubscribe(channel).await,
            #[cfg(feature = "cluster")]
            (Self::Cluster(c), true) => c.subscribe(channel).await,
            #[cfg(feature = "cluster")]
            (Self::Cluster(c), false) => c.unsubscribe(channel).await,
            #[cfg(feature = "sentinel")]
            (Self::Sentinel(c), on) => c.set_subscribed(channel, on).await,
        }
    }
}

/// Commands go to whichever connection this is.
impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Self::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            Self::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.get_db(),
            #[cfg(feature = "sentinel")]
            Self::Sentinel(c) => c.get_db(),
        }
    }
}

/// The Redis store.
#[derive(Debug)]
pub(crate) struct RedisStore {
    conn: Conn,
    opts: RedisOptions,
    /// The server's address (or the cluster's first node), for log lines.
    addr: String,
    /// Whether the server's version and eviction policy were looked at: at
    /// connect time, or for a lazily connected Redlock node, after its
    /// first answer.
    checked: AtomicBool,
    /// Through Sentinel: the leases renewed, renewed again on a new master.
    #[cfg(feature = "sentinel")]
    leases: Option<Arc<sentinel::Leases>>,
}

impl RedisStore {
    pub(crate) async fn connect(client: redis::Client, opts: RedisOptions) -> Result<Self> {
        let addr = client.get_connection_info().addr().to_string();
        let connecting = ConnectionManager::new_with_config(client, command_config(opts));
        let answer = tokio::time::timeout(opts.connect_timeout, connecting).await;
        let conn = within(
            opts.connect_timeout,
            || format!("connecting to redis at {addr}"),
            answer,
        )
        .map_err(unreachable)?;
        Self::with_manager(conn, addr, opts).await
    }

    /// A store whose commands go over `conn` (lockguard's own, or an
    /// application's connection manager, whose reconnection settings are
    /// then the application's), to the server at `addr`: checked for its
    /// version and eviction policy.
    pub(crate) async fn with_manager(
        conn: ConnectionManager,
        addr: String,
        opts: RedisOptions,
    ) -> Result<Self> {
        let store = Self {
            conn: Conn::Single(conn),
            opts,
            addr,
            checked: AtomicBool::new(true),
            #[cfg(feature = "sentinel")]
            leases: None,
        };
        store.check_version().await?;
        store.warn_if_evicting().await;
        Ok(store)
    }

    /// Refuses a server older than [`MIN_REDIS_VERSION`]. A server that
    /// does not say its version (`INFO` refused or unreadable) is let
    /// through and logged.
    async fn check_version(&self) -> Result<()> {
        let addr = self.addr.as_str();
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        let info: Result<String> = self.query(&cmd, || "INFO server".to_owned()).await;
        if let Err(e) = &info
            && let Some(code) = server_refusal(e)
        {
            // Not a version question: the server will refuse every command.
            return Err(Error::new(
                ErrorKind::Unauthorized,
                format!(
                    "redis at {addr} refused lockguard's commands ({code}); check the user and password of the URL"
                ),
            ));
        }
        match info.ok().as_deref().and_then(redis_version) {
            Some(v) if (v.0, v.1) < MIN_REDIS_VERSION => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "redis at {addr} is version {}.{}.{}; lockguard needs {}.{} or newer",
                    v.0, v.1, v.2, MIN_REDIS_VERSION.0, MIN_REDIS_VERSION.1
                ),
            )),
            Some(_) => Ok(()),
            None => {
                tracing::debug!(addr, "could not read the redis version; not checked");
                Ok(())
            }
        }
    }

    /// Logs a warning when the server may evict keys under memory pressure.
    /// Any policy but `noeviction` may evict lock keys (they all carry a
    /// TTL), silently releasing locks early; an `allkeys-*` policy may also
    /// evict fenced values, letting a stale holder's write through, and the
    /// token sequences (which then restart from the server's clock).
    /// Servers that refuse `CONFIG GET` (managed services, ACLs) are not
    /// checked.
    async fn warn_if_evicting(&self) {
        let addr = self.addr.as_str();
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        // A map over RESP3, pairs in an array over RESP2: both read here.
        let reply: Result<std::collections::HashMap<String, String>> =
            self.query(&cmd, || "CONFIG GET".to_owned()).await;
        if let Ok(reply) = reply
            && let Some(policy) = reply.get("maxmemory-policy")
            && policy != "noeviction"
        {
            tracing::warn!(
                addr,
                policy = %policy,
                "redis maxmemory-policy is not noeviction: under memory pressure it may evict lock keys, releasing locks early{}",
                if policy.starts_with("allkeys") {
                    ", and fenced values, letting stale writes through"
                } else {
                    ""
                }
            );
        }
    }

    /// For a store connected lazily: checks the server once, in the
    /// background, after its first answer. An old server is logged as an
    /// error (the client already exists, so it cannot be refused).
    fn check_after_first_answer(&self) {
        if self.checked.load(Ordering::Relaxed) || self.checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let probe = Self {
            conn: self.conn.clone(),
            opts: self.opts,
            addr: self.addr.clone(),
            checked: AtomicBool::new(true),
            #[cfg(feature = "sentinel")]
            leases: None,
        };
        tokio::spawn(async move {
            if let Err(e) = probe.check_version().await {
                tracing::error!(error = %e, "redlock node runs an unsupported redis");
            }
            probe.warn_if_evicting().await;
        });
    }

    /// Connects to a Redis Cluster through any of its nodes.
    #[cfg(feature = "cluster")]
    pub(crate) async fn connect_cluster(
        client: redis::cluster::ClusterClient,
        opts: RedisOptions,
    ) -> Result<Self> {
        let answer =
            tokio::time::timeout(opts.connect_timeout, client.get_async_connection()).await;
        let conn = within(
            opts.connect_timeout,
            || "connecting to the redis cluster".to_owned(),
            answer,
        )
        .map_err(unreachable)?;
        Self::with_cluster_connection(conn, opts).await
    }

    /// A store over a cluster connection, the application's or its own.
    #[cfg(feature = "cluster")]
    pub(crate) async fn with_cluster_connection(
        conn: redis::cluster_async::ClusterConnection,
        opts: RedisOptions,
    ) -> Result<Self> {
        let store = Self {
            conn: Conn::Cluster(conn),
            opts,
            addr: "the redis cluster".to_owned(),
            checked: AtomicBool::new(true),
            #[cfg(feature = "sentinel")]
            leases: None,
        };
        // CONFIG GET reaches one node of the cluster; its nodes are
        // normally configured alike.
        store.check_version().await?;
        store.warn_if_evicting().await;
        Ok(store)
    }

    /// Connects to the master a group of sentinels names.
    #[cfg(feature = "sentinel")]
    pub(crate) async fn connect_sentinel(
        target: &SentinelTarget,
        opts: RedisOptions,
    ) -> Result<Self> {
        let leases = Arc::new(sentinel::Leases::default());
        let conn = sentinel::SentinelConn::connect(
            target,
            redis::ProtocolVersion::RESP3,
            manager_config(opts),
            opts,
            Some(leases.on_switch()),
        )
        .await
        .map_err(unreachable)?;
        let store = Self {
            addr: format!(
                "the master of {:?} ({})",
                target.service,
                conn.master_addr()
            ),
            conn: Conn::Sentinel(conn),
            opts,
            checked: AtomicBool::new(true),
            leases: Some(leases),
        };
        store.check_version().await?;
        store.warn_if_evicting().await;
        Ok(store)
    }

    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self.conn, Conn::Cluster(_));
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// A store whose connection is made on first use (and remade after
    /// failures): for a Redlock node that is down when the client starts.
    pub(crate) fn lazy(client: redis::Client, opts: RedisOptions) -> Result<Self> {
        let addr = client.get_connection_info().addr().to_string();
        let conn = ConnectionManager::new_lazy_with_config(client, command_config(opts))
            .map_err(|e| redis_error(e, "preparing a lazy redis connection"))?;
        Ok(Self {
            conn: Conn::Single(conn),
            opts,
            addr,
            checked: AtomicBool::new(false),
            #[cfg(feature = "sentinel")]
            leases: None,
        })
    }

    /// Runs one plain command under the response timeout.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        what: impl FnOnce() -> String,
    ) -> Result<T> {
        let send = || {
            let mut conn = self.conn.clone();
            async move { cmd.query_async(&mut conn).await }
        };
        let timeout = self.opts.response_timeout;
        within(
            timeout,
            what,
            tokio::time::timeout(timeout, resent_if_unsent(send)).await,
        )
    }

    /// Runs an acquisition's script (of a lock, a semaphore or a
    /// read-write lock) and reads its answer. A hold taken that is not on
    /// enough replicas to survive a failover is given back, rather than
    /// handed out when a promoted replica would not know it, and the
    /// replication error returned.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        call: &Eval<'_>,
    ) -> Result<Attempt> {
        let (reply, acked): (redis::Value, _) = self
            .run_replicated(call, || format!("acquiring {:?}", keys.id()))
            .await?;
        let fence = match attempt_reply(keys, &reply)? {
            Ok(fence) => fence,
            Err(busy) => return Ok(busy),
        };
        if let Err(e) = self.replicated(keys.id(), acked) {
            // The keys name the kind of hold; `release` gives back any.
            // Boxed: this rare path would otherwise size every attempt's
            // future.
            if let Err(undo) = Box::pin(self.release(keys, token)).await {
                tracing::warn!(lock = %keys.id(), error = %undo, "releasing an unreplicated hold failed; its lease will free it");
            }
            return Err(e);
        }
        Ok(Attempt::Acquired {
            fence,
            keys: keys.clone(),
        })
    }

    /// [`run`](Self::run), and with `wait_for_replicas`, the `WAIT` for the
    /// script's writes sent with it, in one request on one connection (see
    /// [`Eval::invoke_then`]): the script's answer, and how many replicas
    /// confirmed (`None` when the client did not ask). The request is
    /// bounded by the response timeout and the replicas' timeout.
    ///
    /// The `WAIT` runs whatever the script answered: an attempt that did
    /// not take the lock (which writes nothing, or its queue place) is
    /// answered once the replicas have the connection's earlier writes,
    /// at once when they keep up, after the replicas' timeout at most when
    /// they do not.
    async fn run_replicated<T: FromRedisValue>(
        &self,
        call: &Eval<'_>,
        what: impl FnOnce() -> String,
    ) -> Result<(T, Option<u64>)> {
        let Some((count, timeout)) = self.opts.replicas else {
            return Ok((self.run(call, what).await?, None));
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(count).arg(millis_ceil(timeout));
        let send = || {
            let mut conn = self.conn.clone();
            let wait = &wait;
            async move { call.invoke_then(&mut conn, wait).await }
        };
        let bound = timeout + self.opts.response_timeout;
        let (reply, acked) = within(
            bound,
            what,
            tokio::time::timeout(bound, resent_if_unsent(send)).await,
        )?;
        self.check_after_first_answer();
        let acked = match acked.extract_error().map(redis::from_redis_value::<u64>) {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(redis_error(e.into(), "waiting for replicas")),
            Err(e) => return Err(redis_error(e, "waiting for replicas")),
        };
        Ok((reply, Some(acked)))
    }

    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        call: &Eval<'_>,
        what: impl FnOnce() -> String,
    ) -> Result<T> {
        let send = || {
            let mut conn = self.conn.clone();
            async move { call.invoke(&mut conn).await }
        };
        let timeout = self.opts.response_timeout;
        let answer = within(
            timeout,
            what,
            tokio::time::timeout(timeout, resent_if_unsent(send)).await,
        );
        if answer.is_ok() {
            self.check_after_first_answer();
        }
        answer
    }

    /// One attempt at a lock on a Redlock node, where waiters line up by
    /// when they began to wait (`place`) instead of queueing: see
    /// `redlock_acquire.lua`.
    pub(crate) async fn redlock_acquire(
        &self,
        keys: &Arc<LockKeys>,
        line: &RedlockLine,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Attempt> {
        let mut call = Eval::new(&REDLOCK_ACQUIRE, 4);
        call.key(keys.id())
            .key(keys.sequence())
            .key(&line.line)
            .key(&line.alive)
            .arg(token.as_str())
            .arg(millis_ceil(lease));
        if let Some(p) = place {
            call.arg(p.waiter.as_str())
                .arg(p.since_ms)
                .arg(millis_ceil(p.timeout));
        }
        let reply: redis::Value = self
            .run(&call, || format!("acquiring {:?}", keys.id()))
            .await?;
        Ok(match attempt_reply(keys, &reply)? {
            Ok(fence) => Attempt::Acquired {
                fence,
                keys: keys.clone(),
            },
            Err(busy) => busy,
        })
    }

    /// Gives up `token`'s lock on a Redlock node and announces it on the
    /// key's channel, or takes the waiter `token` out of the key's line.
    pub(crate) async fn redlock_release(
        &self,
        keys: &LockKeys,
        line: &RedlockLine,
        token: &Token,
    ) -> Result<bool> {
        let mut call = Eval::new(&REDLOCK_RELEASE, 3);
        call.key(keys.id())
            .key(&line.line)
            .key(&line.alive)
            .arg(token.as_str())
            .arg(keys.channel());
        let n: i64 = self
            .run(&call, || format!("releasing {:?}", keys.id()))
            .await?;
        Ok(n == 1)
    }

    /// Gives up `token`'s lock or permit, handing it to the first live
    /// waiter.
    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let mut call = match (keys.rw_mode(), keys.resource()) {
            (Some(_), _) => Eval::new(&RW_RELEASE, 6),
            (None, Resource::Lock) => Eval::new(&LOCK_RELEASE, 4),
            (None, Resource::Semaphore { .. }) => Eval::new(&SEMAPHORE_RELEASE, 4),
        };
        call.key(keys.id())
            .key(keys.sequence())
            .key(keys.queue())
            .key(keys.tickets());
        if keys.rw_mode().is_some() {
            call.key(keys.writer()).key(keys.reads());
        }
        call.arg(token.as_str());
        if let Some(mode) = keys.rw_mode() {
            call.arg(rw_arg(mode));
        } else if let Resource::Semaphore { permits } = keys.resource() {
            call.arg(permits);
        }
        #[cfg(feature = "sentinel")]
        if let Some(leases) = &self.leases {
            leases.forget(token);
        }
        let n: i64 = self
            .run(&call, || format!("releasing {:?}", keys.id()))
            .await?;
        Ok(n == 1)
    }

    pub(crate) async fn extend(
        &self,
        keys: &LockKeys,
        token: &Token,
        lease: Duration,
    ) -> Result<bool> {
        let mut call = match (keys.rw_mode(), keys.resource()) {
            (Some(_), _) => Eval::new(&RW_EXTEND, 2),
            (None, Resource::Lock) => Eval::new(&LOCK_EXTEND, 1),
            (None, Resource::Semaphore { .. }) => Eval::new(&SEMAPHORE_EXTEND, 1),
        };
        call.key(keys.id());
        if keys.rw_mode().is_some() {
            call.key(keys.writer());
        }
        call.arg(token.as_str()).arg(millis_ceil(lease));
        if let Some(mode) = keys.rw_mode() {
            call.arg(rw_arg(mode));
        }
        let (n, acked): (i64, _) = self
            .run_replicated(&call, || format!("extending {:?}", keys.id()))
            .await?;
        if n == 1 {
            // An extension the replicas did not confirm is a failed one:
            // the watchdog retries, and the guard is lost if none succeeds.
            self.replicated(keys.id(), acked)?;
        }
        #[cfg(feature = "sentinel")]
        if let Some(leases) = &self.leases {
            if n == 1 {
                leases.renewed(keys, token, lease);
            } else {
                leases.forget(token);
            }
        }
        Ok(n == 1)
    }

    /// Whether the `WAIT` sent with a write of `key` ([`run_replicated`])
    /// heard from enough replicas: `acked` of them, `None` when the client
    /// did not ask for any.
    ///
    /// [`run_replicated`]: Self::run_replicated
    fn replicated(&self, key: &str, acked: Option<u64>) -> Result<()> {
        let (Some((count, timeout)), Some(acked)) = (self.opts.replicas, acked) else {
            return Ok(());
        };
        if acked < u64::from(count) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{key:?}: {acked} of the {count} replicas asked for confirmed the write within {timeout:?}"
                ),
            ));
        }
        Ok(())
    }

    /// Raises a token sequence to at least `value`; returns the sequence.
    pub(crate) async fn raise_fence(&self, fence_key: &str, value: u64) -> Result<u64> {
        let mut call = Eval::new(&FENCE_RAISE, 1);
        call.key(fence_key).arg(value);
        self.run(&call, || format!("raising fence {fence_key:?}"))
            .await
    }

    /// Claims `value` of a token sequence: sets the sequence to it if it
    /// is below it. `Ok(value)` when claimed; `Err(counter)` when the
    /// sequence was already at or beyond it.
    pub(crate) async fn claim_fence(
        &self,
        fence_key: &str,
        value: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let mut call = Eval::new(&FENCE_CLAIM, 1);
        call.key(fence_key).arg(value);
        let (claimed, at): (i64, u64) = self
            .run(&call, || format!("claiming fence {fence_key:?}"))
            .await?;
        Ok(if claimed == 1 { Ok(at) } else { Err(at) })
    }

    /// Releases the token from whichever of `locks` carries it.
    pub(crate) async fn release_any(
        &self,
        locks: &[String],
        token: &Token,
        channel: &str,
    ) -> Result<bool> {
        let mut call = Eval::new(&LOCK_RELEASE_ANY, locks.len());
        for key in locks {
            call.key(key);
        }
        call.arg(token.as_str()).arg(channel);
        let n: i64 = self
            .run(&call, || format!("releasing one of {} slots", locks.len()))
            .await?;
        Ok(n == 1)
    }
}

impl LockStore for RedisStore {
    fn name(&self) -> &'static str {
        if self.is_cluster() {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    /// With `wait_for_replicas`: a release hands the lock over on the
    /// master, before any replica has it.
    fn confirms_handoffs(&self) -> bool {
        self.opts.replicas.is_some()
    }

    /// One attempt; see [`LockStore::acquire`].
    fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>> {
        StoreFuture::boxed(async move {
            let mut call = match keys.resource() {
                Resource::Lock => Eval::new(&LOCK_ACQUIRE, 4),
                Resource::Semaphore { .. } => Eval::new(&SEMAPHORE_ACQUIRE, 4),
            };
            call.key(keys.id())
                .key(keys.sequence())
                .key(keys.queue())
                .key(keys.tickets())
                .arg(token.as_str())
                .arg(millis_ceil(lease));
            if let Resource::Semaphore { permits } = keys.resource() {
                call.arg(permits);
            }
            // Without a place the script never queues.
            if let Some(p) = place {
                call.arg(millis_ceil(p.timeout))
                    .arg(p.channel)
                    .arg(p.attempt);
            }
            self.attempt(keys, token, &call).await
        })
    }

    /// One script for every key, on one server, or on a cluster when the
    /// keys share a slot; `None` on a cluster otherwise.
    fn acquire_all<'a>(
        &'a self,
        keys: &'a [Arc<LockKeys>],
        tokens: &'a [Token],
        lease: Duration,
    ) -> StoreFuture<'a, Result<Option<AllOrNone>>> {
        let one_slot = || {
            let first = keys.first().map(|k| crate::layout::slot(k.id()));
            keys.iter()
                .all(|k| Some(crate::layout::slot(k.id())) == first)
        };
        if keys.len() != tokens.len()
            || keys.iter().any(|k| k.resource() != Resource::Lock)
            || (self.is_cluster() && !one_slot())
        {
            return StoreFuture::ready(Ok(None));
        }
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&LOCK_ACQUIRE_ALL, 4 * keys.len());
            for k in keys {
                call.key(k.id())
                    .key(k.sequence())
                    .key(k.queue())
                    .key(k.tickets());
            }
            call.arg(millis_ceil(lease));
            for t in tokens {
                call.arg(t.as_str());
            }
            let what = || format!("acquiring {} locks from {:?}", keys.len(), keys[0].id());
            let (reply, acked): (Vec<i64>, _) = self.run_replicated(&call, what).await?;
            let answer = all_or_none_reply(keys.len(), &reply).ok_or_else(|| {
                Error::new(
                    ErrorKind::Protocol,
                    format!("{}: unexpected script reply {reply:?}", what()),
                )
            })?;
            if let AllOrNone::Acquired(_) = answer
                && let Err(e) = self.replicated(keys[0].id(), acked)
            {
                // Not on enough replicas to survive a failover: give them
                // back rather than hand out locks a promoted replica would
                // not know.
                for (k, t) in keys.iter().zip(tokens) {
                    if let Err(undo) = self.release(k, t).await {
                        tracing::warn!(lock = %k.id(), error = %undo, "releasing an unreplicated lock failed; its lease will free it");
                    }
                }
                return Err(e);
            }
            Ok(Some(answer))
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(Self::release(self, keys, token))
    }

    /// One attempt at a read or write hold: one `EVALSHA` of
    /// `rw_acquire.lua`; see [`LockStore::rw_acquire`].
    fn rw_acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        mode: RwMode,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&RW_ACQUIRE, 6);
            call.key(keys.id())
                .key(keys.sequence())
                .key(keys.queue())
                .key(keys.tickets())
                .key(keys.writer())
                .key(keys.reads())
                .arg(token.as_str())
                .arg(millis_ceil(lease))
                .arg(rw_arg(mode));
            // Without a place the script never queues.
            if let Some(p) = place {
                call.arg(millis_ceil(p.timeout))
                    .arg(p.channel)
                    .arg(p.attempt);
            }
            self.attempt(keys, token, &call).await
        })
    }

    fn rw_release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        _mode: RwMode,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        // The keys name the mode; `release` reads it from them.
        StoreFuture::boxed(Self::release(self, keys, token))
    }

    fn rw_extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        _mode: RwMode,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(Self::extend(self, keys, token, lease))
    }

    /// What the server knows of the read-write lock; see
    /// [`LockStore::rw_inspect`].
    fn rw_inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&RW_INSPECT, 4);
            call.key(keys.id())
                .key(keys.writer())
                .key(keys.sequence())
                .key(keys.queue());
            let (readers, writer, left, waiters, sequence): (i64, i64, i64, i64, String) = self
                .run(&call, || format!("inspecting {:?}", keys.id()))
                .await?;
            let garbage = || {
                Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "inspecting {:?}: unexpected script reply [{readers}, {writer}, {left}, {waiters}, {sequence:?}]",
                        keys.id()
                    ),
                )
            };
            let sequence: u64 = sequence.parse().map_err(|_| garbage())?;
            let held = readers > 0 || writer == 1;
            Ok(Occupancy::read_write(
                u32::try_from(readers).map_err(|_| garbage())?,
                writer == 1,
                (held && left >= 0).then(|| Duration::from_millis(left.unsigned_abs())),
                u64::try_from(waiters).map_err(|_| garbage())?,
                (sequence > 0).then(|| FencingToken::new(sequence)),
            ))
        })
    }

    fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(Self::extend(self, keys, token, lease))
    }

    /// What the server knows of the lock or semaphore; see
    /// [`LockStore::inspect`].
    fn inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&INSPECT, 3);
            call.key(keys.id()).key(keys.sequence()).key(keys.queue());
            let capacity = match keys.resource() {
                Resource::Lock => {
                    call.arg("lock");
                    1
                }
                Resource::Semaphore { permits } => {
                    call.arg("semaphore");
                    permits
                }
            };
            let (holders, left, waiters, sequence): (i64, i64, i64, String) = self
                .run(&call, || format!("inspecting {:?}", keys.id()))
                .await?;
            let garbage = || {
                Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "inspecting {:?}: unexpected script reply [{holders}, {left}, {waiters}, {sequence:?}]",
                        keys.id()
                    ),
                )
            };
            let sequence: u64 = sequence.parse().map_err(|_| garbage())?;
            Ok(Occupancy::new(
                u32::try_from(holders).map_err(|_| garbage())?,
                capacity,
                (holders > 0 && left >= 0).then(|| Duration::from_millis(left.unsigned_abs())),
                u64::try_from(waiters).map_err(|_| garbage())?,
                (sequence > 0).then(|| FencingToken::new(sequence)),
            ))
        })
    }
}

/// Connects to one Redis server: its store, with the pub/sub connection
/// waiters are told on (opened at the first wait).
pub(crate) async fn connect(client: redis::Client, opts: RedisOptions) -> Result<Store> {
    let subscriber = Subscriber::new(&client, opts)?;
    let store = RedisStore::connect(client, opts).await?;
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]))
}

/// A store on an application's connection manager, with the pub/sub
/// connection made from `client` (the client the manager was made from).
pub(crate) async fn connect_manager(
    conn: ConnectionManager,
    client: &redis::Client,
    opts: RedisOptions,
) -> Result<Store> {
    let subscriber = Subscriber::new(client, opts)?;
    let addr = client.get_connection_info().addr().to_string();
    let store = RedisStore::with_manager(conn, addr, opts).await?;
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]))
}

/// Connects to the master a group of sentinels names, with a subscriber
/// connection that follows it too.
#[cfg(feature = "sentinel")]
pub(crate) async fn connect_sentinel(target: SentinelTarget, opts: RedisOptions) -> Result<Store> {
    let store = Arc::new(RedisStore::connect_sentinel(&target, opts).await?);
    if let Some(leases) = &store.leases {
        leases.renewed_by(&store);
    }
    let subscriber = Subscriber::for_target(SubTarget::Sentinel(target), opts);
    Ok(Store::new(store, vec![Arc::new(subscriber)]))
}

/// Connects to a Redis Cluster through any of `urls` (seed nodes).
#[cfg(feature = "cluster")]
pub(crate) async fn connect_cluster(
    infos: Vec<redis::ConnectionInfo>,
    opts: RedisOptions,
    tls: TlsSettings,
) -> Result<Store> {
    let client = cluster_client_for(&infos, opts, &tls, None)?;
    let store = RedisStore::connect_cluster(client, opts).await?;
    let subscriber = Subscriber::for_target(SubTarget::Cluster(infos, tls), opts);
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]))
}

/// A store whose commands go over the application's cluster connection,
/// with a subscriber of its own made from the seed nodes `infos`.
#[cfg(feature = "cluster")]
pub(crate) async fn connect_cluster_connection(
    conn: redis::cluster_async::ClusterConnection,
    infos: Vec<redis::ConnectionInfo>,
    opts: RedisOptions,
    tls: TlsSettings,
) -> Result<Store> {
    if infos.is_empty() {
        return Err(Error::invalid(
            "a cluster connection needs the seed nodes it was made from, for the pub/sub connection",
        ));
    }
    // Checked now, not when the first waiter subscribes.
    cluster_client_for(&infos, opts, &tls, None)?;
    let store = RedisStore::with_cluster_connection(conn, opts).await?;
    let subscriber = Subscriber::for_target(SubTarget::Cluster(infos, tls), opts);
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An acquire script's reply: a plain integer is a fence, an array an
    /// attempt that did not take the lock; anything else, garbage from a
    /// server that is not lockguard's, is a protocol error, never a panic.
    #[test]
    fn acquire_replies_are_read_and_garbage_is_a_protocol_error() {
        use redis::Value::{Array, Int, Nil, SimpleString};
        let keys = LockKeys::checked("p:", "k", Resource::Lock).unwrap();
        let read = |v: redis::Value| attempt_reply(&keys, &v);
        assert_eq!(read(Int(42)).unwrap().unwrap().get(), 42);
        assert!(matches!(
            read(Array(vec![Int(0), Int(1500)])).unwrap(),
            Err(Attempt::Busy(Some(d))) if d == Duration::from_millis(1500)
        ));
        assert!(matches!(
            read(Array(vec![Int(0), Int(-2)])).unwrap(),
            Err(Attempt::Busy(None))
        ));
        assert!(matches!(
            read(Array(vec![Int(0), Int(20), Int(3000)])).unwrap(),
            Err(Attempt::Queued { ttl: Some(_), kept }) if kept == Duration::from_secs(3)
        ));
        for garbage in [
            Int(0),
            Int(-7),
            Nil,
            SimpleString("OK".into()),
            Array(vec![]),
            Array(vec![Int(1), Int(5)]),
            Array(vec![Int(0), Int(5), Int(0)]),
            Array(vec![Int(0), Nil]),
        ] {
            let e = read(garbage.clone()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{garbage:?}: {e}");
        }
    }

    #[test]
    fn malformed_urls_are_invalid_input() {
        for url in ["", "not a url", "http://localhost", "redis://:99999999"] {
            let err = client_for(url, &TlsSettings::default()).unwrap_err();
            assert!(err.is_invalid_input(), "{url:?}: {err}");
        }
    }

    /// Every command a script calls, and every command the client sends
    /// by name, is in the list a `NOPERM` error tells the user to allow.
    #[test]
    fn the_permission_list_names_every_command_lockguard_uses() {
        let scripts = [
            include_str!("scripts/counter_add.lua"),
            include_str!("scripts/counter_set.lua"),
            include_str!("scripts/counter_take.lua"),
            include_str!("scripts/fence_claim.lua"),
            include_str!("scripts/fence_raise.lua"),
            include_str!("scripts/fenced_write.lua"),
            include_str!("scripts/fixed_window.lua"),
            include_str!("scripts/gcra.lua"),
            include_str!("scripts/inspect.lua"),
            include_str!("scripts/lock_acquire.lua"),
            include_str!("scripts/lock_acquire_all.lua"),
            include_str!("scripts/lock_extend.lua"),
            include_str!("scripts/lock_release.lua"),
            include_str!("scripts/lock_release_any.lua"),
            include_str!("scripts/mark_once.lua"),
            include_str!("scripts/queue.lua"),
            include_str!("scripts/redlock_acquire.lua"),
            include_str!("scripts/redlock_release.lua"),
            include_str!("scripts/rw_acquire.lua"),
            include_str!("scripts/rw_extend.lua"),
            include_str!("scripts/rw_inspect.lua"),
            include_str!("scripts/rw_lib.lua"),
            include_str!("scripts/rw_release.lua"),
            include_str!("scripts/semaphore_acquire.lua"),
            include_str!("scripts/semaphore_extend.lua"),
            include_str!("scripts/semaphore_release.lua"),
            include_str!("scripts/sequence.lua"),
            include_str!("scripts/sliding_window.lua"),
        ];
        let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/scripts"))
            .unwrap()
            .count();
        assert_eq!(files, scripts.len(), "a script is missing from this list");
        let mut called = std::collections::BTreeSet::new();
        for script in scripts {
            for quote in ["'", "\""] {
                for call in ["redis.call(", "redis.pcall("] {
                    let opening = format!("{call}{quote}");
                    for (at, _) in script.match_indices(&opening) {
                        let rest = &script[at + opening.len()..];
                        let name = &rest[..rest.find(quote).unwrap()];
                        called.insert(name.to_lowercase());
                    }
                }
            }
            assert!(
                !script.contains("redis.call(KEYS") && !script.contains("redis.call(ARGV"),
                "a script calls a command it is given"
            );
        }
        assert!(called.len() > 20, "{called:?}");
        for c in &called {
            assert!(
                NEEDED_COMMANDS.contains(&c.as_str()),
                "{c} is not in the list"
            );
        }
        let sent = [
            "evalsha",
            "eval",
            "hmget",
            "subscribe",
            "unsubscribe",
            "ping",
        ];
        for c in sent {
            assert!(NEEDED_COMMANDS.contains(&c), "{c} is not in the list");
        }
        let err = missing_permission(
            redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "NOPERM",
                "User app has no permissions to run the 'evalsha' command".to_owned(),
            )),
            "acquiring \"k\"",
        );
        assert_eq!(err.kind(), ErrorKind::Unauthorized);
        assert!(err.to_string().contains("+evalsha +eval +hmget"), "{err}");
    }

    #[test]
    fn versions_are_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(redis_version(info), Some((7, 0, 15)));
        assert_eq!(redis_version("redis_version:6.2"), Some((6, 2, 0)));
        assert!((redis_version("redis_version:5.0.7").unwrap().0, 0) < MIN_REDIS_VERSION);
        for bad in [
            "",
            "garbage",
            "redis_version:",
            "redis_version:x.y.z",
            "redis_version:7",
        ] {
            assert_eq!(redis_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://***@h:1/0");
        let err = client_for("redis://u:secret@h:notaport", &TlsSettings::default()).unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
