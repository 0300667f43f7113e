//! Redis's errors as lockguard's [`ErrorKind`]s, with the fix in the
//! message: refused credentials, missing ACL permissions, a database index
//! the server lacks, an unreachable server, a request's deadline.

use std::time::Duration;

use lockguard_core::{Error, ErrorKind, Result};
use redis::RedisResult;

/// The code of a server error that refuses a connection's commands for want
/// of credentials (`NOAUTH`, `WRONGPASS`). An ACL user refused `INFO`
/// alone (`NOPERM`) may still run scripts, so it is not one.
pub(crate) fn server_refusal(e: &Error) -> Option<String> {
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

/// The commands a Redis ACL user must be allowed for lockguard: those the
/// client sends (`EVALSHA`; `EVAL` after a script cache flush; `HMGET`,
/// a counter's read; `SUBSCRIBE`, `UNSUBSCRIBE` and `PING` on the wake-up
/// connection; `HELLO`, the RESP3 handshake), and those its scripts call,
/// which the ACL checks as well. With [`wait_for_replicas`], `WAIT` too; on
/// a cluster, `CLUSTER|SLOTS`. `INFO` and `CONFIG|GET` are asked at
/// connect time and skipped when refused. An operator's survey (`lockguard
/// locks`) also sends `SCAN`, and its script calls `TYPE`: an operator's
/// user needs those, a service's does not.
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
    // A script's `HINCRBY` past the range of a 64-bit integer: bad input
    // (core's `overflow_is_invalid` says which counter).
    if err
        .to_string()
        .contains("increment or decrement would overflow")
    {
        return Error::new(ErrorKind::InvalidInput, what.to_owned()).with_source(err);
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

/// The answer of one request given `timeout` (`tokio::time::timeout`'s
/// output), its error mapped, or core's timeout error naming `what` (see
/// `lockguard_core::store::net::within`, whose note on awaiting in place
/// holds here too).
pub(crate) fn within<T>(
    timeout: Duration,
    what: impl Fn() -> String,
    answer: std::result::Result<RedisResult<T>, tokio::time::error::Elapsed>,
) -> Result<T> {
    let answer = answer.map(|reply| reply.map_err(|e| redis_error(e, &what())));
    lockguard_core::store::net::within(timeout, "redis", what, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command a script calls, and every command the client sends
    /// by name, is in the list a `NOPERM` error tells the user to allow.
    #[test]
    fn the_permission_list_names_every_command_lockguard_uses() {
        let scripts = [
            include_str!("store/scripts/counter_add.lua"),
            include_str!("store/scripts/counter_set.lua"),
            include_str!("store/scripts/counter_take.lua"),
            include_str!("store/scripts/fence_claim.lua"),
            include_str!("store/scripts/fence_raise.lua"),
            include_str!("store/scripts/fenced_remove.lua"),
            include_str!("store/scripts/fenced_write.lua"),
            include_str!("store/scripts/fixed_window.lua"),
            include_str!("store/scripts/gcra.lua"),
            include_str!("store/scripts/inspect.lua"),
            include_str!("store/scripts/lock_acquire.lua"),
            include_str!("store/scripts/lock_acquire_all.lua"),
            include_str!("store/scripts/lock_acquire_fast.lua"),
            include_str!("store/scripts/lock_extend.lua"),
            include_str!("store/scripts/lock_release.lua"),
            include_str!("store/scripts/lock_release_any.lua"),
            include_str!("store/scripts/lock_release_fast.lua"),
            include_str!("store/scripts/mark_once.lua"),
            include_str!("store/scripts/queue.lua"),
            include_str!("store/scripts/redlock_acquire.lua"),
            include_str!("store/scripts/redlock_release.lua"),
            include_str!("store/scripts/rw_acquire.lua"),
            include_str!("store/scripts/rw_acquire_fast.lua"),
            include_str!("store/scripts/rw_extend.lua"),
            include_str!("store/scripts/rw_inspect.lua"),
            include_str!("store/scripts/rw_lib.lua"),
            include_str!("store/scripts/rw_release.lua"),
            include_str!("store/scripts/rw_release_fast.lua"),
            include_str!("store/scripts/semaphore_acquire.lua"),
            include_str!("store/scripts/semaphore_acquire_fast.lua"),
            include_str!("store/scripts/semaphore_extend.lua"),
            include_str!("store/scripts/semaphore_release.lua"),
            include_str!("store/scripts/semaphore_release_fast.lua"),
            include_str!("store/scripts/sequence.lua"),
            include_str!("store/scripts/sequence_draw.lua"),
            include_str!("store/scripts/sliding_window.lua"),
            include_str!("store/scripts/survey.lua"),
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
        // An operator's survey calls TYPE besides.
        for c in called.iter().filter(|c| *c != "type") {
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
}
