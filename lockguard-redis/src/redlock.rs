//! Redlock: locks and semaphores over N independent Redis masters.
//!
//! Every operation goes to all nodes in parallel, each bounded by the
//! per-node timeout (tens of milliseconds), and returns as soon as a quorum
//! (N/2 + 1) has answered one way or the quorum has become impossible; the
//! other requests finish in the background. A lock is taken when a quorum
//! granted it and its validity (lease − elapsed − drift, checked by the
//! caller) is positive; otherwise it is released on every node.
//!
//! Fencing tokens: each node counts acquisitions of the key; the token is
//! the highest count among the quorum, and the quorum's counters behind it
//! are raised to it before the lock is handed out. Any later quorum shares
//! at least one node with this one, so as long as a majority of nodes keeps
//! its data (no restart without persistence of a majority), every later
//! token is strictly greater.
//!
//! Semaphores: N permits are N slot locks, each taken with the Redlock
//! quorum, so two holders can never share a slot and at most N hold a
//! permit at once. (Counting holders per node, as on a single Redis, would
//! let N + 1 holders each find a majority.) Permits hold at once and their
//! slots share the semaphore's sequences, so the highest count of two
//! quorums can be the same value: a permit's token is claimed instead
//! (see `claim_fences`), so that no two permits share one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::layout::RedisLockKeys as _;
use crate::layout::RedlockLine;
use crate::options::RedisOptions;
use crate::store::RedisStore;
use crate::wake::Subscriber;
use lockguard_core::FencingToken;
use lockguard_core::store::Token;
use lockguard_core::store::{DataStore, LockStore, Outcome, Place, Store, Waiting};
use lockguard_core::store::{LockKeys, Resource};
use lockguard_core::{Error, ErrorKind, Result};

/// The most permits a semaphore may have on a Redlock client: each permit
/// is a slot lock tried in turn, so the count bounds an attempt's rounds.
pub const MAX_REDLOCK_PERMITS: u32 = 64;

/// The default per-node timeout of a Redlock client.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// N independent Redis masters.
#[derive(Debug)]
pub(crate) struct RedlockStore {
    nodes: Vec<Arc<RedisStore>>,
    /// Whether each node's last request got an answer. A round does not
    /// wait for a node that failed last time (it counts as failed unless it
    /// answers before the outcome is decided), so a dead node costs a quorum
    /// decision nothing, not its timeout; its next answer clears the flag.
    healthy: Arc<Vec<AtomicBool>>,
}

/// How a round over the nodes ended.
#[derive(Debug, Default)]
struct Tally<T> {
    ok: Vec<(usize, T)>,
    errors: Vec<Error>,
    answered: usize,
}

impl RedlockStore {
    pub(crate) fn new(nodes: Vec<RedisStore>) -> Self {
        Self {
            healthy: Arc::new(nodes.iter().map(|_| AtomicBool::new(true)).collect()),
            nodes: nodes.into_iter().map(Arc::new).collect(),
        }
    }

    /// Nodes not yet heard from in this round that failed their last
    /// request. None when so many failed that no quorum is possible without
    /// them: then the round waits for real answers (bounded by the node
    /// timeout), which paces callers that retry and notices recovery.
    fn suspects(&self, answered: &[bool]) -> usize {
        let failing = self
            .healthy
            .iter()
            .filter(|h| !h.load(Ordering::Relaxed))
            .count();
        if failing > self.nodes.len() - self.quorum() {
            return 0;
        }
        answered
            .iter()
            .zip(self.healthy.iter())
            .filter(|(a, h)| !**a && !h.load(Ordering::Relaxed))
            .count()
    }

    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Sends `op` to every node at once and gathers answers until `done`
    /// says the outcome is decided (or every node answered). Requests still
    /// in flight finish in the background: nothing a node was asked to do is
    /// cancelled half-way.
    async fn round<T, F, Fut>(&self, op: F, done: impl Fn(&Tally<T>, usize) -> bool) -> Tally<T>
    where
        T: Send + 'static,
        F: Fn(Arc<RedisStore>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let fut = op(node.clone());
            let (tx, healthy) = (tx.clone(), self.healthy.clone());
            tokio::spawn(async move {
                let result = fut.await;
                healthy[i].store(result.is_ok(), Ordering::Relaxed);
                let _ = tx.send((i, result)).await;
            });
        }
        drop(tx);
        let mut tally = Tally {
            ok: Vec::new(),
            errors: Vec::new(),
            answered: 0,
        };
        let mut answered = vec![false; self.nodes.len()];
        if done(&tally, self.suspects(&answered)) {
            return tally;
        }
        while let Some((i, result)) = rx.recv().await {
            tally.answered += 1;
            answered[i] = true;
            match result {
                Ok(v) => tally.ok.push((i, v)),
                Err(e) => tally.errors.push(e),
            }
            if done(&tally, self.suspects(&answered)) {
                break;
            }
        }
        tally
    }

    /// Asks every node to do `op` (a release or an extension, true when the
    /// node did it): true once a quorum did, false once a quorum no longer
    /// can, the other nodes finishing in the background; an error about
    /// `what` when too many nodes were unheard from to say it was not done.
    async fn quorum_says<F, Fut>(&self, what: impl Fn() -> String, op: F) -> Result<bool>
    where
        F: Fn(Arc<RedisStore>) -> Fut,
        Fut: Future<Output = Result<bool>> + Send + 'static,
    {
        let n = self.nodes.len();
        let q = self.quorum();
        let tally = self
            .round(op, |t: &Tally<bool>, suspects| {
                let yes = t.ok.iter().filter(|(_, r)| *r).count();
                yes >= q || t.answered - yes + suspects > n - q
            })
            .await;
        let yes = tally.ok.iter().filter(|(_, r)| *r).count();
        if yes >= q {
            Ok(true)
        } else if tally.errors.len() + (n - tally.answered) > n - q {
            Err(self.quorum_error(&what(), &tally.errors))
        } else {
            Ok(false)
        }
    }

    fn quorum_error(&self, what: &str, errors: &[Error]) -> Error {
        let down = self
            .healthy
            .iter()
            .filter(|h| !h.load(Ordering::Relaxed))
            .count();
        let first = errors
            .first()
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default();
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "{what}: no quorum of {} out of {} nodes, {down} failing{first}",
                self.quorum(),
                self.nodes.len(),
            ),
        )
    }

    async fn try_lock(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'static>>,
        exclusive: bool,
    ) -> Result<Outcome> {
        let line = Arc::new(RedlockLine::of(keys));
        let n = self.nodes.len();
        let q = self.quorum();
        // Set once the attempt has failed (or was abandoned): a node
        // answering after that with a grant (or with an unknown outcome)
        // releases at once, right after its own acquire on that node, so a
        // failed attempt cleans up exactly the nodes it may have locked.
        let failed = Arc::new(std::sync::Mutex::new(false));
        let (tx, rx) = mpsc::unbounded_channel();
        for (i, node) in self.nodes.iter().enumerate() {
            let (node, keys, token, line) = (node.clone(), keys.clone(), *token, line.clone());
            let (tx, failed, healthy) = (tx.clone(), failed.clone(), self.healthy.clone());
            tokio::spawn(async move {
                let result = node
                    .redlock_acquire(&keys, &line, &token, lease, place)
                    .await;
                healthy[i].store(result.is_ok(), Ordering::Relaxed);
                let may_hold = !matches!(result, Ok(Outcome::Busy(_) | Outcome::Queued { .. }));
                let cleanup = {
                    let failed = failed.lock().unwrap_or_else(|p| p.into_inner());
                    if *failed {
                        may_hold
                    } else {
                        let _ = tx.send((i, result));
                        false
                    }
                };
                if cleanup {
                    release_on(&node, &keys, &token).await;
                }
            });
        }
        drop(tx);
        // If this future is dropped before the outcome is decided, the round
        // counts as failed: answers still to come clean up after themselves,
        // and answers already received are released here.
        let mut round = Abandon {
            failed: failed.clone(),
            rx,
            nodes: self.nodes.clone(),
            keys: keys.clone(),
            token: *token,
            armed: true,
        };
        let rx = &mut round.rx;
        let mut granted: Vec<(usize, u64)> = Vec::new();
        let mut held: Vec<Option<Duration>> = Vec::new();
        let mut errors: Vec<(usize, Error)> = Vec::new();
        let mut answered = vec![false; n];
        while granted.len() < q && held.len() + errors.len() + self.suspects(&answered) <= n - q {
            let Some((i, result)) = rx.recv().await else {
                break;
            };
            answered[i] = true;
            match result {
                // (A Redis node takes a lock in the attempt itself: it
                // never answers `Granted`.)
                Ok(Outcome::Acquired { fence, .. } | Outcome::Granted { fence, .. }) => {
                    granted.push((i, fence.get()));
                }
                Ok(Outcome::Busy(ttl) | Outcome::Queued { ttl, .. }) => held.push(ttl),
                // A node of its own is one store: it never splits.
                Ok(Outcome::Contended) => held.push(None),
                Err(e) => errors.push((i, e)),
            }
        }
        if granted.len() >= q {
            // Decided: late grants stay, they are ours.
            round.armed = false;
            let fence = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
            if exclusive {
                if let Some(fence) = self.claim_fences(keys, &granted, fence).await {
                    return Ok(Outcome::Acquired {
                        fence: FencingToken::new(fence),
                        keys: keys.clone(),
                    });
                }
                // Others' permits took every value tried: this slot goes
                // back, and the attempt is retried like a split vote.
                self.release_in_background(keys, token);
                return Ok(Outcome::Contended);
            }
            if self.raise_fences(keys, &granted, fence).await {
                return Ok(Outcome::Acquired {
                    fence: FencingToken::new(fence),
                    keys: keys.clone(),
                });
            }
            self.release_in_background(keys, token);
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "acquiring {:?}: could not bring a quorum's token sequences to {fence}",
                    keys.id()
                ),
            ));
        }
        // Failed: from now on late answers clean up after themselves; undo
        // what already answered with a grant or an unknown outcome.
        *failed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        round.armed = false;
        while let Ok((i, result)) = rx.try_recv() {
            match result {
                Ok(Outcome::Busy(_) | Outcome::Queued { .. }) => {}
                Ok(_) => granted.push((i, 0)),
                Err(e) => errors.push((i, e)),
            }
        }
        // Nodes that granted are released before returning, so the next
        // attempt (ours or another's) does not find our own stale grants;
        // nodes with an unknown outcome are released in the background.
        let mut undo = tokio::task::JoinSet::new();
        for &(i, _) in &granted {
            let (node, keys, token) = (self.nodes[i].clone(), keys.clone(), *token);
            undo.spawn(async move { release_on(&node, &keys, &token).await });
        }
        for (i, _) in &errors {
            let (node, keys, token) = (self.nodes[*i].clone(), keys.clone(), *token);
            tokio::spawn(async move { release_on(&node, &keys, &token).await });
        }
        while undo.join_next().await.is_some() {}
        // Unreachable nodes alone rule out a quorum: the store is down, not
        // the lock busy. Otherwise others hold it (or contend for it).
        let unheard_failing = answered
            .iter()
            .zip(self.healthy.iter())
            .filter(|(a, h)| !**a && !h.load(Ordering::Relaxed))
            .count();
        if errors.len() + unheard_failing > n - q {
            let errors: Vec<Error> = errors.into_iter().map(|(_, e)| e).collect();
            return Err(self.quorum_error(&format!("acquiring {:?}", keys.id()), &errors));
        }
        // Our own partial grants with fewer than a quorum held by others:
        // nobody won this round. With a quorum held elsewhere, someone
        // holds it: say for how long.
        if !granted.is_empty() && held.len() < q {
            return Ok(Outcome::Contended);
        }
        Ok(Outcome::Busy(held.into_iter().flatten().min()))
    }

    /// Brings the sequences of the granting nodes that are behind up to
    /// `fence`; true when a quorum of nodes then stands at `fence`. (Nodes
    /// whose sequences agree draw the same value within a ms and need no
    /// raising; see `sequence.lua`.)
    async fn raise_fences(
        &self,
        keys: &Arc<LockKeys>,
        granted: &[(usize, u64)],
        fence: u64,
    ) -> bool {
        let at_max = granted.iter().filter(|(_, f)| *f == fence).count();
        let behind: Vec<usize> = granted
            .iter()
            .filter(|(_, f)| *f < fence)
            .map(|(i, _)| *i)
            .collect();
        if at_max >= self.quorum() || behind.is_empty() {
            return at_max >= self.quorum();
        }
        let mut set = tokio::task::JoinSet::new();
        for i in behind {
            let node = self.nodes[i].clone();
            let key = keys.sequence().to_owned();
            set.spawn(async move { node.raise_fence(&key, fence).await });
        }
        let mut raised = 0;
        while let Some(r) = set.join_next().await {
            if matches!(r, Ok(Ok(v)) if v >= fence) {
                raised += 1;
            }
        }
        at_max + raised >= self.quorum()
    }

    /// A token for a permit that no other permit has: a value a quorum of
    /// the granting nodes gave this holder alone (drew it, or had their
    /// sequence set to it from below; see `fence_claim.lua`). The highest
    /// value drawn first; where another holder took it on a node, one above
    /// everything seen, a few times. `None` when none could be claimed.
    async fn claim_fences(
        &self,
        keys: &Arc<LockKeys>,
        granted: &[(usize, u64)],
        fence: u64,
    ) -> Option<u64> {
        const TRIES: usize = 4;
        // What each granting node stands at, as far as this holder knows,
        // and whether that value is this holder's own (drawn by it).
        let mut at: Vec<(usize, u64, bool)> = granted.iter().map(|&(i, f)| (i, f, true)).collect();
        let mut want = fence;
        for _ in 0..TRIES {
            let mut set = tokio::task::JoinSet::new();
            let mut claimed = 0;
            for &(i, value, own) in &at {
                if own && value == want {
                    claimed += 1;
                    continue;
                }
                let (node, key) = (self.nodes[i].clone(), keys.sequence().to_owned());
                set.spawn(async move { (i, node.claim_fence(&key, want).await) });
            }
            let mut highest = want;
            while let Some(answer) = set.join_next().await {
                let Ok((i, answer)) = answer else { continue };
                let entry = at.iter_mut().find(|(n, _, _)| *n == i);
                match (answer, entry) {
                    (Ok(Ok(v)), Some(e)) => {
                        claimed += 1;
                        *e = (i, v, true);
                    }
                    (Ok(Err(v)), Some(e)) => {
                        highest = highest.max(v);
                        *e = (i, v, false);
                    }
                    _ => {}
                }
            }
            if claimed >= self.quorum() {
                return Some(want);
            }
            want = highest + 1;
        }
        None
    }

    fn release_in_background(&self, keys: &Arc<LockKeys>, token: &Token) {
        for node in &self.nodes {
            let (node, keys, token) = (node.clone(), keys.clone(), *token);
            tokio::spawn(async move { release_on(&node, &keys, &token).await });
        }
    }
}

/// The receiving end of an acquire round; dropped while the outcome is
/// undecided (the acquire future was dropped), it marks the round failed and
/// releases the nodes whose answers arrived but were never read.
struct Abandon {
    failed: Arc<std::sync::Mutex<bool>>,
    rx: mpsc::UnboundedReceiver<(usize, Result<Outcome>)>,
    nodes: Vec<Arc<RedisStore>>,
    keys: Arc<LockKeys>,
    token: Token,
    armed: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        while let Ok((i, result)) = self.rx.try_recv() {
            if !matches!(result, Ok(Outcome::Busy(_) | Outcome::Queued { .. }))
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                let (node, keys, token) = (self.nodes[i].clone(), self.keys.clone(), self.token);
                rt.spawn(async move { release_on(&node, &keys, &token).await });
            }
        }
    }
}

/// Releases a token on one node, for cleanup: failures only logged (the
/// lease frees the key).
async fn release_on(node: &RedisStore, keys: &Arc<LockKeys>, token: &Token) {
    let line = RedlockLine::of(keys);
    if let Err(e) = node.redlock_release(keys, &line, token).await {
        tracing::debug!(lock = %keys.id(), error = %e, "redlock cleanup release failed on a node");
    }
}

/// The plain lock behind slot `i` of a Redlock semaphore; its releases wake
/// the semaphore's waiters.
fn slot_keys(sem: &LockKeys, i: u32) -> LockKeys {
    // The slot keys append to the semaphore's key, after its hash tag, so
    // they share its slot and its sequence.
    crate::layout::beside(sem, format!("{}:slot:{i}", sem.id()), Resource::Lock)
}

/// Locks and semaphores only: a quorum of independent nodes keeps no
/// counter exactly.
impl DataStore for RedlockStore {}

impl LockStore for RedlockStore {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Line
    }

    fn max_permits(&self) -> u32 {
        MAX_REDLOCK_PERMITS
    }

    /// One attempt; a lock's waiter (`place`) takes its place in the key's
    /// line on every node (see [`RedlockLine`]). A semaphore's waiters do
    /// not line up: its permits are slot locks, each free to the first who
    /// asks.
    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        // No queue across independent nodes: every attempt is one try, in
        // the order of the key's line.

        match keys.resource() {
            Resource::Lock => {
                let place = place.map(|p| p.with_channel(""));
                self.try_lock(keys, token, lease, place, false).await
            }
            Resource::Semaphore { permits } => {
                // Try the slots from a random start, so holders spread out.
                let start = fastrand::u32(0..permits);
                let mut shortest: Option<Duration> = None;
                for i in 0..permits {
                    let slot = Arc::new(slot_keys(keys, (start + i) % permits));
                    match self.try_lock(&slot, token, lease, None, true).await? {
                        taken @ (Outcome::Acquired { .. } | Outcome::Granted { .. }) => {
                            return Ok(taken);
                        }
                        Outcome::Busy(ttl) | Outcome::Queued { ttl, .. } => {
                            shortest = match (shortest, ttl) {
                                (Some(a), Some(b)) => Some(a.min(b)),
                                (a, b) => a.or(b),
                            };
                        }
                        Outcome::Contended => shortest = Some(Duration::ZERO),
                    }
                }
                Ok(match shortest {
                    Some(Duration::ZERO) => Outcome::Contended,
                    other => Outcome::Busy(other),
                })
            }
        }
    }

    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        let slots: Option<Arc<Vec<String>>> = match keys.resource() {
            Resource::Semaphore { permits } => Some(Arc::new(
                (0..permits)
                    .map(|i| slot_keys(keys, i).id().to_owned())
                    .collect(),
            )),
            Resource::Lock => None,
        };
        let what = || format!("releasing {:?}", keys.id());
        self.quorum_says(what, |node| {
            let (keys, token, slots) = (keys.clone(), *token, slots.clone());
            async move {
                match slots {
                    // A permit whose slot is unknown (an acquire
                    // dropped mid-flight): release any slot with it.
                    Some(slots) => node.release_any(&slots, &token, keys.channel()).await,
                    None => {
                        node.redlock_release(&keys, &RedlockLine::of(&keys), &token)
                            .await
                    }
                }
            }
        })
        .await
    }

    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        let what = || format!("extending {:?}", keys.id());
        self.quorum_says(what, |node| {
            let (keys, token) = (keys.clone(), *token);
            async move { node.extend(&keys, &token, lease).await }
        })
        .await
    }
}

/// Connects to the Redis masters at `clients`, each request bounded by
/// `opts.response_timeout` (the node timeout). Nodes that cannot be
/// reached now are connected later, as long as a quorum answers now.
pub(crate) async fn connect(clients: Vec<redis::Client>, opts: RedisOptions) -> Result<Store> {
    let mut set = tokio::task::JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        set.spawn(async move { (i, RedisStore::connect(client, opts).await) });
    }
    let mut nodes: Vec<Option<RedisStore>> = (0..clients.len()).map(|_| None).collect();
    let mut errors = Vec::new();
    while let Some(joined) = set.join_next().await {
        let Ok((i, result)) = joined else { continue };
        match result {
            Ok(store) => nodes[i] = Some(store),
            Err(e) => errors.push(e),
        }
    }
    // A node that refused the credentials or the database index is a
    // set-up mistake, whether or not a quorum answered: said at once.
    if let Some(i) = errors.iter().position(Error::is_misconfigured) {
        return Err(errors.swap_remove(i));
    }
    let quorum = clients.len() / 2 + 1;
    let up = nodes.iter().filter(|n| n.is_some()).count();
    if up < quorum {
        let first = errors.first().map(ToString::to_string).unwrap_or_default();
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "redlock: only {up} of {} nodes reachable, a quorum needs {quorum} (first error: {first})",
                clients.len()
            ),
        ));
    }
    let mut stores = Vec::new();
    let mut listeners: Vec<Arc<dyn lockguard_core::store::Listener>> = Vec::new();
    for (node, client) in nodes.into_iter().zip(&clients) {
        let store = match node {
            Some(store) => store,
            None => {
                tracing::warn!(node = %client.get_connection_info().addr(), "redlock node unreachable at start-up; will reconnect");
                RedisStore::lazy(client.clone(), opts)?
            }
        };
        stores.push(store);
        listeners.push(Arc::new(Subscriber::new(client, opts)?));
    }
    tracing::debug!(nodes = stores.len(), quorum, "connected to redlock nodes");
    let at = clients
        .iter()
        .map(|c| c.get_connection_info().addr().to_string())
        .collect::<Vec<_>>()
        .join(",");
    Ok(Store::new(Arc::new(RedlockStore::new(stores)), listeners).at(&at))
}
