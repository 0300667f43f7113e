//! The ZooKeeper store: locks and semaphores as ZooKeeper's lock recipe.
//!
//! Each lock or semaphore is a container node, `{root}/{key}`, and each
//! acquisition (a holder, or a waiter in the queue) an ephemeral sequential
//! child of it named for its token, `{token}-{sequence}`, so a client finds
//! its own node again after a lost answer. In sequence order the children
//! are the queue: the first `permits` hold, the rest wait, first come first
//! served. A waiter watches only what it waits for: a lock's waiter its
//! predecessor; a semaphore's first waiter the holders, and every later
//! waiter its predecessor (which touches its node when it comes to hold,
//! so its successor moves on to watching the holders). A release deletes
//! one node and wakes one waiter.
//!
//! The lease is the session: a holder's node lives while its session does,
//! so a holder whose process dies frees the lock when the ensemble expires
//! its session. A live holder keeps its lease like on any store: the
//! watchdog's renewals check that its node still exists (and so that its
//! session still lives), each renewal counts for at most the session
//! timeout, and when a lease ends without renewal the holder's client
//! deletes the node. The fencing token is the zxid that created the node,
//! which increases with every write to the ensemble.
//!
//! Nothing here queues in a waiter's place while it is not asking: a place
//! lives with the session, and a waiter that gives up deletes it.

mod data;
mod session;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use zookeeper_client as zk;

use self::session::zk_error;
pub(crate) use self::session::{Session, SessionOptions};
use super::{Attempt, Inbox, LockBackend, Occupancy, Place, StoreFuture, Waiting};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::key::{LockKeys, Resource};
use crate::token::Token;

/// The node under which lockguard keeps its locks, by default.
pub(crate) const DEFAULT_ROOT: &str = "/lockguard";

/// How long a waiter trusts a watch that has not fired before it lists
/// the queue again anyway.
const RECHECK: Duration = Duration::from_secs(5);

/// The ZooKeeper store of one client.
pub(crate) struct ZooKeeperStore {
    session: Arc<Session>,
    /// The persistent node holding every lock's container node.
    root: String,
    response_timeout: Duration,
    inbox: Arc<OnceLock<Weak<dyn Inbox>>>,
    /// This client's nodes, by the token they were created for.
    nodes: Arc<Mutex<HashMap<Token, Node>>>,
}

impl fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("root", &self.root)
            .field("session", &self.session.client().session_id())
            .finish_non_exhaustive()
    }
}

/// One of this client's nodes.
#[derive(Debug)]
struct Node {
    path: String,
    /// The session that created it: the node dies with it.
    session: zk::SessionId,
    fence: FencingToken,
    role: Role,
}

#[derive(Debug)]
enum Role {
    /// In the queue. `watch` waits for what this waiter waits on and wakes
    /// it; while it has not fired, nothing has changed ahead of it. It was
    /// set at the instant it holds.
    Waiting {
        watch: Option<(JoinHandle<()>, Instant)>,
    },
    /// Holding. The lease ends at the instant sent; a task of this client
    /// deletes the node then, unless the lease was extended.
    Holding { lease_end: watch::Sender<Instant> },
}

impl Node {
    /// Changes the node's role, stopping the watch of the earlier one.
    fn set_role(&mut self, role: Role) {
        if let Role::Waiting {
            watch: Some((task, _)),
        } = std::mem::replace(&mut self.role, role)
        {
            task.abort();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Role::Waiting {
            watch: Some((task, _)),
        } = &self.role
        {
            task.abort();
        }
    }
}

impl ZooKeeperStore {
    /// A store working in `session`, under the persistent node `root`
    /// (created if missing).
    pub(crate) async fn new(
        session: Session,
        root: String,
        response_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let store = Arc::new(Self {
            session: Arc::new(session),
            root,
            response_timeout,
            inbox: Arc::new(OnceLock::new()),
            nodes: Arc::new(Mutex::new(HashMap::new())),
        });
        let client = store.session.client();
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        store
            .call(
                "creating the root node",
                client.mkdir(&store.root, &options),
            )
            .await?;
        let inbox = store.inbox.clone();
        Session::monitor(Arc::downgrade(&store.session), move || {
            // Every place in the queue went with the session: every waiter
            // asks again, in the new one.
            if let Some(inbox) = inbox.get().and_then(Weak::upgrade) {
                inbox.wake_all();
            }
        });
        Ok(store)
    }

    /// The session timeout the ensemble granted.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.session.timeout()
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one request under the response timeout; an expired session is
    /// renewed for the next request.
    async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<T> {
        call(&self.session, self.response_timeout, what, request).await
    }

    /// The container node of a lock or semaphore.
    fn dir(&self, keys: &LockKeys) -> String {
        format!("{}/{}", self.root, node_name(&keys.lock))
    }

    /// Creates this token's node in `dir` (and `dir` when missing): its
    /// path and fencing token.
    async fn create(
        &self,
        client: &zk::Client,
        dir: &str,
        token: &Token,
    ) -> Result<(String, FencingToken)> {
        let node = format!("{dir}/{}-", token.as_str());
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        // The container may be removed by the server between our creating
        // it and our node's: try again then.
        for _ in 0..3 {
            match bounded(self.response_timeout, client.create(&node, &[], &ephemeral)).await {
                Ok(Ok((stat, sequence))) => {
                    let fence = u64::try_from(stat.czxid)
                        .ok()
                        .filter(|z| *z > 0)
                        .map(FencingToken::new)
                        .ok_or_else(|| {
                            Error::new(
                                ErrorKind::Protocol,
                                format!("zookeeper created {node} with zxid {}", stat.czxid),
                            )
                        })?;
                    return Ok((format!("{node}{sequence}"), fence));
                }
                Ok(Err(zk::Error::NoNode)) => {
                    match bounded(self.response_timeout, client.create(dir, &[], &container)).await
                    {
                        Ok(Ok(_)) | Ok(Err(zk::Error::NodeExists)) => {}
                        Ok(Err(e)) => return Err(self.failed(e, "creating a lock node").await),
                        Err(e) => return Err(e),
                    }
                }
                Ok(Err(e)) => return Err(self.failed(e, "creating a queue node").await),
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("zookeeper removed {dir} each time a node was created in it"),
        ))
    }

    /// Maps a failed request's error, renewing an expired session first.
    async fn failed(&self, e: zk::Error, what: &str) -> Error {
        failed(&self.session, e, what).await
    }

    /// This token's node, if this client made one in the current session;
    /// a node of an ended session is forgotten.
    fn known(&self, token: &Token, session: zk::SessionId) -> Option<(String, FencingToken, bool)> {
        let mut nodes = self.nodes();
        let node = nodes.get(token)?;
        if node.session != session {
            nodes.remove(token);
            return None;
        }
        let waiting = matches!(node.role, Role::Waiting { .. });
        Some((node.path.clone(), node.fence, waiting))
    }

    /// Whether this token waits with a recent watch that has not fired:
    /// nothing ahead of it changed since it looked. A watch older than
    /// [`RECHECK`] is looked past, the safety net for a signal lost (a
    /// semaphore holder whose touch failed).
    fn watching(&self, token: &Token) -> bool {
        let nodes = self.nodes();
        matches!(
            nodes.get(token),
            Some(Node { role: Role::Waiting { watch: Some((task, set)) }, session, .. })
                if !task.is_finished()
                    && set.elapsed() < RECHECK
                    && *session == self.session.client().session_id()
        )
    }

    async fn acquire_inner(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Attempt> {
        let permits = match keys.resource {
            Resource::Lock => 1,
            Resource::Semaphore { permits } => permits as usize,
        };
        let dir = self.dir(keys);
        let client = self.session.client();
        let session = client.session_id();
        let (path, fence, queued) = match self.known(token, session) {
            Some(known) => known,
            None => {
                let (path, fence) = self.create(&client, &dir, token).await?;
                self.nodes().insert(
                    *token,
                    Node {
                        path: path.clone(),
                        session,
                        fence,
                        role: Role::Waiting { watch: None },
                    },
                );
                (path, fence, false)
            }
        };
        let name = &path[dir.len() + 1..];
        // A node ahead may go between our listing and our watch: look again.
        for _ in 0..8 {
            let children = match bounded(self.response_timeout, client.list_children(&dir)).await? {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(self.failed(e, "listing a lock's queue").await),
            };
            let queue = in_order(&children);
            let Some(rank) = queue.iter().position(|n| *n == name) else {
                // Our node is gone: its session ended. The next attempt
                // queues again in the new one.
                self.nodes().remove(token);
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "the zookeeper session holding this queue place ended",
                ));
            };
            if rank < permits {
                self.hold(token, lease);
                if queued && permits > 1 {
                    // Tell the waiter watching this node that it now comes
                    // first among the waiters.
                    if let Ok(Err(e)) =
                        bounded(self.response_timeout, client.set_data(&path, b"held", None)).await
                    {
                        tracing::debug!(error = %e, "touching a semaphore node failed");
                    }
                }
                return Ok(Attempt::Acquired {
                    fence,
                    keys: keys.clone(),
                });
            }
            if place.is_none() {
                // Never queue without a place: give the node up.
                self.nodes().remove(token);
                self.discard(path);
                return Ok(Attempt::Busy(None));
            }
            let targets: Vec<String> = if rank == permits {
                queue[..permits]
                    .iter()
                    .map(|n| format!("{dir}/{n}"))
                    .collect()
            } else {
                vec![format!("{dir}/{}", queue[rank - 1])]
            };
            // Every watch is asked for before any answer is awaited: one
            // round trip for all of them.
            let requests: Vec<_> = targets
                .iter()
                .map(|t| client.check_and_watch_stat(t))
                .collect();
            let mut watchers = Vec::with_capacity(requests.len());
            let mut moved = false;
            for request in requests {
                match bounded(self.response_timeout, request).await? {
                    Ok((Some(_), watcher)) => watchers.push(watcher),
                    Ok((None, _)) => moved = true,
                    Err(e) => return Err(self.failed(e, "watching a lock's queue").await),
                }
            }
            if moved {
                continue;
            }
            let inbox = self.inbox.clone();
            let waiter = *token;
            let task = tokio::spawn(async move {
                let mut fired = JoinSet::new();
                for watcher in watchers {
                    fired.spawn(watcher.changed());
                }
                let _ = fired.join_next().await;
                if let Some(inbox) = inbox.get().and_then(Weak::upgrade) {
                    inbox.wake(&waiter);
                }
            });
            match self.nodes().get_mut(token) {
                Some(node) => node.set_role(Role::Waiting {
                    watch: Some((task, Instant::now())),
                }),
                None => task.abort(),
            }
            return Ok(Attempt::Busy(None));
        }
        Ok(Attempt::Busy(None))
    }

    /// Marks this token's node held, with a lease of `lease` from now that
    /// this client enforces.
    fn hold(&self, token: &Token, lease: Duration) {
        let (tx, rx) = watch::channel(Instant::now() + lease);
        let path = {
            let mut nodes = self.nodes();
            let Some(node) = nodes.get_mut(token) else {
                return;
            };
            node.set_role(Role::Holding { lease_end: tx });
            node.path.clone()
        };
        let (nodes, session, timeout, token) = (
            Arc::downgrade(&self.nodes),
            self.session.clone(),
            self.response_timeout,
            *token,
        );
        tokio::spawn(async move {
            let mut rx = rx;
            loop {
                let end = *rx.borrow_and_update();
                tokio::select! {
                    () = tokio::time::sleep_until(end) => {
                        let Some(nodes) = nodes.upgrade() else { return };
                        let ended = {
                            let mut nodes = nodes.lock().unwrap_or_else(|p| p.into_inner());
                            let ended = matches!(
                                nodes.get(&token),
                                Some(Node { role: Role::Holding { lease_end }, path: p, .. })
                                    if *p == path && *lease_end.borrow() <= Instant::now()
                            );
                            if ended {
                                nodes.remove(&token);
                            }
                            ended
                        };
                        if ended {
                            tracing::debug!(node = %path, "lease ended; deleting the lock node");
                            discard_in(session, timeout, path).await;
                            return;
                        }
                    }
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// Deletes a node this client no longer wants, in the background,
    /// retrying until it is gone or its session ended: a node left behind
    /// would come to hold the lock for nobody.
    fn discard(&self, path: String) {
        tokio::spawn(discard_in(
            self.session.clone(),
            self.response_timeout,
            path,
        ));
    }

    async fn release_inner(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let client = self.session.client();
        let known = self.nodes().get(token).map(|n| {
            (
                n.path.clone(),
                matches!(n.role, Role::Holding { .. }),
                n.session == client.session_id(),
            )
        });
        let (path, holding) = match known {
            Some((_, _, false)) => {
                self.nodes().remove(token);
                return Ok(false);
            }
            Some((path, holding, true)) => (path, holding),
            None => {
                // An acquisition whose answer was lost: find its node by
                // name. The listing is sent after the creation, and a
                // session's requests run in order.
                let dir = self.dir(keys);
                let children =
                    match bounded(self.response_timeout, client.list_children(&dir)).await? {
                        Ok(children) => children,
                        Err(zk::Error::NoNode) => return Ok(false),
                        Err(e) => return Err(self.failed(e, "finding a lock node").await),
                    };
                let prefix = format!("{}-", token.as_str());
                match children.iter().find(|c| c.starts_with(&prefix)) {
                    Some(name) => (format!("{dir}/{name}"), true),
                    None => return Ok(false),
                }
            }
        };
        match bounded(self.response_timeout, client.delete(&path, None)).await {
            Ok(Ok(())) => {
                self.nodes().remove(token);
                Ok(holding)
            }
            Ok(Err(zk::Error::NoNode)) => {
                self.nodes().remove(token);
                Ok(false)
            }
            Ok(Err(e)) => {
                if !holding {
                    // A waiter's node must not stay in the queue.
                    self.nodes().remove(token);
                    self.discard(path);
                }
                // A holder's node is deleted when its lease ends.
                Err(self.failed(e, "deleting a lock node").await)
            }
            Err(e) => {
                if !holding {
                    self.nodes().remove(token);
                    self.discard(path);
                }
                Err(e)
            }
        }
    }

    async fn extend_inner(&self, token: &Token, lease: Duration) -> Result<bool> {
        let client = self.session.client();
        let path = {
            let mut nodes = self.nodes();
            match nodes.get(token) {
                Some(n) if n.session == client.session_id() => n.path.clone(),
                Some(_) => {
                    nodes.remove(token);
                    return Ok(false);
                }
                None => return Ok(false),
            }
        };
        let sent_at = Instant::now();
        let stat = self
            .call("checking a lock node", client.check_stat(&path))
            .await?;
        let mut nodes = self.nodes();
        match (stat, nodes.get(token)) {
            (
                Some(stat),
                Some(Node {
                    role: Role::Holding { lease_end },
                    path: p,
                    ..
                }),
            ) if stat.ephemeral_owner == client.session_id().0 && *p == path => {
                lease_end.send_replace(sent_at + lease);
                Ok(true)
            }
            _ => {
                nodes.remove(token);
                Ok(false)
            }
        }
    }

    async fn inspect_inner(&self, keys: &LockKeys) -> Result<Occupancy> {
        let capacity = match keys.resource {
            Resource::Lock => 1,
            Resource::Semaphore { permits } => permits,
        };
        let client = self.session.client();
        let (children, stat) =
            match bounded(self.response_timeout, client.get_children(&self.dir(keys))).await? {
                Ok(answer) => answer,
                Err(zk::Error::NoNode) => {
                    return Ok(Occupancy {
                        holders: 0,
                        capacity,
                        lease_left: None,
                        waiters: 0,
                        latest_fence: None,
                    });
                }
                Err(e) => return Err(self.failed(e, "listing a lock's queue").await),
            };
        let queued = u32::try_from(in_order(&children).len()).unwrap_or(u32::MAX);
        let holders = queued.min(capacity);
        Ok(Occupancy {
            holders,
            capacity,
            // A holder's lease is kept by its own client; the store knows
            // only that its session lives.
            lease_left: None,
            waiters: u64::from(queued - holders),
            // The zxid of the last change to the queue: no node of it was
            // created later.
            latest_fence: u64::try_from(stat.pzxid)
                .ok()
                .filter(|z| *z > 0 && !children.is_empty())
                .map(FencingToken::new),
        })
    }
}

impl LockBackend for ZooKeeperStore {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    fn max_lease(&self) -> Option<Duration> {
        Some(self.session_timeout())
    }

    fn attach(&self, inbox: Weak<dyn Inbox>) {
        let _ = self.inbox.set(inbox);
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>> {
        if place.is_some() && self.watching(token) {
            // A waiter's refresh while its watch stands: nothing ahead of
            // it changed (a change, or the session's end, fires the watch).
            return StoreFuture::ready(Ok(Attempt::Busy(None)));
        }
        StoreFuture::boxed(self.acquire_inner(keys, token, lease, place))
    }

    fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(self.release_inner(keys, token))
    }

    fn inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::boxed(self.inspect_inner(keys))
    }

    fn extend<'a>(
        &'a self,
        _keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(self.extend_inner(token, lease))
    }
}

/// The children of a lock's node in queue order (by sequence); names that
/// are not queue nodes are left out.
fn in_order(children: &[String]) -> Vec<&str> {
    let mut queue: Vec<(u64, &str)> = children
        .iter()
        .filter_map(|c| {
            let (_, sequence) = c.rsplit_once('-')?;
            Some((sequence.parse::<u64>().ok()?, c.as_str()))
        })
        .collect();
    queue.sort_unstable();
    queue.into_iter().map(|(_, c)| c).collect()
}

/// A key as one node name: characters outside a plain set (`/` among
/// them) are written `%XX`, byte by byte.
fn node_name(key: &str) -> String {
    let mut name = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_:.{}@+=,".contains(&b) {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name
}

/// Runs one request under `timeout`: the request's own result, or a
/// timeout error.
async fn bounded<T>(
    timeout: Duration,
    request: impl Future<Output = std::result::Result<T, zk::Error>>,
) -> Result<std::result::Result<T, zk::Error>> {
    tokio::time::timeout(timeout, request).await.map_err(|_| {
        Error::new(
            ErrorKind::Timeout,
            format!("no answer from zookeeper within {timeout:?}"),
        )
    })
}

/// Runs one request under `timeout` and maps its error.
async fn call<T>(
    session: &Session,
    timeout: Duration,
    what: &str,
    request: impl Future<Output = std::result::Result<T, zk::Error>>,
) -> Result<T> {
    match bounded(timeout, request).await? {
        Ok(v) => Ok(v),
        Err(e) => Err(failed(session, e, what).await),
    }
}

/// Maps a failed request's error; an expired session is renewed first, so
/// the next request runs in a new one.
async fn failed(session: &Session, e: zk::Error, what: &str) -> Error {
    if e == zk::Error::SessionExpired {
        let id = session.client().session_id();
        if let Err(renew) = session.renew(id).await {
            tracing::debug!(error = %renew, "renewing the zookeeper session failed");
        }
    }
    zk_error(e, what)
}

/// Deletes `path`, retrying until it is gone or its session ended.
async fn discard_in(session: Arc<Session>, timeout: Duration, path: String) {
    let mut pause = Duration::from_millis(20);
    let deadline = Instant::now() + session.timeout() * 2;
    loop {
        let client = session.client();
        match bounded(timeout, client.delete(&path, None)).await {
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) | Ok(Err(zk::Error::SessionExpired)) => return,
            Ok(Err(e)) => {
                tracing::debug!(node = %path, error = %e, "deleting a node failed; retrying")
            }
            Err(e) => tracing::debug!(node = %path, error = %e, "deleting a node failed; retrying"),
        }
        if Instant::now() >= deadline {
            tracing::warn!(node = %path, "gave up deleting a node; it goes with its session");
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_escape_what_zookeeper_would_read_as_a_path() {
        assert_eq!(
            node_name("lockguard:lock:{order:42}"),
            "lockguard:lock:{order:42}"
        );
        assert_eq!(node_name("a/b"), "a%2Fb");
        assert_eq!(node_name("100%"), "100%25");
        assert_eq!(node_name("é"), "%C3%A9");
    }

    #[test]
    fn the_queue_is_in_sequence_order() {
        let children = vec![
            "bbb-0000000012".to_owned(),
            "aaa-0000000003".to_owned(),
            "stray".to_owned(),
            "ccc-0000000100".to_owned(),
        ];
        assert_eq!(
            in_order(&children),
            ["aaa-0000000003", "bbb-0000000012", "ccc-0000000100"]
        );
    }
}
