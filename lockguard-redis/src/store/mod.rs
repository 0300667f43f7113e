//! The Redis store: every operation is one `EVALSHA` (or one plain command)
//! on a connection that reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::FromRedisValue;
use redis::aio::ConnectionManager;

#[cfg(feature = "cluster")]
use crate::client::cluster_client_for;
#[cfg(feature = "sentinel")]
use crate::client::manager_config;
use crate::client::{command_config, resent_if_unsent};
use crate::conn::Conn;
use crate::error::{redis_error, server_refusal, within};
use crate::layout::RedisLockKeys as _;
use crate::layout::RedlockLine;
use crate::options::RedisOptions;
#[cfg(feature = "cluster")]
use crate::options::TlsSettings;
#[cfg(feature = "sentinel")]
use crate::sentinel::SentinelTarget;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use crate::wake::SubTarget;
use crate::wake::Subscriber;
use eval::{Eval, Lua};
use lockguard_core::FencingToken;
use lockguard_core::store::Token;
use lockguard_core::store::{
    AllOrNone, Holding, LockSet, LockStore, Occupancy, Outcome, Place, Store, Waiting, millis_ceil,
};
use lockguard_core::store::{LockKeys, Resource, RwMode};
use lockguard_core::{Error, ErrorKind, Result};

mod data;
mod eval;
#[cfg(feature = "sentinel")]
mod leases;
mod survey;

/// A script that uses the wait queue: `sequence_draw.lua`, `sequence.lua`
/// and `queue.lua` (their shared functions) followed by the script's own
/// files (a read-write lock's: `rw_lib.lua`, its holders and handoffs,
/// then the script's); with `fast`, a file after the draw that serves the
/// uncontended case before the other shared functions are made (their
/// closures cost the server about 0.3 µs a call; see
/// `lock_acquire_fast.lua`).
macro_rules! queue_script {
    (fast: $fast:literal, $($file:literal),+) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("scripts/sequence_draw.lua"),
                include_str!(concat!("scripts/", $fast)),
                include_str!("scripts/sequence.lua"),
                include_str!("scripts/queue.lua"),
                $(include_str!(concat!("scripts/", $file))),+
            ))
        })
    };
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("scripts/sequence_draw.lua"),
                include_str!("scripts/sequence.lua"),
                include_str!("scripts/queue.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}

static LOCK_ACQUIRE: LazyLock<Lua> =
    queue_script!(fast: "lock_acquire_fast.lua", "lock_acquire.lua");
static LOCK_RELEASE: LazyLock<Lua> =
    queue_script!(fast: "lock_release_fast.lua", "lock_release.lua");
static LOCK_ACQUIRE_ALL: LazyLock<Lua> = queue_script!("lock_acquire_all.lua");
static LOCK_EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/lock_extend.lua")));
static FENCE_RAISE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fence_raise.lua")));
static FENCE_CLAIM: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fence_claim.lua")));
static REDLOCK_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence_draw.lua"),
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/redlock_acquire.lua")
    ))
});
static REDLOCK_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/redlock_release.lua")));
static LOCK_RELEASE_ANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/lock_release_any.lua")));
static SEMAPHORE_ACQUIRE: LazyLock<Lua> =
    queue_script!(fast: "semaphore_acquire_fast.lua", "semaphore_acquire.lua");
static SEMAPHORE_RELEASE: LazyLock<Lua> =
    queue_script!(fast: "semaphore_release_fast.lua", "semaphore_release.lua");
static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/inspect.lua")));
static SEMAPHORE_EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/semaphore_extend.lua")));

static RW_ACQUIRE: LazyLock<Lua> =
    queue_script!(fast: "rw_acquire_fast.lua", "rw_lib.lua", "rw_acquire.lua");
static RW_RELEASE: LazyLock<Lua> =
    queue_script!(fast: "rw_release_fast.lua", "rw_lib.lua", "rw_release.lua");
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

/// The keys of a wait-queue script for one hold: its key, its sequence,
/// its queue and its tickets, and for a read-write lock (`rw`) its writer
/// and its queued readers.
fn queue_keys(call: &mut Eval<'_>, keys: &LockKeys, rw: bool) {
    keys.queue_keys(rw, |parts| {
        call.key_parts(parts);
    });
}

/// A call of a wait-queue script on one hold's [keys](queue_keys), the
/// holder's or waiter's `token` its first argument.
fn queue_call<'s>(script: &'s Lua, keys: &LockKeys, rw: bool, token: &Token) -> Eval<'s> {
    let mut call = Eval::new(script, if rw { 6 } else { 4 });
    queue_keys(&mut call, keys, rw);
    call.arg(token.as_str());
    call
}

/// A waiter's place, the last arguments of an acquire script. Without a
/// place the script never queues.
fn place_args(call: &mut Eval<'_>, place: Option<Place<'_>>) {
    if let Some(p) = place {
        call.arg(millis_ceil(p.timeout))
            .arg(p.channel)
            .arg(p.attempt);
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

/// What an acquire script's reply says: a plain integer, the fencing token
/// of a hold taken (the common answer, and the cheapest to read); or `[0,
/// n]` or `[0, n, kept]`, the attempt that did not take it (`n` the
/// holder's PTTL; negative when it has none, or the key is free but others
/// are ahead), queued with its place kept for `kept` ms.
fn attempt_reply(keys: &LockKeys, reply: &redis::Value) -> Result<Result<FencingToken, Outcome>> {
    use redis::Value::{Array, Int};
    let ttl = |n: i64| u64::try_from(n).ok().map(Duration::from_millis);
    match reply {
        Int(fence) if *fence > 0 => return Ok(Ok(FencingToken::new(fence.unsigned_abs()))),
        Array(items) => match items.as_slice() {
            // PTTL 0: under a millisecond left.
            [Int(0), Int(n)] => return Ok(Err(Outcome::Busy(ttl(*n)))),
            [Int(0), Int(n), Int(kept)] if *kept > 0 => {
                return Ok(Err(Outcome::Queued {
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

/// What an inspect script's reply says of a hold, read the same way for
/// every kind.
struct Inspected {
    holders: u32,
    /// The lease left, when held and the lease is known.
    left: Option<Duration>,
    waiters: u64,
    /// The last fencing token drawn, if any.
    fence: Option<FencingToken>,
}

impl Inspected {
    /// Reads the reply's `holders` (a read-write lock's readers), its
    /// lease `left` (in ms; negative when unknown) if `held`, its `waiters`
    /// and its `sequence`; a value out of range is `garbage`.
    fn read(
        holders: i64,
        held: bool,
        left: i64,
        waiters: i64,
        sequence: &str,
        garbage: impl Fn() -> Error,
    ) -> Result<Self> {
        let sequence: u64 = sequence.parse().map_err(|_| garbage())?;
        Ok(Self {
            holders: u32::try_from(holders).map_err(|_| garbage())?,
            left: (held && left >= 0).then(|| Duration::from_millis(left.unsigned_abs())),
            waiters: u64::try_from(waiters).map_err(|_| garbage())?,
            fence: (sequence > 0).then(|| FencingToken::new(sequence)),
        })
    }
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
    leases: Option<Arc<leases::Leases>>,
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
        .map_err(lockguard_core::store::net::unreachable)?;
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
        .map_err(lockguard_core::store::net::unreachable)?;
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
        let leases = Arc::new(leases::Leases::default());
        let conn = crate::sentinel::SentinelConn::connect(
            target,
            redis::ProtocolVersion::RESP3,
            manager_config(opts),
            opts,
            Some(leases.on_switch()),
        )
        .await
        .map_err(lockguard_core::store::net::unreachable)?;
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
        what: impl Fn() -> String,
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
    ) -> Result<Outcome> {
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
        Ok(Outcome::Acquired {
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
        what: impl Fn() -> String,
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
        what: impl Fn() -> String,
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
    ) -> Result<Outcome> {
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
            Ok(fence) => Outcome::Acquired {
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
        let script = match (keys.rw_mode(), keys.resource()) {
            (Some(_), _) => &RW_RELEASE,
            (None, Resource::Lock) => &LOCK_RELEASE,
            (None, Resource::Semaphore { .. }) => &SEMAPHORE_RELEASE,
        };
        let mut call = queue_call(script, keys, keys.rw_mode().is_some(), token);
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

/// Read-write locks: the holds of a read-write lock's keys, which the
/// boundary's methods hand on here.
impl RedisStore {
    /// One attempt at a read or write hold: one `EVALSHA` of
    /// `rw_acquire.lua`; see [`LockStore::acquire`].
    async fn rw_acquire(
        &self,
        keys: &Arc<LockKeys>,
        mode: RwMode,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        let mut call = queue_call(&RW_ACQUIRE, keys, true, token);
        call.arg(millis_ceil(lease)).arg(rw_arg(mode));
        place_args(&mut call, place);
        self.attempt(keys, token, &call).await
    }

    /// What the server knows of the read-write lock; see
    /// [`LockStore::inspect`].
    async fn rw_inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
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
        let held = readers > 0 || writer == 1;
        let read = Inspected::read(readers, held, left, waiters, &sequence, garbage)?;
        Ok(Occupancy::read_write(
            read.holders,
            writer == 1,
            read.left,
            read.waiters,
            read.fence,
        ))
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

    fn read_write(&self) -> bool {
        true
    }

    /// With `wait_for_replicas`: a release hands the lock over on the
    /// master, before any replica has it.
    fn confirms_handoffs(&self) -> bool {
        self.opts.replicas.is_some()
    }

    /// One attempt; see [`LockStore::acquire`].
    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        if let Some(mode) = keys.rw_mode() {
            return self.rw_acquire(keys, mode, token, lease, place).await;
        }

        let script = match keys.resource() {
            Resource::Lock => &LOCK_ACQUIRE,
            Resource::Semaphore { .. } => &SEMAPHORE_ACQUIRE,
        };
        let mut call = queue_call(script, keys, false, token);
        call.arg(millis_ceil(lease));
        if let Resource::Semaphore { permits } = keys.resource() {
            call.arg(permits);
        }
        place_args(&mut call, place);
        self.attempt(keys, token, &call).await
    }

    /// One script for every key, on one server, or on a cluster when the
    /// keys share a slot; `None` on a cluster otherwise.
    async fn acquire_all(&self, set: LockSet<'_>, lease: Duration) -> Result<Option<AllOrNone>> {
        let (keys, tokens) = (set.keys(), set.tokens());
        let one_slot = || {
            let first = keys.first().map(|k| crate::layout::slot(k.id()));
            keys.iter()
                .all(|k| Some(crate::layout::slot(k.id())) == first)
        };
        if self.is_cluster() && !one_slot() {
            return Ok(None);
        }

        let mut call = Eval::new(&LOCK_ACQUIRE_ALL, 4 * keys.len());
        for k in keys {
            queue_keys(&mut call, k, false);
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
    }

    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        Self::release(self, keys, token).await
    }

    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        Self::extend(self, keys, token, lease).await
    }

    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        Self::survey(self, prefix).await
    }

    /// What the server knows of the lock or semaphore; see
    /// [`LockStore::inspect`].
    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        if keys.rw_mode().is_some() {
            return self.rw_inspect(keys).await;
        }

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
        let read = Inspected::read(holders, holders > 0, left, waiters, &sequence, garbage)?;
        Ok(Occupancy::new(
            read.holders,
            capacity,
            read.left,
            read.waiters,
            read.fence,
        ))
    }
}

/// Connects to one Redis server: its store, with the pub/sub connection
/// waiters are told on (opened at the first wait).
pub(crate) async fn connect(client: redis::Client, opts: RedisOptions) -> Result<Store> {
    let subscriber = Subscriber::new(&client, opts)?;
    let addr = client.get_connection_info().addr().to_string();
    let store = RedisStore::connect(client, opts).await?;
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]).at(&addr))
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
    let store = RedisStore::with_manager(conn, addr.clone(), opts).await?;
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]).at(&addr))
}

/// Connects to the master a group of sentinels names, with a subscriber
/// connection that follows it too.
#[cfg(feature = "sentinel")]
pub(crate) async fn connect_sentinel(target: SentinelTarget, opts: RedisOptions) -> Result<Store> {
    let store = Arc::new(RedisStore::connect_sentinel(&target, opts).await?);
    if let Some(leases) = &store.leases {
        leases.renewed_by(&store);
    }
    let at = format!(
        "{} via sentinels {}",
        target.service,
        target
            .sentinels
            .iter()
            .map(|s| s.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let subscriber = Subscriber::for_target(SubTarget::Sentinel(target), opts);
    Ok(Store::new(store, vec![Arc::new(subscriber)]).at(&at))
}

/// Connects to a Redis Cluster through any of `urls` (seed nodes).
#[cfg(feature = "cluster")]
pub(crate) async fn connect_cluster(
    infos: Vec<redis::ConnectionInfo>,
    opts: RedisOptions,
    tls: TlsSettings,
) -> Result<Store> {
    let client = cluster_client_for(&infos, opts, &tls)?;
    let store = RedisStore::connect_cluster(client, opts).await?;
    let at = seeds(&infos);
    let subscriber = Subscriber::for_target(SubTarget::Cluster(infos, tls), opts);
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]).at(&at))
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
    cluster_client_for(&infos, opts, &tls)?;
    let store = RedisStore::with_cluster_connection(conn, opts).await?;
    let at = seeds(&infos);
    let subscriber = Subscriber::for_target(SubTarget::Cluster(infos, tls), opts);
    Ok(Store::new(Arc::new(store), vec![Arc::new(subscriber)]).at(&at))
}

/// A cluster's seed nodes, `host:port` each, for messages.
#[cfg(feature = "cluster")]
fn seeds(infos: &[redis::ConnectionInfo]) -> String {
    infos
        .iter()
        .map(|i| i.addr().to_string())
        .collect::<Vec<_>>()
        .join(",")
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
            Err(Outcome::Busy(Some(d))) if d == Duration::from_millis(1500)
        ));
        assert!(matches!(
            read(Array(vec![Int(0), Int(-2)])).unwrap(),
            Err(Outcome::Busy(None))
        ));
        assert!(matches!(
            read(Array(vec![Int(0), Int(20), Int(3000)])).unwrap(),
            Err(Outcome::Queued { ttl: Some(_), kept }) if kept == Duration::from_secs(3)
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
}
