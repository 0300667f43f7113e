//! A connection that reconnects by itself, whichever kind it is.

use redis::RedisResult;
use redis::aio::ConnectionManager;

#[cfg(feature = "sentinel")]
use crate::sentinel::SentinelConn;

/// A connection that reconnects by itself: to one server, or to a cluster
/// (which follows slot moves and node failures).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    /// The master a group of sentinels names, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConn),
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
    pub(crate) async fn set_subscribed(&mut self, channel: &str, on: bool) -> RedisResult<()> {
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
