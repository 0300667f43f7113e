//! The ZooKeeper store: locks, semaphores and read-write locks as
//! ZooKeeper's lock recipes.
//!
//! Each lock or semaphore is a container node, `{root}/{key}`, and each
//! acquisition (a holder, or a waiter in the queue) an ephemeral sequential
//! child of it named for its token, `{token}-{sequence}`, so a client finds
//! its own node again after a lost answer. In the order they were created
//! (their sequence numbers, or their creating zxids once a busy lock's
//! numbers run out: see `order`) the children are the queue: the first
//! `permits` hold, the rest wait, first come first served. A waiter watches
//! only what it waits for: a lock's waiter its predecessor; a semaphore's
//! first waiter the holders, and every later waiter its predecessor (which
//! touches its node when it comes to hold, so its successor moves on to
//! watching the holders). A release deletes one node and wakes one waiter.
//!
//! A read-write lock is laid out as Curator's `InterProcessReadWriteLock`:
//! one container node, one queue for both kinds, each node marked with its
//! mode, `{token}-__READ__{sequence}` or `{token}-__WRIT__{sequence}` (see
//! `admission`). A writer holds when it is first and watches its
//! predecessor; a reader holds when no writer is ahead of it and watches
//! the nearest writer ahead. So the readers at the head hold together, a
//! reader arriving while a writer waits queues behind it, and a writer's
//! release wakes exactly the run of readers behind it, who then all hold.
//!
//! The lease is the session: a holder's node lives while its session does,
//! so a holder whose process dies frees the lock when the ensemble expires
//! its session. A live holder keeps its lease like on any store: the
//! watchdog's renewals check (synced with the leader) that its node still
//! exists in its session, each renewal counts for at most two thirds of the
//! session timeout, and when a lease ends without renewal the holder's
//! client deletes the node. A lock's fencing token is the zxid that created
//! its node; a semaphore permit's, the zxid of its holder's touch.
//!
//! A read-write lock's hold's token is its node's creating zxid too, which
//! orders holds as the lock requires. A writer holds only once every node
//! created before it is gone, and no node created after it holds while it
//! is there: every hold before a write was of an earlier node, with a
//! smaller zxid. A reader holds only once every writer created before it
//! is gone, and a writer created after it waits for it: every write before
//! a read was of an earlier node. Readers holding together have distinct
//! nodes, so distinct tokens.
//!
//! A multi-lock whose keys are all free, with nobody queued, is taken in
//! one ZooKeeper transaction (see `multi`); its nodes share the
//! transaction's zxid as their fencing token.
//!
//! A queue place lives with the session; a waiter that gives up deletes it.
//!
//! Any client can list the locks held or awaited, from their nodes, and
//! end another client's hold by deleting its node, found by its token
//! (see `survey`); the holder's next renewal finds its node gone.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use zookeeper_client as zk;

use lockguard_core::store::net::{self, path_segment};
use lockguard_core::store::{
    AllOrNone, Holding, Inbox, LeaseEnd, LeaseEnds, LockKeys, LockSet, LockStore, Occupancy,
    Outcome, Place, Token, Waiting,
};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

mod admission;
mod data;
mod follow;
mod kept;
mod multi;
mod order;
mod rw;
mod session;
mod survey;

use self::admission::Admission;

pub(crate) use self::session::{Session, SessionOptions};
use crate::error::zk_error;

/// How long a waiter trusts a watch that has not fired before it lists
/// the queue again anyway.
const RECHECK: Duration = Duration::from_secs(5);

/// The most permits a semaphore may have on ZooKeeper: its first waiter
/// watches every holder.
const MAX_ZOOKEEPER_PERMITS: u32 = 1_000;

/// The ZooKeeper store of one client.
pub(crate) struct ZooKeeperStore {
    session: Arc<Session>,
    /// The persistent node holding every lock's container node.
    root: String,
    response_timeout: Duration,
    inbox: Arc<OnceLock<Weak<dyn Inbox>>>,
    /// This client's nodes, by the token they were created for.
    nodes: Arc<Nodes>,
    /// The ends of the holds' leases.
    lease_ends: Arc<LeaseEnds>,
    /// The nodes this client is updating, one update at a time each (see
    /// `data.rs`).
    turns: lockguard_core::store::Turns,
}

/// The nodes of a store, shared with its tasks.
type Nodes = Mutex<HashMap<Token, Node>>;

impl fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("root", &self.root)
            .field("session", &self.session.client().session_id())
            .finish_non_exhaustive()
    }
}

impl Drop for ZooKeeperStore {
    fn drop(&mut self) {
        // The task that ends holds at their lease ends goes with the store.
        self.lease_ends.close();
        // The session closes, unless a lock kept past its release may
        // still be held by one of its nodes.
        self.session.linger();
    }
}

/// One of this client's nodes.
#[derive(Debug)]
struct Node {
    /// Its path; `None` while the outcome of its creation is unknown (the
    /// request may still run): then it is found by its token's prefix.
    path: Option<String>,
    /// The zxid that created it, when known.
    created: Option<u64>,
    /// The session that created it: the node dies with it.
    session: zk::SessionId,
    role: Role,
}

#[derive(Debug)]
enum Role {
    /// In the queue. `watch` waits for what this waiter waits on, and
    /// wakes it once it has set its `fired` state; while that is
    /// [`UNFIRED`], nothing has changed ahead of it. It was set at the
    /// instant it holds.
    Waiting { watch: Option<Watch> },
    /// Holding. The lease ends at `end`; this client deletes the node then
    /// (see `expire`), unless a renewal replaced it.
    Holding { end: LeaseEnd },
}

/// A waiter's standing watch.
#[derive(Debug)]
struct Watch {
    task: JoinHandle<()>,
    set: Instant,
    /// [`UNFIRED`], [`CHANGED`] or [`INTERRUPTED`].
    fired: Arc<AtomicU8>,
}

/// A watch that has not fired.
const UNFIRED: u8 = 0;
/// A watch fired by a change of a node it watched: the server that told
/// of it had applied that write.
const CHANGED: u8 = 1;
/// A watch that ended without a node event (the session's state changed).
const INTERRUPTED: u8 = 2;

impl Node {
    /// Changes the node's role, stopping the watch of the earlier one.
    fn set_role(&mut self, role: Role) {
        if let Role::Waiting { watch: Some(w) } = std::mem::replace(&mut self.role, role) {
            w.task.abort();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Role::Waiting { watch: Some(w) } = &self.role {
            w.task.abort();
        }
    }
}

/// What this client knows of a token's node.
enum Known {
    /// A node whose path is known.
    Node {
        path: String,
        /// Whether it holds.
        holding: bool,
        /// Its creating zxid, when known.
        created: Option<u64>,
        /// Whether it waits woken by a change ahead of it: its watch fired
        /// with a node event.
        woken: bool,
    },
    /// A creation whose outcome is unknown.
    Unknown,
}

impl ZooKeeperStore {
    /// A store working in `session`, under the persistent node `root`
    /// (created if missing). Creating the root is part of connecting: it
    /// may take as long as `connect_timeout` (a server just started
    /// answers its first requests slowly), and the requests after it
    /// `response_timeout`.
    pub(crate) async fn new(
        session: Session,
        root: String,
        (connect_timeout, response_timeout): (Duration, Duration),
    ) -> Result<Arc<Self>> {
        let (session, nodes) = (Arc::new(session), Arc::new(Mutex::new(HashMap::new())));
        let lease_ends = LeaseEnds::new({
            let (nodes, session) = (Arc::downgrade(&nodes), Arc::downgrade(&session));
            move |token, now| expire(&nodes, &session, response_timeout, token, now)
        });
        let store = Arc::new(Self {
            session,
            root,
            response_timeout,
            inbox: Arc::new(OnceLock::new()),
            nodes,
            lease_ends,
            turns: lockguard_core::store::Turns::default(),
        });
        let client = store.session.client();
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let setup = connect_timeout.max(response_timeout);
        match bounded(setup, client.mkdir(&store.root, &options)).await? {
            Ok(()) => {}
            Err(e) => return Err(zk_error(e, "creating the root node")),
        }
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

    /// The container node of a lock or semaphore.
    fn dir(&self, keys: &LockKeys) -> String {
        format!("{}/{}", self.root, path_segment(keys.id()))
    }

    /// Maps the error of a request `client` sent. When its session expired,
    /// a new one is opened in the background for the next request (never
    /// in place of a newer, live session).
    fn failed(&self, client: &zk::Client, e: zk::Error, what: &str) -> Error {
        if e == zk::Error::SessionExpired {
            Session::renew_later(&self.session, client.session_id());
        }
        zk_error(e, what)
    }

    /// Says an outage for what it is: a request that went unanswered
    /// while the client was not connected (reconnecting within its session,
    /// or opening a new one) failed because the store was unreachable, a
    /// transient state a wait rides out, not because a server was slow
    /// to answer a request it had: core's one rule for an unreachable
    /// server ([`net::unreachable`](fn@net::unreachable)), applied while the session
    /// reconnects.
    fn outage<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(e) if !connected(&self.session.client()) => Err(net::unreachable(e)),
            result => result,
        }
    }

    /// Creates this token's node in `dir` (and `dir` when missing), named
    /// with `mark` before its sequence number (see [`Admission::mark`]):
    /// its path and creating zxid.
    async fn create(
        &self,
        client: &zk::Client,
        dir: &str,
        token: &Token,
        mark: &str,
    ) -> Result<(String, u64)> {
        let node = format!("{dir}/{}-{mark}", token.as_str());
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        // The container may be removed by the server between our creating
        // it and our node's: try again then.
        for _ in 0..3 {
            match bounded(self.response_timeout, client.create(&node, &[], &ephemeral)).await? {
                Ok((stat, sequence)) => {
                    return Ok((format!("{node}{sequence}"), zxid(stat.czxid, &node)?));
                }
                Err(zk::Error::NoNode) => {
                    match bounded(self.response_timeout, client.create(dir, &[], &container))
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(self.failed(client, e, "creating a lock node")),
                    }
                }
                Err(e) => return Err(self.failed(client, e, "creating a queue node")),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("zookeeper removed {dir} each time a node was created in it"),
        ))
    }

    /// This token's node as this client knows it in `session`; a node of
    /// an ended session is forgotten.
    fn known(&self, token: &Token, session: zk::SessionId) -> Option<Known> {
        let mut nodes = self.nodes();
        let node = nodes.get(token)?;
        if node.session != session {
            nodes.remove(token);
            return None;
        }
        Some(match &node.path {
            Some(path) => Known::Node {
                path: path.clone(),
                holding: matches!(node.role, Role::Holding { .. }),
                created: node.created,
                woken: matches!(&node.role, Role::Waiting { watch: Some(w) }
                    if w.fired.load(Ordering::Acquire) == CHANGED),
            },
            None => Known::Unknown,
        })
    }

    /// The path of this token's node when it holds in `session`.
    fn held(&self, token: &Token, session: zk::SessionId) -> Option<String> {
        self.held_at(token, session).map(|(path, _)| path)
    }

    /// The path of this token's node when it holds in `session`, and the
    /// zxid that created it when known.
    fn held_at(&self, token: &Token, session: zk::SessionId) -> Option<(String, Option<u64>)> {
        match self.known(token, session) {
            Some(Known::Node {
                path,
                holding: true,
                created,
                ..
            }) => Some((path, created)),
            _ => None,
        }
    }

    /// Records what is known of this token's node.
    fn record(
        &self,
        token: &Token,
        session: zk::SessionId,
        path: Option<String>,
        created: Option<u64>,
    ) {
        let mut nodes = self.nodes();
        match nodes.get_mut(token) {
            Some(node) if node.session == session => {
                node.path = path;
                node.created = created;
            }
            _ => {
                nodes.insert(
                    *token,
                    Node {
                        path,
                        created,
                        session,
                        role: Role::Waiting { watch: None },
                    },
                );
            }
        }
    }

    /// This token's nodes in `dir` (one, unless creations whose answers
    /// were lost made more): their names.
    ///
    /// The listing is synced with the leader first. A creation whose
    /// answer was lost may have been committed through a server this
    /// client has since left; the server it reconnected to may not have
    /// applied it yet (the session's order holds only within one
    /// connection), and a listing from that past would miss the node,
    /// which would then queue or hold for nobody until the session ends.
    async fn find(&self, client: &zk::Client, dir: &str, token: &Token) -> Result<Vec<String>> {
        let prefix = format!("{}-", token.as_str());
        match bounded(self.response_timeout, synced_children(client, dir)).await? {
            Ok(children) => Ok(children
                .into_iter()
                .filter(|c| c.starts_with(&prefix))
                .collect()),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.failed(client, e, "finding a lock node")),
        }
    }

    /// The queue nodes among `children`, the children of the lock node
    /// `dir`, in queue order: by their sequence numbers while those tell
    /// it, else by their creating zxids, read in one pipelined round trip
    /// (see [`order`]). A node gone before its zxid was read is left out.
    async fn in_order<'c>(
        &self,
        client: &zk::Client,
        dir: &str,
        children: &'c [String],
    ) -> Result<Vec<&'c str>> {
        let nodes = match order::by_number(children) {
            order::Order::Numbered(queue) => return Ok(queue),
            order::Order::Unnumbered(nodes) => nodes,
        };
        let requests: Vec<_> = nodes
            .iter()
            .map(|n| client.check_stat(&format!("{dir}/{n}")))
            .collect();
        let mut created = Vec::with_capacity(nodes.len());
        for (node, request) in nodes.into_iter().zip(requests) {
            match bounded(self.response_timeout, request).await? {
                Ok(Some(stat)) => created.push((stat.czxid, node)),
                Ok(None) => {}
                Err(e) => return Err(self.failed(client, e, "reading a lock's queue")),
            }
        }
        Ok(order::by_creation(created))
    }

    /// Whether this token waits with a recent watch that has not fired:
    /// nothing ahead of it changed since it looked. A watch older than
    /// [`RECHECK`] is looked past, the safety net for a signal lost.
    fn watching(&self, token: &Token) -> bool {
        let nodes = self.nodes();
        matches!(
            nodes.get(token),
            Some(Node { role: Role::Waiting { watch: Some(w) }, session, .. })
                if w.fired.load(Ordering::Acquire) == UNFIRED
                    && w.set.elapsed() < RECHECK
                    && *session == self.session.client().session_id()
        )
    }

    /// One attempt of `token` at `keys` under `admission`'s rule, as
    /// [`LockStore::acquire`] makes it, for a lock, a permit or a read-write hold.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        admission: Admission,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        if place.is_some() && self.watching(token) {
            // A waiter's refresh while its watch stands: nothing ahead of
            // it changed (a change, or the session's end, fires the watch).
            return Ok(Outcome::Busy(None));
        }

        let attempt = self
            .acquire_inner(keys, admission, token, lease, place)
            .await;
        self.outage(attempt)
    }

    /// One attempt of `token` at `keys` under `admission`'s rule: a lock's,
    /// a semaphore's, or a read-write lock's reader's or writer's.
    async fn acquire_inner(
        &self,
        keys: &Arc<LockKeys>,
        admission: Admission,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        let dir = self.dir(keys);
        let client = self.session.client();
        let session = client.session_id();
        // A listing right after our creation is as new as the creation (a
        // write, ordered by the leader), and one right after our watch
        // fired with a node event is as new as the write that fired it
        // (the server tells of a change once it has applied it); any other
        // one is synced first, so that a server cut off from the ensemble
        // cannot answer it from a past that no longer holds.
        let mut fresh = false;
        let (path, created) = match self.known(token, session) {
            Some(Known::Node { holding: true, .. }) => {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    "a token already holding asked to acquire again",
                ));
            }
            Some(Known::Node {
                path,
                created,
                woken,
                ..
            }) => {
                fresh = woken;
                (path, created)
            }
            known => {
                let mut found = Vec::new();
                if matches!(known, Some(Known::Unknown)) {
                    found = self.find(&client, &dir, token).await?;
                }
                match found.as_slice() {
                    [name, ..] => {
                        for extra in &found[1..] {
                            self.discard(format!("{dir}/{extra}"));
                        }
                        let path = format!("{dir}/{name}");
                        self.record(token, session, Some(path.clone()), None);
                        (path, None)
                    }
                    [] => {
                        // Until its answer comes, the creation's outcome is
                        // unknown: a release finds the node by name.
                        self.record(token, session, None, None);
                        let (path, created) =
                            self.create(&client, &dir, token, admission.mark()).await?;
                        self.record(token, session, Some(path.clone()), Some(created));
                        fresh = true;
                        (path, Some(created))
                    }
                }
            }
        };
        let name = path.rsplit_once('/').map_or(path.as_str(), |(_, n)| n);
        // A node ahead may go between our listing and our watch: look again.
        for _ in 0..8 {
            let listed = if fresh {
                bounded(self.response_timeout, client.list_children(&dir)).await?
            } else {
                bounded(self.response_timeout, synced_children(&client, &dir)).await?
            };
            fresh = false;
            let children = match listed {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(self.failed(&client, e, "listing a lock's queue")),
            };
            let queue = self.in_order(&client, &dir, &children).await?;
            let Some(rank) = queue.iter().position(|n| *n == name) else {
                // Our node is gone: its session ended. The next attempt
                // queues again in the new one.
                self.nodes().remove(token);
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "the zookeeper session holding this queue place ended",
                ));
            };
            let Some(waits) = admission.waits(&queue, rank) else {
                // A lock released before its `at_least` passed is kept by
                // a node of its own (see `kept`) until then.
                if children.iter().any(|c| c == kept::KEPT)
                    && let Some((left, watcher)) = self.kept_for(&client, &dir, &path).await?
                {
                    if place.is_none() {
                        self.nodes().remove(token);
                        self.discard(path);
                    } else {
                        // Woken when the kept time ends, or sooner when
                        // `kept` goes (an operator's forced release).
                        self.arm(token, vec![watcher], Some(left));
                    }
                    return Ok(Outcome::Busy(Some(left)));
                }
                return self
                    .take(&client, keys, token, (&path, created), admission, lease)
                    .await;
            };
            if place.is_none() {
                // Never queue without a place: give the node up.
                self.nodes().remove(token);
                self.discard(path);
                return Ok(Outcome::Busy(None));
            }
            // A lock's or a semaphore's first waiter watches the holders,
            // each later one its predecessor (a lock's first waiter: both
            // at once); a writer its predecessor; a reader the nearest
            // writer ahead.
            let targets: Vec<String> = waits.on.iter().map(|n| format!("{dir}/{n}")).collect();
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
                    // A predecessor that has touched its node holds a
                    // permit: our listing was older than its touch.
                    Ok((Some(stat), watcher)) if !waits.predecessor || stat.data_length == 0 => {
                        watchers.push(watcher);
                    }
                    Ok(_) => moved = true,
                    Err(e) => return Err(self.failed(&client, e, "watching a lock's queue")),
                }
            }
            if moved {
                continue;
            }
            self.arm(token, watchers, None);
            return Ok(Outcome::Busy(None));
        }
        Ok(Outcome::Busy(None))
    }

    /// Takes the lock, permit or read-write hold `token`'s node at `path`
    /// came to hold. A semaphore holder touches its node first, which wakes
    /// the waiter watching it (now first among the waiters) and draws its
    /// fencing token, the touch's zxid, so permits' tokens follow the order
    /// they were taken in. A lock's token, and a read-write lock's hold's,
    /// is its node's creating zxid: its holders come in creation order.
    async fn take(
        &self,
        client: &zk::Client,
        keys: &Arc<LockKeys>,
        token: &Token,
        (path, created): (&str, Option<u64>),
        admission: Admission,
        lease: Duration,
    ) -> Result<Outcome> {
        let fence = if admission.touches() {
            match bounded(self.response_timeout, client.set_data(path, b"held", None)).await? {
                Ok(stat) => zxid(stat.mzxid, path)?,
                Err(e) => return Err(self.failed(client, e, "taking a permit")),
            }
        } else if let Some(created) = created {
            created
        } else {
            // A node adopted after a lost answer: its creation is read.
            match bounded(self.response_timeout, client.check_stat(path)).await? {
                Ok(Some(stat)) => zxid(stat.czxid, path)?,
                Ok(None) => {
                    self.nodes().remove(token);
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "the zookeeper session holding this lock ended",
                    ));
                }
                Err(e) => return Err(self.failed(client, e, "taking a lock")),
            }
        };
        self.hold(token, lease);
        Ok(Outcome::Acquired {
            fence: FencingToken::new(fence),
            keys: keys.clone(),
        })
    }

    /// Sets the watch of a waiting token: when any of `watchers` fires, the
    /// waiter is woken to look again.
    fn arm(&self, token: &Token, watchers: Vec<zk::OneshotWatcher>, until: Option<Duration>) {
        let inbox = self.inbox.clone();
        let waiter = *token;
        let fired = Arc::new(AtomicU8::new(UNFIRED));
        let flag = fired.clone();
        let task = tokio::spawn(async move {
            // One watch (a lock's waiter's) is awaited here; several each
            // in a task of their own, the first to fire ending the wait.
            let changed = async move {
                match <[_; 1]>::try_from(watchers) {
                    Ok([watcher]) => Some(watcher.changed().await),
                    Err(watchers) => {
                        let mut changes = JoinSet::new();
                        for watcher in watchers {
                            changes.spawn(watcher.changed());
                        }
                        changes.join_next().await.and_then(Result::ok)
                    }
                }
            };
            // A watch with an end (a kept lock's time left) fires then
            // too; the waiter looks again with a synced listing.
            let event = match until {
                Some(left) => tokio::time::timeout(left, changed).await.ok().flatten(),
                None => changed.await,
            };
            let state = match event {
                Some(event) if event.event_type != zk::EventType::Session => CHANGED,
                _ => INTERRUPTED,
            };
            flag.store(state, Ordering::Release);
            if let Some(inbox) = inbox.get().and_then(Weak::upgrade) {
                inbox.wake(&waiter);
            }
        });
        match self.nodes().get_mut(token) {
            Some(node) => node.set_role(Role::Waiting {
                watch: Some(Watch {
                    task,
                    set: Instant::now(),
                    fired,
                }),
            }),
            None => task.abort(),
        }
    }

    /// Marks this token's node held, with a lease of `lease` from now that
    /// this client enforces: it deletes the node when it ends.
    fn hold(&self, token: &Token, lease: Duration) {
        let mut nodes = self.nodes();
        if let Some(node) = nodes.get_mut(token) {
            node.set_role(Role::Holding {
                end: self.lease_ends.schedule(*token, Instant::now() + lease),
            });
        }
    }

    /// Deletes a node this client no longer wants, in the background,
    /// retrying until it is gone or its session ended: a node left behind
    /// would come to hold the lock for nobody.
    fn discard(&self, path: String) {
        tokio::spawn(discard_in(
            Arc::downgrade(&self.session),
            self.response_timeout,
            Leftover::Node(path),
        ));
    }

    async fn release_inner(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let client = self.session.client();
        let dir = self.dir(keys);
        let (path, holding) = match self.known(token, client.session_id()) {
            Some(Known::Node { path, holding, .. }) => (path, holding),
            // An acquisition whose answer was lost (or never recorded), or
            // a node of an ended session (gone with it): find its nodes by
            // name, in a listing synced with the leader (see `find`).
            _ => {
                let sweep = self.sweep(&client, &dir, token).await;
                self.nodes().remove(token);
                return match sweep {
                    // Every node of an ended session went with it.
                    Err(_) if ended(&client) => Ok(false),
                    Err(e) => {
                        tokio::spawn(discard_in(
                            Arc::downgrade(&self.session),
                            self.response_timeout,
                            Leftover::Token(dir, *token),
                        ));
                        Err(e)
                    }
                    swept => swept,
                };
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
            Ok(Err(zk::Error::SessionExpired)) => {
                // The node went with its session: no longer held.
                Session::renew_later(&self.session, client.session_id());
                self.nodes().remove(token);
                Ok(false)
            }
            failed => {
                if !holding {
                    // A waiter's node must not stay in the queue. (A
                    // holder's is deleted when its lease ends.)
                    self.nodes().remove(token);
                    self.discard(path);
                }
                Err(match failed {
                    Ok(Err(e)) => self.failed(&client, e, "deleting a lock node"),
                    Err(e) => e,
                    Ok(Ok(())) => unreachable!("handled above"),
                })
            }
        }
    }

    /// Deletes every node of `token` in `dir`; whether there was one.
    async fn sweep(&self, client: &zk::Client, dir: &str, token: &Token) -> Result<bool> {
        let found = self.find(client, dir, token).await?;
        let deletes: Vec<_> = found
            .iter()
            .map(|name| client.delete(&format!("{dir}/{name}"), None))
            .collect();
        for delete in deletes {
            match bounded(self.response_timeout, delete).await? {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.failed(client, e, "deleting a lock node")),
            }
        }
        Ok(!found.is_empty())
    }

    async fn extend_inner(&self, token: &Token, lease: Duration) -> Result<bool> {
        let client = self.session.client();
        let Some(path) = self.held(token, client.session_id()) else {
            return Ok(false);
        };
        let sent_at = Instant::now();
        // Synced first: a server cut off from the ensemble must not vouch
        // for a session the leader may have expired.
        let sync = client.sync(&path);
        let check = client.check_stat(&path);
        let checked = match bounded(self.response_timeout, sync).await? {
            Ok(()) => bounded(self.response_timeout, check).await?,
            Err(e) => Err(e),
        };
        let stat = match checked {
            // The node went with its session: the lock is lost, which is
            // the answer (not an outage to wait out).
            Err(zk::Error::SessionExpired) => {
                Session::renew_later(&self.session, client.session_id());
                self.nodes().remove(token);
                return Ok(false);
            }
            checked => checked.map_err(|e| self.failed(&client, e, "checking a lock node"))?,
        };
        let mut nodes = self.nodes();
        match (stat, nodes.get_mut(token)) {
            (
                Some(stat),
                Some(Node {
                    role: Role::Holding { end },
                    path: Some(p),
                    ..
                }),
            ) if stat.ephemeral_owner == client.session_id().0 && *p == path => {
                *end = self.lease_ends.schedule(*token, sent_at + lease);
                Ok(true)
            }
            _ => {
                nodes.remove(token);
                Ok(false)
            }
        }
    }

    /// The children of the lock node `dir` and its stat, as one answer
    /// tells them, from the leader's state (a `sync` sent with the
    /// listing: a member behind the leader would answer from its past, and
    /// `Leader::current` could say nobody leads after a campaign had
    /// returned); `None` when there is no such node. The session's later
    /// reads come after it.
    async fn listing(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<(Vec<String>, zk::Stat)>> {
        let sync = client.sync(dir);
        let listing = client.get_children(dir);
        match bounded(self.response_timeout, sync).await? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(self.failed(client, e, "syncing with the leader")),
        }
        match bounded(self.response_timeout, listing).await? {
            Ok(answer) => Ok(Some(answer)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.failed(client, e, "listing a lock's queue")),
        }
    }

    async fn inspect_inner(&self, keys: &LockKeys) -> Result<Occupancy> {
        let capacity = keys.resource().permits();
        let client = self.session.client();
        let dir = self.dir(keys);
        let Some((children, stat)) = self.listing(&client, &dir).await? else {
            return Ok(Occupancy::new(0, capacity, None, 0, None));
        };
        let queue = self.in_order(&client, &dir, &children).await?;
        let queued = u32::try_from(queue.len()).unwrap_or(u32::MAX);
        // A lock released before its `at_least` passed is held by its
        // `kept` node, and every node of the queue waits.
        let kept = if children.iter().any(|c| c == kept::KEPT) {
            self.kept_left(&client, &dir).await?
        } else {
            None
        };
        if let Some(left) = kept {
            return Ok(Occupancy::new(
                1,
                capacity,
                Some(left),
                u64::from(queued),
                (stat.pzxid > 0).then(|| FencingToken::new(u64::try_from(stat.pzxid).unwrap_or(0))),
            ));
        }
        let holders = queued.min(capacity);
        // The zxid of the last change to the queue: no node of it was
        // created later. A semaphore's tokens are its holders' touches,
        // which may be later still.
        let mut latest = u64::try_from(stat.pzxid).unwrap_or(0);
        if capacity > 1 {
            let requests: Vec<_> = queue
                .iter()
                .take(holders as usize)
                .map(|n| client.check_stat(&format!("{dir}/{n}")))
                .collect();
            for request in requests {
                match bounded(self.response_timeout, request).await? {
                    Ok(Some(s)) => latest = latest.max(u64::try_from(s.mzxid).unwrap_or(0)),
                    Ok(None) => {}
                    Err(e) => return Err(self.failed(&client, e, "reading a permit")),
                }
            }
        }
        Ok(Occupancy::new(
            holders,
            capacity,
            // A holder's lease is kept by its own client; the store knows
            // only that its session lives.
            None,
            u64::from(queued - holders),
            (latest > 0 && !queue.is_empty()).then(|| FencingToken::new(latest)),
        ))
    }
}

impl LockStore for ZooKeeperStore {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    fn max_permits(&self) -> u32 {
        MAX_ZOOKEEPER_PERMITS
    }

    /// Two thirds of the session timeout, as ZooKeeper's own client gives
    /// up on a connection after two thirds of it: the rest is the margin for
    /// how late the leader may learn that a server heard from this client
    /// (servers report their sessions' activity to the leader once a tick).
    fn max_lease(&self) -> Option<Duration> {
        Some(self.session_timeout() * 2 / 3)
    }

    fn attach(&self, inbox: Weak<dyn Inbox>) {
        let _ = self.inbox.set(inbox);
    }

    fn read_write(&self) -> bool {
        true
    }

    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        let admission = match keys.rw_mode() {
            None => Admission::of(keys),
            Some(mode) => Admission::rw(mode),
        };
        self.attempt(keys, admission, token, lease, place).await
    }

    async fn acquire_all(&self, set: LockSet<'_>, lease: Duration) -> Result<Option<AllOrNone>> {
        if !self.takes_at_once(set) {
            return Ok(None);
        }
        let answer = self
            .acquire_all_inner(set.keys(), set.tokens(), lease)
            .await;
        self.outage(answer)
    }

    /// A hold's node is found by its token, whatever its mode.
    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.outage(self.release_inner(keys, token).await)
    }

    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        let answer = match keys.rw_mode() {
            None => self.inspect_inner(keys).await,
            Some(_) => self.rw_inspect_inner(keys).await,
        };
        self.outage(answer)
    }

    /// The lock nodes whose identities start with `prefix`, and their
    /// queues (see `survey`).
    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        self.outage(self.survey_inner(prefix).await)
    }

    /// The holder's node, found by its token and deleted: its own client
    /// remembers the node, this one finds it (see `survey`).
    async fn evict(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.outage(self.evict_inner(keys, token).await)
    }

    /// A lock's hold becomes a persistent node that keeps it past this
    /// client's session (see `kept`); a read-write lock's hold is kept by
    /// its lease.
    async fn release_later(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> Result<bool> {
        let asked = std::time::Instant::now();
        let answer = match keys.rw_mode() {
            None => self.release_later_inner(keys, token, keep).await,
            Some(_) => self.extend_inner(token, keep).await,
        };
        if answer.is_err() {
            // The hold's node may still hold the lock (the keep never
            // reached the ensemble, or went with a connection): it must
            // outlive a close of this client until the kept time ends.
            self.session.keep_until(asked + keep);
        }
        self.outage(answer)
    }

    async fn extend(&self, _keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        self.outage(self.extend_inner(token, lease).await)
    }
}

/// A zxid as a fencing token: positive on every real ensemble.
fn zxid(zxid: i64, path: &str) -> Result<u64> {
    u64::try_from(zxid).ok().filter(|z| *z > 0).ok_or_else(|| {
        Error::new(
            ErrorKind::Protocol,
            format!("zookeeper reported zxid {zxid} for {path}"),
        )
    })
}

/// Runs one request under `timeout`: the request's own result, or core's
/// timeout error ([`net::within`]).
async fn bounded<T, E>(
    timeout: Duration,
    request: impl Future<Output = std::result::Result<T, E>>,
) -> Result<std::result::Result<T, E>> {
    let answer = tokio::time::timeout(timeout, request).await.map(Ok);
    net::within(timeout, "zookeeper", || "a request".to_owned(), answer)
}

/// Whether `client` is connected to a server of its session.
fn connected(client: &zk::Client) -> bool {
    matches!(
        client.state(),
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    )
}

/// Whether `client`'s session has ended, expired by the ensemble or
/// closed: its ephemeral nodes are gone.
fn ended(client: &zk::Client) -> bool {
    matches!(
        client.state(),
        zk::SessionState::Expired | zk::SessionState::Closed
    )
}

/// The children of `dir`, listed after a `sync` of it: as new as the
/// leader's state when the sync was sent. Both requests are sent at once
/// (one round trip); a session's requests are answered in order.
async fn synced_children(
    client: &zk::Client,
    dir: &str,
) -> std::result::Result<Vec<String>, zk::Error> {
    let sync = client.sync(dir);
    let list = client.list_children(dir);
    match sync.await {
        Ok(()) | Err(zk::Error::NoNode) => list.await,
        Err(e) => Err(e),
    }
}

/// What a background cleanup deletes: one node, or every node of a token
/// in a lock's node.
#[derive(Debug)]
enum Leftover {
    Node(String),
    Token(String, Token),
}

/// Ends `token`'s hold, whose lease ended by `now` unless it was renewed
/// or released since: its node is deleted in the background.
fn expire(
    nodes: &Weak<Nodes>,
    session: &Weak<Session>,
    timeout: Duration,
    token: Token,
    now: Instant,
) {
    let Some(nodes) = nodes.upgrade() else {
        return;
    };
    let node = {
        let mut map = nodes.lock().unwrap_or_else(|p| p.into_inner());
        let ended = matches!(
            map.get(&token),
            Some(Node { role: Role::Holding { end }, path: Some(_), .. }) if end.at() <= now
        );
        if ended { map.remove(&token) } else { None }
    };
    if let Some(path) = node.as_ref().and_then(|n| n.path.clone()) {
        tracing::debug!(node = %path, "lease ended; deleting the lock node");
        tokio::spawn(discard_in(session.clone(), timeout, Leftover::Node(path)));
    }
}

/// Deletes `leftover`, retrying until it is gone, its session ended, or the
/// store is dropped (its session then closes, and its nodes go with it). A
/// failure no retry mends by itself (the node's ACL refuses the session)
/// is logged as a warning, once: the node stays until its deletion goes
/// through or the session ends.
async fn discard_in(session: Weak<Session>, timeout: Duration, leftover: Leftover) {
    let mut pause = Duration::from_millis(20);
    let mut warned = false;
    loop {
        let Some(client) = session.upgrade().map(|s| s.client()) else {
            return;
        };
        let paths = match &leftover {
            Leftover::Node(path) => Ok(Ok(vec![path.clone()])),
            Leftover::Token(dir, token) => {
                let prefix = format!("{}-", token.as_str());
                // Synced, as in `find`: a node missed here lives on.
                bounded(timeout, synced_children(&client, dir))
                    .await
                    .map(|r| {
                        r.map(|children| {
                            children
                                .into_iter()
                                .filter(|c| c.starts_with(&prefix))
                                .map(|c| format!("{dir}/{c}"))
                                .collect()
                        })
                    })
            }
        };
        let outcome = match paths {
            Ok(Ok(paths)) => {
                let mut outcome = Ok(Ok(()));
                for path in paths {
                    match bounded(timeout, client.delete(&path, None)).await {
                        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {}
                        other => outcome = other,
                    }
                }
                outcome
            }
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode | zk::Error::SessionExpired)) => return,
            Ok(Err(e)) => {
                let e = zk_error(e, "deleting a node");
                if !e.is_retryable() && !std::mem::replace(&mut warned, true) {
                    tracing::warn!(?leftover, error = %e, "deleting a node failed, and retrying will not mend it: the node stays until its deletion goes through (retried every 2 s) or the session ends")
                } else {
                    tracing::debug!(?leftover, error = %e, "deleting a node failed; retrying")
                }
            }
            Err(e) => tracing::debug!(?leftover, error = %e, "deleting a node failed; retrying"),
        }
        drop(client);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
