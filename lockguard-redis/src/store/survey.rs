//! A survey of a Redis server: every lock, semaphore and read-write lock
//! under a prefix that is held or awaited, found with `SCAN` and read one
//! lock at a time by `survey.lua`.

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;

use lockguard_core::store::{Holder, Holding, Token, Waiter};
use lockguard_core::{Error, ErrorKind, FencingToken, Result, RwMode};

use super::RedisStore;
use super::eval::{Eval, Lua};
use crate::layout::sequence;

static SURVEY: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/survey.lua")));

/// The kinds of lock identity a client lays out (`{prefix}{kind}:{...}`),
/// with the kind `survey.lua` reads each as.
const KINDS: [(&str, &str); 7] = [
    ("lock", "lock"),
    ("leader", "lock"),
    ("schedule", "lock"),
    ("urw-gate", "lock"),
    ("sem", "sem"),
    ("rw", "rw"),
    ("urw", "rw"),
];

/// How many keys one `SCAN` step looks at.
const SCAN_COUNT: u32 = 1000;

impl RedisStore {
    /// See [`LockStore::survey`](lockguard_core::store::LockStore::survey).
    pub(crate) async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        let pattern = format!("{}*", glob_escaped(prefix));
        let mut ids = BTreeSet::new();
        // SCAN walks one server's keys: on a cluster, each master's.
        for node in self.scanned_nodes().await? {
            let mut cursor = "0".to_owned();
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let (next, keys): (String, Vec<String>) = self
                    .query_on(node, &cmd, || format!("listing the keys under {prefix:?}"))
                    .await?;
                ids.extend(keys.iter().filter_map(|k| lock_id(prefix, k)));
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        let mut out = Vec::new();
        for (id, kind) in ids {
            let holding = self.survey_one(prefix, id, kind).await?;
            if !(holding.holders.is_empty() && holding.waiters.is_empty()) {
                out.push(holding);
            }
        }
        Ok(out)
    }

    /// Who holds and who waits for the lock `id`, read as `kind`.
    async fn survey_one(&self, prefix: &str, id: String, kind: &str) -> Result<Holding> {
        let mut call = Eval::new(&SURVEY, 6);
        call.key(&id)
            .key(sequence(prefix, &id))
            .key(format!("{id}:queue"))
            .key(format!("{id}:tickets"))
            .key(format!("{id}:writer"))
            .key(format!("{id}:reads"))
            .arg(kind);
        let (holders, waiters, seq): (Vec<String>, Vec<String>, String) =
            self.run(&call, || format!("surveying {id:?}")).await?;
        let garbage = || {
            Error::new(
                ErrorKind::Protocol,
                format!(
                    "surveying {id:?}: unexpected script reply [{holders:?}, {waiters:?}, {seq:?}]"
                ),
            )
        };
        let token = |t: &str| Token::parse(t.as_bytes()).ok_or_else(garbage);
        let mode = |m: &str| match m {
            "r" => Ok(Some(RwMode::Read)),
            "w" => Ok(Some(RwMode::Write)),
            "" => Ok(None),
            _ => Err(garbage()),
        };
        let mut listed = Vec::new();
        for h in holders.chunks(3) {
            let [t, left, m] = h else {
                return Err(garbage());
            };
            let left: i64 = left.parse().map_err(|_| garbage())?;
            // PTTL -1: no expiry (never written so); not known.
            let left = u64::try_from(left).ok().map(Duration::from_millis);
            listed.push(Holder::new(token(t)?, mode(m)?, None, left));
        }
        let mut queued = Vec::new();
        for w in waiters.chunks(2) {
            let [t, m] = w else {
                return Err(garbage());
            };
            queued.push(Waiter::new(token(t)?, mode(m)?));
        }
        let seq: u64 = seq.parse().map_err(|_| garbage())?;
        let latest = (seq > 0).then(|| FencingToken::new(seq));
        Ok(Holding::new(id, listed, queued, latest))
    }
}

/// A server a survey scans: the one server, or (`Some(slot)`) the master
/// of a cluster that serves `slot`.
type Node = Option<u16>;

impl RedisStore {
    /// The servers whose keys a survey scans: the one server, or every
    /// master of a cluster (named by the first slot of a range it serves,
    /// as `CLUSTER SLOTS` lists them).
    async fn scanned_nodes(&self) -> Result<Vec<Node>> {
        #[cfg(feature = "cluster")]
        if matches!(self.conn, crate::conn::Conn::Cluster(_)) {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let ranges: Vec<Vec<redis::Value>> =
                self.query(&cmd, || "CLUSTER SLOTS".to_owned()).await?;
            let mut masters: Vec<(String, u16)> = Vec::new();
            let mut nodes = Vec::new();
            for range in &ranges {
                let garbage = || {
                    Error::new(
                        ErrorKind::Protocol,
                        format!("CLUSTER SLOTS: unexpected range {range:?}"),
                    )
                };
                let (Some(redis::Value::Int(start)), Some(redis::Value::Array(master))) =
                    (range.first(), range.get(2))
                else {
                    return Err(garbage());
                };
                let address: (String, u16) = match master.as_slice() {
                    [host, port, ..] => (
                        redis::from_redis_value(host.clone()).map_err(|_| garbage())?,
                        redis::from_redis_value(port.clone()).map_err(|_| garbage())?,
                    ),
                    _ => return Err(garbage()),
                };
                if !masters.contains(&address) {
                    masters.push(address);
                    nodes.push(Some(u16::try_from(*start).map_err(|_| garbage())?));
                }
            }
            return Ok(nodes);
        }
        Ok(vec![None])
    }

    /// `cmd`'s answer from `node`.
    async fn query_on<T: redis::FromRedisValue>(
        &self,
        node: Node,
        cmd: &redis::Cmd,
        what: impl Fn() -> String,
    ) -> Result<T> {
        #[cfg(feature = "cluster")]
        if let (Some(slot), crate::conn::Conn::Cluster(conn)) = (node, &self.conn) {
            use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            let timeout = self.opts.response_timeout;
            let mut conn = conn.clone();
            let sent = tokio::time::timeout(timeout, conn.route_command(cmd.clone(), route)).await;
            let value = crate::error::within(timeout, &what, sent)?;
            return redis::from_redis_value(value)
                .map_err(|e| Error::new(ErrorKind::Protocol, format!("{}: {e}", what())));
        }
        let _ = node;
        self.query(cmd, what).await
    }
}

/// `text` with the characters `SCAN`'s `MATCH` reads as a pattern
/// escaped, so it matches itself alone.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The identity of the lock a key under `prefix` belongs to (its own key,
/// or its queue's, tickets', writer's, ...), with the kind its survey
/// reads it as; `None` for a key of no lock.
fn lock_id(prefix: &str, key: &str) -> Option<(String, &'static str)> {
    let rest = key.strip_prefix(prefix)?;
    let (kind, tagged) = rest.split_once(':')?;
    let read_as = KINDS.iter().find(|(k, _)| *k == kind)?.1;
    let name = tagged.strip_prefix('{')?;
    // The escaped name ends at the first `}` not escaped by a `\`.
    let mut escaped = false;
    let end = name.char_indices().find_map(|(i, c)| {
        let closes = c == '}' && !escaped;
        escaped = c == '\\' && !escaped;
        closes.then_some(i)
    })?;
    let len = prefix.len() + kind.len() + 2 + end + 1;
    Some((key[..len].to_owned(), read_as))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_lock_names_its_identity() {
        let id = "app:lock:{order:\\}42\\\\}";
        for key in [
            id.to_owned(),
            format!("{id}:queue"),
            format!("{id}:tickets"),
        ] {
            assert_eq!(
                lock_id("app:", &key),
                Some((id.to_owned(), "lock")),
                "{key}"
            );
        }
        assert_eq!(
            lock_id("app:", "app:rw:{doc}:writer"),
            Some(("app:rw:{doc}".to_owned(), "rw"))
        );
        assert_eq!(
            lock_id("app:", "app:leader:{jobs}"),
            Some(("app:leader:{jobs}".to_owned(), "lock"))
        );
        assert_eq!(
            lock_id("app:", "app:sem:{exports}"),
            Some(("app:sem:{exports}".to_owned(), "sem"))
        );
        for other in [
            "app:seq:{ab}",
            "app:counter:{c}",
            "other:lock:{x}",
            "app:lock:x",
            "app:lock:{unclosed",
        ] {
            assert_eq!(lock_id("app:", other), None, "{other}");
        }
    }

    #[test]
    fn a_prefix_matches_itself_alone() {
        assert_eq!(glob_escaped("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escaped("lockguard:"), "lockguard:");
    }
}
