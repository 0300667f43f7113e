//! The etcd store: locks, semaphores and read-write locks as etcd's own
//! lock recipe (the `concurrency` package's `Mutex`).
//!
//! Each lock or semaphore is a key prefix, `{prefix}lock/{key}/`, and each
//! acquisition (a holder, or a waiter in the queue) a key under it named
//! for the client's lease and a slot, `{prefix}lock/{key}/{lease}.{slot}`,
//! attached to that lease (see `session`), its value a mark and the
//! acquisition's token. The client names a slot again once its last key
//! is certainly gone, so that a lock taken again and again writes the
//! same few keys (etcd visits every deleted key under a prefix on each
//! read of it until a compaction), and retires a slot with any doubt on
//! it: a client finds its own key again after a lost answer by its name
//! (see `slots`). In the order they were created (their create
//! revisions, which etcd's one Raft log orders) the keys are the queue: the
//! first `permits` hold, the rest wait, first come first served. A waiter
//! watches only what it waits for: a lock's waiter its predecessor's
//! deletion; a semaphore's first waiter every deletion under the prefix,
//! and each later waiter its predecessor (which writes its key again when
//! it comes to hold, so its successor moves on to be first). A watch starts
//! at the current revision, and one read then checks that nothing the
//! waiter saw changed before it stood (see `arm`). A release deletes one
//! key and wakes one waiter. The first waiter of a lock takes it from the
//! deletion's event; a waiter further back also watches the key ahead of
//! its predecessor, and reads when that key goes whether its predecessor
//! now heads the queue, so that the predecessor's deletion hands it the
//! lock with no read on the way (see `Ahead`); any other waiter woken
//! looks again with a read.
//!
//! A read-write lock has one queue for both kinds, each key's value its
//! mode: a writer holds when it is first and watches its predecessor; a
//! reader holds when no writer is ahead of it and watches the nearest
//! writer ahead.
//!
//! The lease of the client is what frees the locks of a process that died:
//! when etcd expires it, every key of it goes. A live holder keeps its
//! lock's lease like on any store: the watchdog's renewals check that its
//! key still exists (a linearizable read) and that the client's lease lasts
//! the renewal out, and when a lock's lease ends without renewal the
//! holder's client deletes the key. A lock's fencing token is the revision
//! that created its key; a semaphore permit's, the revision of its holder's
//! write when it came to hold. Revisions only grow, across leader changes.
//!
//! A multi-lock whose keys are all free is taken in one transaction; its
//! keys share the transaction's revision as their fencing token. A lock
//! released before its `at_least` has passed keeps its holder's key, moved
//! to a lease of that length, which outlives the client: to its waiters it
//! is still the holder, until the lease ends and etcd deletes it.
//!
//! Any client can list the locks held or awaited, in one read of their
//! keys, and end another client's hold by deleting its key, the one whose
//! value holds its token (see `survey`); the holder's next renewal, which
//! compares its key's create revision, finds it gone.
//!
//! As names come back, nothing is known of a key by its name alone: a
//! waiter looks past watch events at or before its own read of the queue
//! (a watch on a member behind that read starts before it, where an
//! earlier key of the name may have been deleted), and a read that may be
//! served from an older state compares create revisions, not only names.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use etcd_client::{
    Client as EtcdClient, Compare, CompareOp, GetOptions, KeyValue, KvClient,
    LeaseTimeToLiveOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchClient, WatchFilterType, WatchOptions,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use lockguard_core::store::net::{self, path_segment};
use lockguard_core::store::{
    AllOrNone, Handoff, Holding, Inbox, LeaseEnd, LeaseEnds, LockKeys, LockSet, LockStore,
    Occupancy, Outcome, Place, RwMode, Token, Turns, Waiting,
};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

use crate::error::etcd_error;
use crate::session::Session;

mod data;
mod follow;
mod limits;
mod slots;
mod survey;

/// How long a waiter trusts a watch that has not fired before it reads
/// the queue again anyway.
const RECHECK: Duration = Duration::from_secs(5);

/// How recently a hold must have begun for its renewal to be answered
/// without a request: what confirms a handoff at once.
const JUST_TAKEN: Duration = Duration::from_millis(50);

/// How much longer than a handoff's reservation the client's lease must be
/// known to last for the handoff to be made: the time to take it.
const HANDOFF_MARGIN: Duration = Duration::from_millis(100);

/// The most permits a semaphore may have on etcd: every attempt reads the
/// whole queue.
const MAX_ETCD_PERMITS: u32 = 1_000;

/// The values of queue keys begin with a mark, what kind of hold each one
/// is, followed by a space and the token of the acquisition (see
/// [`queue_value`]).
mod mark {
    /// A lock's key.
    pub(super) const LOCK: &[u8] = b"l";
    /// A semaphore's key, waiting.
    pub(super) const PERMIT: &[u8] = b"s";
    /// A semaphore's key that came to hold (written again: its successor
    /// is woken by it).
    pub(super) const HELD: &[u8] = b"h";
    /// A read-write lock's reader.
    pub(super) const READ: &[u8] = b"r";
    /// A read-write lock's writer.
    pub(super) const WRITE: &[u8] = b"w";
    /// A lock's holder's key kept past its release, until `at_least` has
    /// passed: followed by that moment, in ms since the Unix epoch.
    pub(super) const KEPT: &[u8] = b"k:";
}

/// The etcd store of one client.
pub(crate) struct EtcdStore {
    session: Arc<Session>,
    /// The prefix of every key.
    prefix: String,
    inbox: Arc<OnceLock<Weak<dyn Inbox>>>,
    /// This client's queue keys, by the token they were created for.
    nodes: Arc<Nodes>,
    /// The names of this client's queue keys (see [`slots`]).
    slots: Arc<slots::Slots>,
    /// Tokens a request to create whose key went unanswered (a timeout, a
    /// lost connection): etcd may still apply it, late (a member frozen
    /// with it, then resumed), after the key's deletion.
    unanswered: Mutex<HashSet<Token>>,
    /// The keys of unanswered tokens this client gave up: looked for on
    /// its lease for as long as the lease lasts (see [`Orphans`]).
    orphans: Arc<Orphans>,
    /// The ends of the holds' leases.
    lease_ends: Arc<LeaseEnds>,
    /// The leases rate-limit state is attached to.
    limit_leases: limits::LimitLeases,
    /// The rate-limit keys this client decides for, one decision at a
    /// time each, with the key's state as the last one saw it (see
    /// [`limits`]).
    limit_turns: Turns<Option<limits::Read>>,
    /// The counters this client updates, one update at a time each, with
    /// the counter as the last one wrote or read it (see [`data`]).
    counter_turns: Turns<Option<data::Counted>>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// One of this client's queue keys.
#[derive(Debug)]
struct Node {
    key: String,
    /// The revision that created it.
    created: i64,
    /// The lease it is attached to: it goes with it.
    lease: i64,
    role: Role,
    /// A waiter's latest attempt: its number, how long its place is kept
    /// (a handoff is reserved that long from it), and the lock's lease.
    place: Option<(u32, Duration, Duration)>,
}

#[derive(Debug)]
enum Role {
    /// In the queue, watching what it waits for (once it has looked).
    Waiting { watch: Option<Watch> },
    /// Holding. The lease ends at `end`; this client deletes the key then
    /// (see `expire`), unless a renewal replaced it.
    Holding {
        end: LeaseEnd,
        /// When the hold began.
        since: Instant,
    },
}

/// A waiter's standing watch.
#[derive(Debug)]
struct Watch {
    task: JoinHandle<()>,
    set: Instant,
    /// [`UNFIRED`] until an event (or the watch's end) woke the waiter:
    /// [`GONE`] when the one key it watched was deleted, else [`FIRED`].
    fired: Arc<AtomicU8>,
}

/// A watch that has not fired.
const UNFIRED: u8 = 0;
/// A watch that fired, or ended.
const FIRED: u8 = 1;
/// A watch that fired on the deletion of the one key it watched.
const GONE: u8 = 2;

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

/// How a key of a queue comes to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// A lock's (`Permits(1)`) or a semaphore's key: the first `n` hold.
    Permits(usize),
    /// A read-write lock's reader: holds when no writer is ahead.
    Read,
    /// A read-write lock's writer: holds when it is first.
    Write,
}

impl Admission {
    fn of(keys: &LockKeys) -> Self {
        match keys.rw_mode() {
            None => Self::Permits(keys.resource().permits() as usize),
            Some(RwMode::Read) => Self::Read,
            Some(RwMode::Write) => Self::Write,
        }
    }

    /// The mark a new key of this kind is written with.
    fn mark(self) -> &'static [u8] {
        match self {
            Self::Permits(1) => mark::LOCK,
            Self::Permits(_) => mark::PERMIT,
            Self::Read => mark::READ,
            Self::Write => mark::WRITE,
        }
    }
}

/// The value of a queue key: `mark`, a space, and the token of the
/// acquisition it is (its name is not: see [`slots`]).
fn queue_value(mark: &[u8], token: &Token) -> Vec<u8> {
    let mut value = Vec::with_capacity(mark.len() + 1 + token.as_str().len());
    value.extend_from_slice(mark);
    value.push(b' ');
    value.extend_from_slice(token.as_str().as_bytes());
    value
}

/// One key of a queue, as a listing read it.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    created: i64,
    modified: i64,
    /// What kind of hold it is (see [`mark`]).
    mark: Vec<u8>,
    /// The token of its acquisition; `None` when neither its value nor its
    /// name holds one.
    token: Option<Token>,
}

impl Entry {
    fn of(kv: &KeyValue) -> Self {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        Self::parse(key, kv.create_revision(), kv.mod_revision(), kv.value())
    }

    /// The entry of the key `key`, created and last written at those
    /// revisions, that holds `value`.
    fn parse(key: String, created: i64, modified: i64, value: &[u8]) -> Self {
        let (mark, token) = match value.iter().position(|b| *b == b' ') {
            Some(at) => (&value[..at], Token::parse(&value[at + 1..])),
            // A key written by an earlier build of this crate, named for
            // its token, with the mark alone.
            None => (
                value,
                key.rsplit_once('/')
                    .and_then(|(_, name)| Token::parse(name.as_bytes())),
            ),
        };
        Self {
            key,
            created,
            modified,
            mark: mark.to_vec(),
            token,
        }
    }
}

/// A listing of a lock's prefix, or of the part of it a waiter needs:
/// the queue in creation order.
#[derive(Debug, Default)]
struct Queue {
    entries: Vec<Entry>,
}

impl Queue {
    fn of(kvs: &[KeyValue]) -> Self {
        Self::sorted(kvs.iter().map(Entry::of).collect())
    }

    /// The queue of `entries`, put in creation order.
    fn sorted(mut entries: Vec<Entry>) -> Self {
        entries.sort_by_key(|e| e.created);
        // Reads of parts of a queue may find a key twice (the head that is
        // also a waiter's predecessor).
        entries.dedup_by(|a, b| a.key == b.key);
        Self { entries }
    }

    /// The holder's key kept past its release, if the lock is so kept.
    fn kept(&self) -> Option<&Entry> {
        self.entries
            .first()
            .filter(|e| e.mark.starts_with(mark::KEPT))
    }
}

/// What a waiter at `rank` of `queue` waits for under `admission`: `None`
/// when it holds; else the key to watch, whether to watch every key under
/// it (a prefix), and whether puts wake it too.
fn waits(queue: &Queue, rank: usize, admission: Admission) -> Option<Target> {
    let entries = &queue.entries;
    match admission {
        Admission::Permits(n) if rank < n => None,
        Admission::Write if rank == 0 => None,
        Admission::Permits(1) | Admission::Write => {
            Some(Target::deletion(&entries[rank - 1]).handing_over(rank == 1))
        }
        Admission::Permits(n) if rank == n => Some(Target {
            key: None,
            prefix: true,
            puts: false,
            seen: entries[..rank]
                .iter()
                .map(|e| (e.key.clone(), e.modified))
                .collect(),
            read_at: 0,
            hands_over: false,
            ahead: None,
        }),
        Admission::Permits(_) => Some(Target {
            puts: true,
            ..Target::deletion(&entries[rank - 1])
        }),
        Admission::Read => {
            let writers: Vec<&Entry> = entries[..rank]
                .iter()
                .filter(|e| e.mark == mark::WRITE)
                .collect();
            writers
                .last()
                .map(|w| Target::deletion(w).handing_over(writers.len() == 1))
        }
    }
}

/// What a waiter watches.
#[derive(Debug)]
struct Target {
    /// The key (`None`: the lock's prefix).
    key: Option<String>,
    prefix: bool,
    /// Whether a write (not only a deletion) wakes it.
    puts: bool,
    /// What the waiter saw of it: each key it waits on, with the revision
    /// that last wrote it. Once the watch stands, a read that finds any of
    /// them gone or written again wakes the waiter: it changed before the
    /// watch began.
    seen: Vec<(String, i64)>,
    /// The revision of the read that saw `seen` (0: not known). A watch
    /// that stands at this revision (its creation's answer says the store
    /// had reached no later one) missed nothing: the read that checks
    /// `seen` is left out.
    read_at: i64,
    /// Whether the key's deletion makes the waiter the holder: it is the
    /// one key ahead that keeps it waiting (a lock's or a writer's
    /// predecessor at the head; a reader's writer, the first writer).
    hands_over: bool,
    /// For a lock's or a writer's waiter further back, the key ahead of
    /// its predecessor, watched too (see [`Ahead`]).
    ahead: Option<Ahead>,
}

/// The key ahead of a lock's (or a writer's) waiter's predecessor, watched
/// beside the predecessor: when it goes, the waiter reads whether its
/// predecessor now heads the queue, while the predecessor holds, and when
/// it does, the predecessor's deletion hands the waiter the lock with no
/// read on the way (as it does a waiter that joined right behind the
/// holder). No key can be created ahead of one that exists, so a
/// predecessor once at the head stays there until its deletion.
#[derive(Debug)]
struct Ahead {
    /// The key ahead of the predecessor.
    key: String,
    /// The lock's prefix.
    dir: String,
    /// The waiter's own key, and its create revision.
    mine: String,
    created: i64,
    /// The create revision of the waiter's predecessor.
    predecessor: i64,
}

impl Target {
    fn deletion(entry: &Entry) -> Self {
        Self {
            key: Some(entry.key.clone()),
            prefix: false,
            puts: false,
            seen: vec![(entry.key.clone(), entry.modified)],
            read_at: 0,
            hands_over: false,
            ahead: None,
        }
    }

    fn handing_over(self, hands_over: bool) -> Self {
        Self { hands_over, ..self }
    }
}

/// The newest fencing token drawn for a lock whose queue is `queue`: the
/// last revision that created or wrote a key of it.
fn latest(queue: &Queue) -> Option<FencingToken> {
    queue
        .entries
        .iter()
        .map(|e| e.modified.max(e.created))
        .max()
        .and_then(|r| u64::try_from(r).ok())
        .filter(|r| *r > 0)
        .map(FencingToken::new)
}

/// The readers at the head of a read-write lock's queue, up to its first
/// writer, or that writer when it is first.
fn rw_holders(entries: &[Entry]) -> (usize, bool) {
    match entries.first() {
        Some(e) if e.mark == mark::WRITE => (0, true),
        _ => (
            entries.iter().take_while(|e| e.mark != mark::WRITE).count(),
            false,
        ),
    }
}

impl EtcdStore {
    /// A store working in `session`'s lease, under `prefix`.
    pub(crate) fn new(session: Arc<Session>, prefix: String) -> Arc<Self> {
        let nodes = Arc::new(Mutex::new(HashMap::new()));
        let slots = Arc::new(slots::Slots::default());
        let lease_ends = LeaseEnds::new({
            let (nodes, session) = (Arc::downgrade(&nodes), Arc::downgrade(&session));
            let slots = Arc::downgrade(&slots);
            move |token, now| expire(&nodes, &session, &slots, token, now)
        });
        let store = Arc::new(Self {
            session,
            prefix,
            inbox: Arc::new(OnceLock::new()),
            nodes,
            slots,
            unanswered: Mutex::default(),
            orphans: Arc::default(),
            lease_ends,
            limit_leases: limits::LimitLeases::default(),
            limit_turns: Turns::default(),
            counter_turns: Turns::default(),
        });
        let inbox = store.inbox.clone();
        store.session.on_renewed(move || {
            // Every place in every queue went with the old lease: every
            // waiter asks again, with the new one.
            if let Some(inbox) = inbox.get().and_then(Weak::upgrade) {
                inbox.wake_all();
            }
        });
        store
    }

    /// The TTL of the client's lease, as etcd granted it.
    pub(crate) fn lease_ttl(&self) -> Duration {
        self.session.lease().granted
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unanswered(&self) -> std::sync::MutexGuard<'_, HashSet<Token>> {
        self.unanswered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `txn`, which creates the keys of `tokens`; a token whose
    /// request goes unanswered is remembered (see
    /// [`unanswered`](Self::unanswered)) until its key is deleted.
    async fn creating(&self, what: &str, tokens: &[Token], txn: Txn) -> Result<TxnResponse> {
        let answer = self.txn(what, txn).await;
        if answer.is_err() {
            self.unanswered().extend(tokens.iter().copied());
        }
        answer
    }

    /// After the deletion of `token`'s key `key`: a request that may still
    /// create it again (see [`unanswered`](Self::unanswered)) is looked for
    /// until the client's lease ends (see [`orphaned`](Self::orphaned)),
    /// and its name is not used again; else the name is free.
    fn deleted(&self, token: &Token, key: String) {
        if self.unanswered().remove(token) {
            self.slots.retire(token);
            self.orphaned(key);
        } else {
            self.slots.free(token);
        }
    }

    /// `key`, whose token this client gave up after a request to create
    /// it went unanswered: etcd may still apply that request, however late
    /// (a member frozen with it, then resumed), and the key it creates,
    /// on this client's lease, would stay ahead of every waiter of its
    /// queue. It is looked for by reads of its own over the lease's TTL
    /// (see [`sweep_later`](Self::sweep_later)), and among the keys of the
    /// client's lease (see [`Orphans`]) until the lease ends. Deleting it
    /// by its name is safe as the token is never used again: it was
    /// released, or given up by an attempt without a place (each of which
    /// draws a token of its own), and a key this client records again is
    /// looked past.
    fn orphaned(&self, key: String) {
        orphaned_in(&self.session, &self.nodes, &self.orphans, key);
    }

    /// The prefix of a lock's queue.
    fn dir(&self, keys: &LockKeys) -> String {
        format!("{}lock/{}/", self.prefix, path_segment(keys.id()))
    }

    /// Runs one request under the response timeout, sent again to
    /// another member while it could not be sent at all (see [`retried`]).
    async fn rpc<T, F>(&self, what: &str, request: impl FnMut(EtcdClient) -> F) -> Result<T>
    where
        F: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        retried(
            &self.session.client(),
            self.session.timeout(),
            what,
            request,
        )
        .await
    }

    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse> {
        retried(self.session.kv(), self.session.timeout(), what, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// What a read of `key` (with `options`) finds.
    async fn get(
        &self,
        what: &str,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<Vec<KeyValue>> {
        let txn = Txn::new().and_then([TxnOp::get(key, options)]);
        last_get(&self.txn(what, txn).await?)
    }

    /// The listing of a lock's prefix, in creation order.
    fn listing(dir: &str) -> TxnOp {
        TxnOp::get(
            dir,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        )
    }

    /// The queue as a waiter at `key` (created at revision `created`)
    /// sees it when it looks again.
    ///
    /// A lock's or a writer's waiter reads only the head, the key created
    /// last before its own (its predecessor, as etcd's own lock recipe
    /// finds it) and its own key. When the deletion of the key it watched
    /// woke it, that read is first served by the member from what it has
    /// applied, without confirming with the quorum that nothing newer was
    /// committed (a serializable read, no round of the quorum, no wait
    /// for the writes in flight): no key can be created ahead of a key
    /// that exists, so a state in which the waiter's key exists and none
    /// is ahead of it holds for good, however old the state. A read that
    /// finds anything else is made again, linearizable.
    async fn look_again(
        &self,
        token: &Token,
        dir: &str,
        key: &str,
        created: i64,
        admission: Admission,
    ) -> Result<(Queue, i64)> {
        if !matches!(admission, Admission::Permits(1) | Admission::Write) {
            let txn = Txn::new().and_then([Self::listing(dir)]);
            let answer = self.txn("reading a lock's queue", txn).await?;
            return Ok((Queue::of(&last_get(&answer)?), revision(&answer)));
        }
        let near = |serializable| near(dir, key, created, serializable);
        if self.woken_by_deletion(token) {
            let answer = self.txn("reading a lock's queue", near(true)).await?;
            let queue = Queue::of(&all_gets(&answer)?);
            // The waiter's key itself, not an earlier one of its name (see
            // `slots`) in a state older than the waiter's key.
            if queue
                .entries
                .first()
                .is_some_and(|e| e.key == key && e.created == created)
            {
                return Ok((queue, revision(&answer)));
            }
        }
        let answer = self.txn("reading a lock's queue", near(false)).await?;
        Ok((Queue::of(&all_gets(&answer)?), revision(&answer)))
    }

    /// Whether the waiter `token` was woken by the deletion of the one key
    /// its watch watched.
    fn woken_by_deletion(&self, token: &Token) -> bool {
        matches!(
            self.nodes().get(token),
            Some(Node { role: Role::Waiting { watch: Some(w) }, .. })
                if w.fired.load(Ordering::Acquire) == GONE
        )
    }

    /// This token's key as this client knows it under `lease`; a key of
    /// an earlier lease is forgotten (it went with that lease).
    fn known(&self, token: &Token, lease: i64) -> Option<(String, i64, bool)> {
        let mut nodes = self.nodes();
        let node = nodes.get(token)?;
        if node.lease != lease {
            nodes.remove(token);
            return None;
        }
        Some((
            node.key.clone(),
            node.created,
            matches!(node.role, Role::Holding { .. }),
        ))
    }

    /// Records this token's key, waiting.
    fn record(&self, token: &Token, key: &str, created: i64, lease: i64) {
        let mut nodes = self.nodes();
        match nodes.get_mut(token) {
            Some(node) if node.key == key && node.created == created && node.lease == lease => {}
            _ => {
                nodes.insert(
                    *token,
                    Node {
                        key: key.to_owned(),
                        created,
                        lease,
                        role: Role::Waiting { watch: None },
                        place: None,
                    },
                );
            }
        }
    }

    /// Notes a waiter's attempt with `place` for a lease of `lease`: a
    /// handoff names its latest attempt.
    fn note(&self, token: &Token, place: &Place<'_>, lease: Duration) {
        if let Some(node) = self.nodes().get_mut(token) {
            node.place = Some((place.attempt, place.timeout, lease));
        }
    }

    /// Whether this token waits with a recent watch that has not fired:
    /// nothing ahead of it changed since it looked. A watch older than
    /// [`RECHECK`] is looked past, the safety net for a signal lost.
    fn watching(&self, token: &Token) -> bool {
        let lease = self.session.lease().id;
        let nodes = self.nodes();
        matches!(
            nodes.get(token),
            Some(Node { role: Role::Waiting { watch: Some(w) }, lease: l, .. })
                if w.fired.load(Ordering::Acquire) == UNFIRED
                    && w.set.elapsed() < RECHECK
                    && *l == lease
        )
    }

    /// One attempt of `token` at `keys`, as [`LockStore::acquire`] makes
    /// it.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        if let Some(p) = &place
            && self.watching(token)
        {
            // A waiter's refresh while its watch stands: nothing ahead of
            // it changed (a change, or the watch's end, fires it).
            self.note(token, p, lease);
            return Ok(Outcome::Busy(None));
        }
        let admission = Admission::of(keys);
        let session = self.session.ensure(Instant::now() + lease).await?;
        let dir = self.dir(keys);
        let Some(key) = self
            .slots
            .name(&dir, token, session.id, || self.session.lease().id)
        else {
            return Err(lease_changed());
        };
        let known = self.known(token, session.id);
        if let Some((_, created, true)) = known {
            // Handed over by its watch (see `handoff`) before this attempt
            // began, and not taken from the handoff: the same hold, whose
            // lease the caller counts from this attempt, so this client
            // keeps its key that long (the handoff's own end may come
            // first: the caller let it go as too old, or its process was
            // frozen past it with the key still there).
            if !self.hold_again(token, lease) {
                // Its end came as this attempt began: its key is being
                // deleted, and its place in the queue with it.
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "the lock handed to this waiter ended before it was taken",
                ));
            }
            return Ok(Outcome::Acquired {
                fence: fence(created)?,
                keys: keys.clone(),
            });
        }
        if place.is_none()
            && known.is_none()
            && matches!(admission, Admission::Permits(1) | Admission::Write)
        {
            return self
                .try_lock(keys, &dir, &key, admission, token, lease, session.id)
                .await;
        }
        // The queue, and the revision of the read that found it.
        let (queue, read_at) = if let Some((_, created, _)) = &known {
            // A waiter looking again: a read (a transaction with a write
            // in it goes through the log, and its disk, even when its
            // comparison fails).
            self.look_again(token, &dir, &key, *created, admission)
                .await?
        } else {
            // Create the key unless it exists (an earlier attempt of this
            // waiter, whose answer may have been lost), and read the
            // queue, in one transaction; when it exists, the queue is read
            // in a request of its own (a read in the other branch would
            // make every join longer than HTTP/2's one-write size: see
            // `try_lock`).
            let put = TxnOp::put(
                key.as_str(),
                queue_value(admission.mark(), token),
                Some(PutOptions::new().with_lease(session.id)),
            );
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([put, Self::listing(&dir)]);
            let answer = self
                .creating("joining a lock's queue", &[*token], txn)
                .await?;
            if answer.succeeded() {
                (Queue::of(&last_get(&answer)?), revision(&answer))
            } else {
                let read = Txn::new().and_then([Self::listing(&dir)]);
                let answer = self.txn("reading a lock's queue", read).await?;
                (Queue::of(&last_get(&answer)?), revision(&answer))
            }
        };
        let Some(rank) = queue.entries.iter().position(|e| e.key == key) else {
            // Our key is gone: the lease it was attached to ended. The next
            // attempt queues again with the new one.
            self.nodes().remove(token);
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the etcd lease holding this queue place ended",
            ));
        };
        if queue.entries[rank].token != Some(*token) {
            // A key of this name that is not ours (the name came back too
            // soon, which the slots are to rule out): never taken for ours.
            tracing::warn!(key = %key, "an etcd queue key of this client's name holds another token");
            self.nodes().remove(token);
            self.slots.retire(token);
            return Err(Error::new(
                ErrorKind::Unavailable,
                "an etcd queue key of this name holds another acquisition",
            ));
        }
        let mine = queue.entries[rank].clone();
        self.record(token, &key, mine.created, session.id);
        let Some(target) = waits(&queue, rank, admission) else {
            return self.take(keys, token, &mine, admission, lease).await;
        };
        // A lock kept past an early release until its `at_least` passes.
        let left = queue.kept().and_then(kept_left);
        if place.is_none() {
            // Never queue without a place: give the key up.
            self.give_up(token, key, mine.created).await;
            return Ok(Outcome::Busy(left));
        }
        let mut target = Target {
            key: Some(target.key.unwrap_or_else(|| dir.clone())),
            read_at,
            ..target
        };
        // Joining, the waiter read the whole queue: the key ahead of its
        // predecessor is known (looking again, it reads only its part).
        let joined = known.is_none();
        if joined && rank >= 2 && matches!(admission, Admission::Permits(1) | Admission::Write) {
            let ahead = &queue.entries[rank - 2];
            target.seen.push((ahead.key.clone(), ahead.modified));
            target.ahead = Some(Ahead {
                key: ahead.key.clone(),
                dir,
                mine: key,
                created: mine.created,
                predecessor: queue.entries[rank - 1].created,
            });
        }
        if let Some(p) = &place {
            self.note(token, p, lease);
        }
        self.arm(token, target);
        Ok(Outcome::Busy(left))
    }

    /// Deletes the key of an attempt without a place that did not come to
    /// hold, before the attempt answers: an attempt that never queues
    /// leaves nothing in the queue behind it (in the background, retried,
    /// when the deletion fails).
    async fn give_up(&self, token: &Token, key: String, created: i64) {
        self.nodes().remove(token);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                created,
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        if self.txn("leaving a lock's queue", txn).await.is_err() {
            self.discard(key.clone(), created);
            self.slots.retire(token);
        }
        self.deleted(token, key);
    }

    /// A lock's (or a writer's) attempt that never queues: the key is
    /// created only when nothing is under the lock's prefix, one
    /// transaction either way.
    #[allow(clippy::too_many_arguments)]
    async fn try_lock(
        &self,
        keys: &Arc<LockKeys>,
        dir: &str,
        key: &str,
        admission: Admission,
        token: &Token,
        lease: Duration,
        lease_id: i64,
    ) -> Result<Outcome> {
        let put = TxnOp::put(
            key,
            queue_value(admission.mark(), token),
            Some(PutOptions::new().with_lease(lease_id)),
        );
        // Nothing in the other branch: a read there would make the request
        // longer than the 256 bytes HTTP/2 sends in one write with the end
        // of its stream (a longer body goes in one write, and the end in
        // another: a system call more for every uncontended acquisition).
        let txn = Txn::new()
            .when([Compare::version(dir, CompareOp::Equal, 0).with_prefix()])
            .and_then([put]);
        let answer = self.creating("taking a lock", &[*token], txn).await?;
        if !answer.succeeded() {
            // Nothing was written: the name is free again.
            self.slots.free(token);
            // Busy: the holder's key, to tell a kept lock's time left.
            let first = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            let left = self
                .get("reading a lock's holder", dir, Some(first))
                .await
                .ok()
                .and_then(|kvs| Queue::of(&kvs).kept().and_then(kept_left));
            return Ok(Outcome::Busy(left));
        }
        let created = revision(&answer);
        self.record(token, key, created, lease_id);
        self.hold(token, lease);
        Ok(Outcome::Acquired {
            fence: fence(created)?,
            keys: keys.clone(),
        })
    }

    /// Takes the lock, permit or read-write hold `token`'s key came to
    /// hold. A semaphore holder writes its key again first, which wakes the
    /// waiter watching it (now first among the waiters) and draws its
    /// fencing token, the write's revision, so permits' tokens follow the
    /// order they were taken in. A lock's token, and a read-write lock's
    /// hold's, is its key's create revision: its holders come in creation
    /// order.
    async fn take(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        mine: &Entry,
        admission: Admission,
        lease: Duration,
    ) -> Result<Outcome> {
        let token_rev = match admission {
            Admission::Permits(n) if n > 1 && mine.mark != mark::HELD => {
                let lease_id = self.session.lease().id;
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        mine.key.as_str(),
                        CompareOp::Equal,
                        mine.created,
                    )])
                    .and_then([TxnOp::put(
                        mine.key.as_str(),
                        queue_value(mark::HELD, token),
                        Some(PutOptions::new().with_lease(lease_id)),
                    )]);
                let answer = self.txn("taking a permit", txn).await?;
                if !answer.succeeded() {
                    self.nodes().remove(token);
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "the etcd lease holding this queue place ended",
                    ));
                }
                revision(&answer)
            }
            Admission::Permits(n) if n > 1 => mine.modified,
            _ => mine.created,
        };
        self.hold(token, lease);
        Ok(Outcome::Acquired {
            fence: fence(token_rev)?,
            keys: keys.clone(),
        })
    }

    /// Sets the watch of a waiting token: when what it waits for changes,
    /// the waiter is woken to look again.
    ///
    /// The watch starts at the store's current revision, where etcd sends
    /// its events as they happen (a watch from an older revision catches
    /// up on a 100 ms tick); once it stands, one read checks that nothing
    /// the waiter saw changed before it did, unless the store had reached
    /// no revision past the waiter's read when the watch was made.
    fn arm(&self, token: &Token, target: Target) {
        let inbox = self.inbox.clone();
        let waiter = *token;
        let fired = Arc::new(AtomicU8::new(UNFIRED));
        let flag = fired.clone();
        let (watches, kv) = (self.session.watches(), self.session.kv().clone());
        let timeout = self.session.timeout();
        let (nodes, session) = (Arc::downgrade(&self.nodes), Arc::downgrade(&self.session));
        let lease_ends = Arc::downgrade(&self.lease_ends);
        let task = tokio::spawn(async move {
            let (gone, hands_over) = watch_until_changed(watches, kv, timeout, target).await;
            flag.store(if gone { GONE } else { FIRED }, Ordering::Release);
            let Some(inbox) = inbox.get().and_then(Weak::upgrade) else {
                return;
            };
            match handoff(gone && hands_over, &nodes, &session, &lease_ends, waiter) {
                Some(handoff) => inbox.handoff(handoff),
                None => inbox.wake(&waiter),
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

    /// Marks this token's key held, with a lease of `lease` from now that
    /// this client enforces: it deletes the key when it ends.
    fn hold(&self, token: &Token, lease: Duration) {
        let now = Instant::now();
        let mut nodes = self.nodes();
        if let Some(node) = nodes.get_mut(token) {
            node.set_role(Role::Holding {
                end: self.lease_ends.schedule(*token, now + lease),
                since: now,
            });
        }
    }

    /// Renews the hold of `token`, with a lease of `lease` from now, as
    /// [`EtcdStore::hold`] makes one: `false`, changing nothing, once the
    /// token holds no more (its end passed and [`expire`] took the key to
    /// delete it). An end passed that `expire` has not come to yet is
    /// renewed: the key is still there, and nobody else could take the lock.
    fn hold_again(&self, token: &Token, lease: Duration) -> bool {
        let now = Instant::now();
        let mut nodes = self.nodes();
        match nodes.get_mut(token) {
            Some(Node {
                role: Role::Holding { end, since },
                ..
            }) => {
                *end = self.lease_ends.schedule(*token, now + lease);
                *since = now;
                true
            }
            _ => false,
        }
    }

    /// Deletes a key this client no longer wants, in the background,
    /// retrying until it is gone or its lease ended: a key left behind
    /// would come to hold the lock for nobody.
    fn discard(&self, key: String, created: i64) {
        tokio::spawn(discard_in(Arc::downgrade(&self.session), key, created));
    }

    /// Deletes the key `key` again whenever it is found over the next
    /// `window` (at least the response timeout): a request that created
    /// it, given up by its caller, may be applied after the deletion that
    /// was to undo it. (A token is never used again once released, so its
    /// key is nobody else's.) Looking is a read; a deletion is sent only
    /// for a key found.
    fn sweep_later(&self, key: String, window: Duration) {
        sweep_later_in(
            Arc::downgrade(&self.session),
            Arc::downgrade(&self.nodes),
            key,
            window,
        );
    }

    async fn release_inner(&self, token: &Token) -> Result<bool> {
        let lease = self.session.lease().id;
        let Some((key, created, holding)) = self.known(token, lease) else {
            // An acquisition whose answer was lost (or never recorded), or
            // a key of an ended lease (gone with it): its key is found by
            // its name, if it has one on this lease, which is not used
            // again.
            self.nodes().remove(token);
            let Some(key) = self.slots.of(token, lease) else {
                self.unanswered().remove(token);
                return Ok(false);
            };
            self.slots.retire(token);
            let txn = Txn::new().and_then([TxnOp::delete(key.as_str(), None)]);
            let deleted = self.txn("deleting a lock's key", txn).await.map(|a| {
                match a.op_responses().pop() {
                    Some(TxnOpResponse::Delete(d)) => d.deleted(),
                    _ => 0,
                }
            });
            return match deleted {
                Ok(deleted) => {
                    if self.unanswered().remove(token) {
                        self.orphaned(key);
                    } else if deleted == 0 {
                        // The acquisition's request may still be on its
                        // way (etcd orders no two requests of one client):
                        // look for its key again a little later.
                        self.sweep_later(key, Duration::ZERO);
                    }
                    Ok(deleted > 0)
                }
                Err(e) => {
                    self.discard(key.clone(), 0);
                    if self.unanswered().remove(token) {
                        self.orphaned(key);
                    } else {
                        self.sweep_later(key, Duration::ZERO);
                    }
                    Err(e)
                }
            };
        };
        // The key's name is this token's until its deletion is answered:
        // whatever holds that name is this hold (a plain deletion, lighter
        // for etcd than a transaction).
        let deleted = retried(
            self.session.kv(),
            self.session.timeout(),
            "deleting a lock's key",
            |mut kv| {
                let key = key.clone();
                async move { kv.delete(key, None).await }
            },
        )
        .await;
        match deleted {
            Ok(answer) => {
                self.nodes().remove(token);
                self.deleted(token, key);
                Ok(holding && answer.deleted() > 0)
            }
            Err(e) => {
                // The key may be there still: its name is not used again.
                self.slots.retire(token);
                if !holding {
                    // A waiter's key must not stay in the queue. (A
                    // holder's is deleted when its lease ends.)
                    self.nodes().remove(token);
                    self.discard(key.clone(), created);
                    self.deleted(token, key);
                }
                Err(e)
            }
        }
    }

    async fn extend_inner(&self, token: &Token, lease: Duration) -> Result<bool> {
        let current = self.session.lease().id;
        let Some((key, created, true)) = self.known(token, current) else {
            return Ok(false);
        };
        let sent_at = Instant::now();
        // The client's lease must last the renewal out, and the key must
        // still be there, attached to it.
        let session = self.session.ensure(sent_at + lease).await?;
        if session.id != current {
            self.nodes().remove(token);
            return Ok(false);
        }
        {
            // A hold begun a moment ago (the confirmation of a handoff):
            // its key was created, or its predecessor's deletion seen,
            // under this very lease, which is alive.
            let mut nodes = self.nodes();
            if let Some(Node {
                role: Role::Holding { end, since },
                ..
            }) = nodes.get_mut(token)
                && since.elapsed() < JUST_TAKEN
            {
                *end = self.lease_ends.schedule(*token, sent_at + lease);
                return Ok(true);
            }
        }
        let txn = Txn::new().when([
            Compare::create_revision(key.as_str(), CompareOp::Equal, created),
            Compare::lease(key.as_str(), CompareOp::Equal, session.id),
        ]);
        let answer = self.txn("checking a lock's key", txn).await?;
        let mut nodes = self.nodes();
        match nodes.get_mut(token) {
            Some(Node {
                role: Role::Holding { end, .. },
                key: k,
                ..
            }) if answer.succeeded() && *k == key => {
                *end = self.lease_ends.schedule(*token, sent_at + lease);
                Ok(true)
            }
            _ => {
                nodes.remove(token);
                Ok(false)
            }
        }
    }

    /// Gives up a lock's hold but keeps the lock taken for `keep`: the
    /// holder's key moves to a lease of that length of its own (in whole
    /// seconds, rounded up), marked kept, and this client deletes it when
    /// `keep` has passed, if it still runs then.
    async fn release_later_inner(&self, token: &Token, keep: Duration) -> Result<bool> {
        let current = self.session.lease().id;
        let Some((key, created, true)) = self.known(token, current) else {
            return Ok(false);
        };
        let secs = keep.as_secs() + u64::from(keep.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let granted = match self
            .rpc("granting the lease of a kept lock", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await
        {
            Ok(granted) => granted,
            Err(e) => {
                // The key stays the hold's, on the client's lease, and this
                // client deletes it at the hold's lease end (which `keep`
                // does not pass); should the client close before, its lease
                // runs out instead of being revoked.
                self.session.keep_until(Instant::now() + keep);
                return Err(e);
            }
        };
        let until_ms =
            unix_ms().saturating_add(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX));
        let mut kept = mark::KEPT.to_vec();
        kept.extend_from_slice(until_ms.to_string().as_bytes());
        let kept = queue_value(&kept, token);
        // The holder's key stays, on the kept lease: its place at the head
        // of the queue, its revision, and its waiters' watches with it.
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                created,
            )])
            .and_then([TxnOp::put(
                key.as_str(),
                kept,
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
        let answer = self.txn("keeping a released lock", txn).await;
        self.nodes().remove(token);
        match answer {
            Ok(a) if a.succeeded() => {
                // Deleted on time by this client while it lives; the kept
                // lease, in whole seconds, is the bound when it does not.
                // A request that created the key and went unanswered may
                // still create it again, on this client's lease, once it
                // is gone: it is looked for then, as after a release (not
                // before: the kept key has the same name).
                // Its name stays in use until then, and is used again after
                // only when the deletion was answered and nothing else may
                // create it.
                let unanswered = self.unanswered().remove(token);
                let slot = self.slots.detach(token);
                let session = Arc::downgrade(&self.session);
                let (nodes, orphans) = (Arc::downgrade(&self.nodes), Arc::downgrade(&self.orphans));
                let slots = Arc::downgrade(&self.slots);
                tokio::spawn(async move {
                    tokio::time::sleep(keep).await;
                    let gone = discard_in(session.clone(), key.clone(), created).await;
                    if gone
                        && !unanswered
                        && let (Some(slots), Some(slot)) = (slots.upgrade(), slot)
                    {
                        slots.free_detached(slot);
                    }
                    if unanswered
                        && let (Some(session), Some(nodes), Some(orphans)) =
                            (session.upgrade(), nodes.upgrade(), orphans.upgrade())
                    {
                        orphaned_in(&session, &nodes, &orphans, key);
                    }
                });
                Ok(true)
            }
            Ok(_) => {
                // The key is gone (its lease ended): the kept lease holds
                // nothing.
                self.slots.retire(token);
                let id = granted.id();
                let mut client = self.session.client();
                tokio::spawn(async move {
                    let _ = client.lease_revoke(id).await;
                });
                Ok(false)
            }
            Err(e) => {
                // The key may have moved to the kept lease or not: either
                // way the lock stays taken for `keep` (the kept lease, with
                // no keep-alive, runs out then; the client's is not revoked
                // as the client closes before), and is deleted then. Its
                // name is not used again.
                self.slots.retire(token);
                self.session.keep_until(Instant::now() + keep);
                let session = Arc::downgrade(&self.session);
                tokio::spawn(async move {
                    tokio::time::sleep(keep).await;
                    discard_in(session, key, created).await;
                });
                Err(e)
            }
        }
    }

    async fn inspect_inner(&self, keys: &LockKeys) -> Result<Occupancy> {
        let capacity = keys.resource().permits();
        let dir = self.dir(keys);
        let answer = self
            .get(
                "reading a lock's queue",
                &dir,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend),
                ),
            )
            .await?;
        let queue = Queue::of(&answer);
        let queued = queue.entries.len();
        let latest = latest(&queue);
        if let Some(kept) = queue.kept() {
            return Ok(Occupancy::new(
                1,
                capacity,
                kept_left(kept),
                (queued - 1) as u64,
                latest,
            ));
        }
        if keys.rw_mode().is_some() {
            let (readers, writer) = rw_holders(&queue.entries);
            let holders = readers + usize::from(writer);
            return Ok(Occupancy::read_write(
                u32::try_from(readers).unwrap_or(u32::MAX),
                writer,
                None,
                (queued - holders) as u64,
                latest,
            ));
        }
        let holders = queued.min(capacity as usize);
        Ok(Occupancy::new(
            u32::try_from(holders).unwrap_or(u32::MAX),
            capacity,
            // A holder's lease is kept by its own client; the store knows
            // only that its client's lease lives.
            None,
            (queued - holders) as u64,
            latest,
        ))
    }

    async fn acquire_all_inner(&self, set: LockSet<'_>, lease: Duration) -> Result<AllOrNone> {
        let session = self.session.ensure(Instant::now() + lease).await?;
        let dirs: Vec<String> = set.keys().iter().map(|k| self.dir(k)).collect();
        let names: Vec<String> = dirs
            .iter()
            .zip(set.tokens())
            .map(|(d, t)| {
                self.slots
                    .name(d, t, session.id, || self.session.lease().id)
            })
            .collect::<Option<_>>()
            .ok_or_else(lease_changed)?;
        let free: Vec<Compare> = dirs
            .iter()
            .map(|d| Compare::version(d.as_str(), CompareOp::Equal, 0).with_prefix())
            .collect();
        let puts: Vec<TxnOp> = names
            .iter()
            .zip(set.tokens())
            .map(|(n, t)| {
                TxnOp::put(
                    n.as_str(),
                    queue_value(mark::LOCK, t),
                    Some(PutOptions::new().with_lease(session.id)),
                )
            })
            .collect();
        let looks: Vec<TxnOp> = dirs
            .iter()
            .map(|d| {
                TxnOp::get(
                    d.as_str(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
            })
            .collect();
        let txn = Txn::new().when(free).and_then(puts).or_else(looks);
        let answer = self
            .creating("taking several locks", set.tokens(), txn)
            .await?;
        if !answer.succeeded() {
            // Nothing was written: the names are free again.
            for token in set.tokens() {
                self.slots.free(token);
            }
            let index = answer
                .op_responses()
                .iter()
                .position(|r| matches!(r, TxnOpResponse::Get(g) if g.count() > 0))
                .unwrap_or(0);
            return Ok(AllOrNone::Busy { index, ttl: None });
        }
        let created = revision(&answer);
        for (name, token) in names.iter().zip(set.tokens()) {
            self.record(token, name, created, session.id);
            self.hold(token, lease);
        }
        Ok(AllOrNone::Acquired(vec![fence(created)?; set.len()]))
    }
}

impl LockStore for EtcdStore {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    fn max_permits(&self) -> u32 {
        MAX_ETCD_PERMITS
    }

    /// Two thirds of the lease's TTL: the client keeps its lease alive a
    /// third of the TTL apart, and a renewal must be able to count on it
    /// for the whole lease.
    fn max_lease(&self) -> Option<Duration> {
        Some(self.lease_ttl() * 2 / 3)
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
        self.attempt(keys, token, lease, place).await
    }

    async fn acquire_all(&self, set: LockSet<'_>, lease: Duration) -> Result<Option<AllOrNone>> {
        self.acquire_all_inner(set, lease).await.map(Some)
    }

    async fn release(&self, _keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.release_inner(token).await
    }

    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        self.inspect_inner(keys).await
    }

    /// One range read of the queue keys of every lock whose identity
    /// starts with `prefix` (see `survey`).
    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        self.survey_inner(prefix).await
    }

    /// The holder's key, the one whose value holds its token, deleted when
    /// it holds: its own client remembers the key, this one reads the
    /// queue (see `survey`).
    async fn evict(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.evict_inner(keys, token).await
    }

    /// A lock's hold becomes a key on a lease of its own that keeps it past
    /// this client's lease (see the module's docs); a semaphore's permit
    /// and a read-write lock's hold are kept by their lease.
    async fn release_later(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> Result<bool> {
        if keys.rw_mode().is_none() && keys.resource().permits() == 1 {
            return self.release_later_inner(token, keep).await;
        }
        self.extend_inner(token, keep).await
    }

    async fn extend(&self, _keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        self.extend_inner(token, lease).await
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Waiters' watches end with the store, and so does its schedule of
        // lease ends.
        self.nodes().clear();
        self.lease_ends.close();
    }
}

/// [`EtcdStore::sweep_later`], for a task that outlives the call: the
/// client's session and its nodes.
fn sweep_later_in(session: Weak<Session>, nodes: Weak<Nodes>, key: String, window: Duration) {
    tokio::spawn(async move {
        let mut pause = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        loop {
            tokio::time::sleep(pause).await;
            waited += pause;
            let Some((mut client, timeout)) = session.upgrade().map(|s| (s.client(), s.timeout()))
            else {
                return;
            };
            // A key this client has since recorded is in use again.
            if nodes.upgrade().is_some_and(|n| {
                n.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .any(|node| node.key == key)
            }) {
                return;
            }
            let found = bounded(
                timeout,
                "looking for a lock's key",
                client.get(key.as_str(), Some(GetOptions::new().with_count_only())),
            )
            .await;
            if found.is_ok_and(|r| r.count() > 0) {
                let deleted = bounded(
                    timeout,
                    "deleting a lock's key",
                    client.delete(key.as_str(), None),
                )
                .await;
                if deleted.is_ok_and(|r| r.deleted() > 0) {
                    tracing::debug!(key = %key, "deleted a key created after its release");
                }
            }
            if waited >= window.max(timeout) {
                return;
            }
            pause = (pause * 4).min(timeout);
        }
    });
}

/// [`EtcdStore::orphaned`], for a task that outlives the call.
fn orphaned_in(session: &Arc<Session>, nodes: &Arc<Nodes>, orphans: &Arc<Orphans>, key: String) {
    let lease = session.lease();
    sweep_later_in(
        Arc::downgrade(session),
        Arc::downgrade(nodes),
        key.clone(),
        lease.granted,
    );
    if orphans.add(lease.id, || session.lease().id, key) {
        tokio::spawn(sweep_orphans(
            Arc::downgrade(session),
            Arc::downgrade(nodes),
            Arc::downgrade(orphans),
        ));
    }
}

/// The nodes of a store, shared with its tasks.
type Nodes = Mutex<HashMap<Token, Node>>;

/// The most keys [`Orphans`] keeps: each is a request that went unanswered
/// during a fault, so a client reaching it has lived through thousands.
const MAX_ORPHANS: usize = 4_096;

/// The keys this client gave up whose creating request went unanswered,
/// on its current lease (see [`EtcdStore::orphaned`]). While there are
/// any, a task lists the keys of the client's lease (`LeaseTimeToLive` with
/// its keys: one request, a third of the lease's TTL apart, as its
/// keep-alives) and deletes those found, attached to the lease still; the
/// keys go when the lease does, so they are kept until then.
#[derive(Default)]
struct Orphans {
    state: Mutex<OrphanState>,
}

#[derive(Default)]
struct OrphanState {
    /// The lease the keys were given up on.
    lease: i64,
    keys: HashSet<String>,
    /// Whether a task is sweeping them.
    sweeping: bool,
}

impl Orphans {
    fn state(&self) -> std::sync::MutexGuard<'_, OrphanState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `key`, given up on `lease`, unless that is no longer the
    /// client's lease (`current`, read under the lock: the keys only ever
    /// move on to the current lease); true when a task must start
    /// sweeping.
    fn add(&self, lease: i64, current: impl FnOnce() -> i64, key: String) -> bool {
        let mut state = self.state();
        if current() != lease {
            // The key went with its lease.
            return false;
        }
        state.on_lease(lease);
        if state.keys.len() >= MAX_ORPHANS {
            tracing::warn!(
                key = %key,
                "{MAX_ORPHANS} keys of unanswered requests already looked for on this \
                 client's etcd lease: this one is not (should etcd create it late, its \
                 queue waits for the lease to end)"
            );
            return false;
        }
        state.keys.insert(key);
        !std::mem::replace(&mut state.sweeping, true)
    }

    /// The keys to look for on the client's lease (`current`, read under
    /// the lock), and that lease; none (and the sweeping task told to end)
    /// when there are none.
    fn wanted(&self, current: impl FnOnce() -> i64) -> Option<(i64, HashSet<String>)> {
        let mut state = self.state();
        let lease = current();
        state.on_lease(lease);
        if state.keys.is_empty() {
            state.sweeping = false;
            return None;
        }
        Some((lease, state.keys.clone()))
    }
}

impl OrphanState {
    /// Forgets the keys of an earlier lease: they went with it.
    fn on_lease(&mut self, lease: i64) {
        if self.lease != lease {
            self.lease = lease;
            self.keys.clear();
        }
    }
}

/// Lists the keys of the session's lease, a third of its TTL apart, and
/// deletes those of `orphans` found on it (unless the client uses the key
/// again), until there are none to look for.
async fn sweep_orphans(session: Weak<Session>, nodes: Weak<Nodes>, orphans: Weak<Orphans>) {
    loop {
        let Some(pause) = session.upgrade().map(|s| s.lease().granted / 3) else {
            return;
        };
        tokio::time::sleep(pause).await;
        let (Some(session), Some(orphans)) = (session.upgrade(), orphans.upgrade()) else {
            return;
        };
        let Some((lease, wanted)) = orphans.wanted(|| session.lease().id) else {
            return;
        };
        let mut client = session.client();
        let timeout = session.timeout();
        drop(session);
        let listed = bounded(
            timeout,
            "listing the keys of the etcd lease",
            client.lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys())),
        )
        .await;
        let Ok(listed) = listed else {
            continue;
        };
        for key in listed.keys() {
            let Some(key) = std::str::from_utf8(key)
                .ok()
                .filter(|k| wanted.contains(*k))
            else {
                continue;
            };
            let in_use = nodes.upgrade().is_some_and(|n| {
                n.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .any(|node| node.key == key)
            });
            if in_use {
                continue;
            }
            // Only while it is attached to the lease still: nothing but
            // the late request put it there.
            let txn = Txn::new()
                .when([Compare::lease(key, CompareOp::Equal, lease)])
                .and_then([TxnOp::delete(key, None)]);
            let deleted = bounded(timeout, "deleting a lock's key", client.txn(txn)).await;
            if deleted.is_ok_and(|r| r.succeeded()) {
                tracing::debug!(key = %key, "deleted a key created long after its release");
            }
        }
    }
}

/// Ends `token`'s hold, whose lease ended by `now` unless it was renewed
/// or released since: its key is deleted in the background.
fn expire(
    nodes: &Weak<Nodes>,
    session: &Weak<Session>,
    slots: &Weak<slots::Slots>,
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
            Some(Node { role: Role::Holding { end, .. }, .. }) if end.at() <= now
        );
        if ended { map.remove(&token) } else { None }
    };
    if let Some(node) = node {
        tracing::debug!(key = %node.key, "lease ended; deleting the lock's key");
        // Deleted in the background: its name is not used again.
        if let Some(slots) = slots.upgrade() {
            slots.retire(&token);
        }
        tokio::spawn(discard_in(session.clone(), node.key.clone(), node.created));
    }
}

/// The handoff to `token`'s waiter whose watched key is `gone`, when that
/// made it the holder: it holds from now, for the lease of its latest
/// attempt or the reservation the handoff promises (that attempt's place
/// timeout: until its waiter confirms the hold with its lease, it counts
/// on that), whichever is longer, and the handoff names that attempt.
/// `None` (the waiter looks again instead) unless the client's lease is
/// known to last the reservation and the waiter is still waiting in it.
fn handoff(
    gone: bool,
    nodes: &Weak<Nodes>,
    session: &Weak<Session>,
    lease_ends: &Weak<LeaseEnds>,
    token: Token,
) -> Option<Handoff> {
    if !gone {
        return None;
    }
    let (nodes, session, lease_ends) =
        (nodes.upgrade()?, session.upgrade()?, lease_ends.upgrade()?);
    let lease = session.lease();
    let now = Instant::now();
    let mut map = nodes.lock().unwrap_or_else(|p| p.into_inner());
    let node = map.get_mut(&token)?;
    let (attempt, timeout, hold_for) = node.place?;
    if node.lease != lease.id
        || !matches!(node.role, Role::Waiting { .. })
        || lease.expires < now + timeout + HANDOFF_MARGIN
    {
        return None;
    }
    let fence = fence(node.created).ok()?;
    // This task is the waiter's watch: it ends here, and is not aborted.
    let watch = std::mem::replace(
        &mut node.role,
        Role::Holding {
            end: lease_ends.schedule(token, now + hold_for.max(timeout)),
            since: now,
        },
    );
    if let Role::Waiting { watch: Some(w) } = watch {
        drop(w.task);
    }
    drop(map);
    Some(Handoff::new(token, fence, attempt))
}

/// Watches `target` until it changes (or the watch fails): returns when
/// the waiter should look again, whether the key it watched (one key) is
/// gone, and whether that hands the waiter the lock (the target's own
/// word, or what a read found when the key ahead of it went: see
/// [`Ahead`]).
async fn watch_until_changed(
    mut watches: WatchClient,
    kv: KvClient,
    timeout: Duration,
    target: Target,
) -> (bool, bool) {
    const LOOK_AGAIN: (bool, bool) = (false, false);
    let mut options = WatchOptions::new();
    if target.prefix {
        options = options.with_prefix();
    }
    if !target.puts {
        options = options.with_filters([WatchFilterType::NoPut]);
    }
    let key = target.key.clone().unwrap_or_default();
    // Events at or before the waiter's read tell what it saw already. A
    // watch made on a member behind that read starts before it, and a
    // key's name is used again (see `slots`): the deletion of an earlier
    // key of the name must not pass for that of the key the waiter saw.
    let floor = target.read_at;
    let fresh = |e: &&etcd_client::Event| e.kv().is_none_or(|kv| kv.mod_revision() > floor);
    let news = |r: &etcd_client::WatchResponse| r.events().iter().any(|e| fresh(&e));
    let Ok(mut stream) = watches.watch(key, Some(options)).await else {
        return LOOK_AGAIN;
    };
    // The key ahead of the one watched, on the same stream, asked for at
    // once: etcd makes the two watches one after the other.
    if let Some(a) = &target.ahead {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        if stream.watch(a.key.as_str(), Some(options)).await.is_err() {
            return LOOK_AGAIN;
        }
    }
    // The first answer says the watch stands, and the revision the store
    // had reached just before (the watch starts after it).
    let (watched, mut stood_at) = match stream.message().await {
        Ok(Some(r)) if !r.canceled() && r.events().is_empty() => {
            (r.watch_id(), header_revision(&r))
        }
        _ => return LOOK_AGAIN,
    };
    let mut hands_over = target.hands_over;
    // A deletion, of the one key watched, says it is gone.
    let gone = |r: &etcd_client::WatchResponse| {
        !target.prefix
            && r.events()
                .iter()
                .filter(fresh)
                .all(|e| e.event_type() == etcd_client::EventType::Delete)
    };
    // The watch of the key ahead, standing. etcd reads its revision and
    // then makes the watch from the next, so a write between the two
    // leaves the watch behind the store, where its events wait for the
    // catch-up every 100 ms; when the store had reached the same revision
    // for both watches, no write came while the first was made, and it
    // stands where events come as they happen.
    let mut ahead = None;
    let mut watched_on_time = false;
    if target.ahead.is_some() {
        ahead = loop {
            match stream.message().await {
                Ok(Some(r)) if r.canceled() => return LOOK_AGAIN,
                Ok(Some(r)) if r.watch_id() == watched && news(&r) => {
                    return (gone(&r), hands_over);
                }
                Ok(Some(r)) if r.created() && r.watch_id() != watched => {
                    watched_on_time = stood_at > 0 && header_revision(&r) == stood_at;
                    stood_at = stood_at.max(header_revision(&r));
                    break Some(r.watch_id());
                }
                Ok(Some(_)) => {}
                _ => return LOOK_AGAIN,
            }
        };
    }
    // Both watches stand from the revision of the waiter's read on: no
    // write came between, so nothing it saw can have changed unseen.
    let missed_nothing = target.read_at > 0 && stood_at == target.read_at;
    let seen = if missed_nothing {
        Seen::Same
    } else {
        changed_meanwhile(&kv, timeout, &target.seen).await
    };
    match seen {
        Seen::Same => {}
        Seen::Gone if target.ahead.is_none() => {
            return (!target.prefix && !target.puts, hands_over);
        }
        Seen::Gone | Seen::Changed => return LOOK_AGAIN,
    }
    // The next answer with an event (or the stream's end) wakes the waiter;
    // one on the key ahead makes it read whether its predecessor heads the
    // queue now.
    loop {
        match stream.message().await {
            Ok(Some(r)) if r.canceled() => return LOOK_AGAIN,
            Ok(Some(r)) if !news(&r) => {}
            Ok(Some(r)) if Some(r.watch_id()) == ahead => {
                if hands_over {
                    continue;
                }
                let (Some(a), Some(predecessor)) = (&target.ahead, &target.key) else {
                    return LOOK_AGAIN;
                };
                let Some(read_at) = heads_the_queue(&kv, timeout, a, predecessor).await else {
                    return LOOK_AGAIN;
                };
                hands_over = true;
                if watched_on_time {
                    continue;
                }
                // A second watch of the predecessor, from the read on, when
                // the first may be behind the store (see above): two
                // watches made at different moments are rarely both behind.
                let options = WatchOptions::new()
                    .with_start_revision(read_at + 1)
                    .with_filters([WatchFilterType::NoPut]);
                if stream
                    .watch(predecessor.as_str(), Some(options))
                    .await
                    .is_err()
                {
                    return LOOK_AGAIN;
                }
            }
            Ok(Some(r)) => return (gone(&r), hands_over),
            _ => return LOOK_AGAIN,
        }
    }
}

/// Whether `predecessor` heads the lock's queue with the waiter of `ahead`
/// right behind it: one read, served by the member from what it has
/// applied (a state in which both keys exist and none is ahead of them
/// holds until the predecessor's deletion, however old the state). False
/// when the read fails.
async fn heads_the_queue(
    client: &KvClient,
    timeout: Duration,
    ahead: &Ahead,
    predecessor: &str,
) -> Option<i64> {
    let txn = near(&ahead.dir, &ahead.mine, ahead.created, true);
    let answer = retried(client, timeout, "reading a lock's queue", |mut c| {
        let txn = txn.clone();
        async move { c.txn(txn).await }
    })
    .await
    .ok()?;
    let queue = Queue::of(&all_gets(&answer).ok()?);
    let predecessor = (predecessor, ahead.predecessor);
    heads_with(&queue, predecessor, (&ahead.mine, ahead.created)).then(|| revision(&answer))
}

/// Whether the part of a queue a waiter reads (see [`near`]) has
/// `predecessor` at its head and the waiter's key `mine` right behind it,
/// nothing else: the waiter is next, and the predecessor's deletion hands
/// it the lock. Each key is compared by its name and its create revision:
/// the read may be of a state older than the waiter's key, where an
/// earlier key of the same name (see `slots`) stood.
fn heads_with(queue: &Queue, predecessor: (&str, i64), mine: (&str, i64)) -> bool {
    matches!(
        queue.entries.as_slice(),
        [first, second] if (first.key.as_str(), first.created) == predecessor
            && (second.key.as_str(), second.created) == mine
    )
}

/// What a read found of the keys a waiter saw.
enum Seen {
    /// Each as it was.
    Same,
    /// One gone, the rest as they were.
    Gone,
    /// Written again, or the read failed.
    Changed,
}

/// Whether any key of `seen` is gone or was written again since: one read
/// of them all (changed when the read fails: the waiter looks again).
async fn changed_meanwhile(client: &KvClient, timeout: Duration, seen: &[(String, i64)]) -> Seen {
    let reads: Vec<TxnOp> = seen
        .iter()
        .map(|(key, _)| TxnOp::get(key.as_str(), None))
        .collect();
    if reads.is_empty() {
        return Seen::Same;
    }
    let txn = Txn::new().and_then(reads);
    let Ok(answer) = retried(client, timeout, "checking a watched key", |mut c| {
        let txn = txn.clone();
        async move { c.txn(txn).await }
    })
    .await
    else {
        return Seen::Changed;
    };
    let responses = answer.op_responses();
    if responses.len() != seen.len() {
        return Seen::Changed;
    }
    let mut gone = false;
    for (r, (_, modified)) in responses.iter().zip(seen) {
        match r {
            TxnOpResponse::Get(get) => match get.kvs().first() {
                None => gone = true,
                Some(kv) if kv.mod_revision() == *modified => {}
                Some(_) => return Seen::Changed,
            },
            _ => return Seen::Changed,
        }
    }
    if gone { Seen::Gone } else { Seen::Same }
}

/// The read of the part of a lock's (or a writer's) queue its waiter at
/// `key` (created at revision `created`) needs: the head, the key created
/// last before its own (its predecessor, as etcd's own lock recipe finds
/// it) and its own key. A serializable read is served by the member from
/// what it has applied, without a round of the quorum.
fn near(dir: &str, key: &str, created: i64, serializable: bool) -> Txn {
    let options = |order| {
        let o = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, order)
            .with_limit(1);
        if serializable {
            o.with_serializable()
        } else {
            o
        }
    };
    let mine = serializable.then(|| GetOptions::new().with_serializable());
    Txn::new().and_then([
        TxnOp::get(dir, Some(options(SortOrder::Ascend))),
        TxnOp::get(
            dir,
            Some(options(SortOrder::Descend).with_max_create_revision(created - 1)),
        ),
        TxnOp::get(key, mine),
    ])
}

/// The error of an attempt made on the client's lease before the current
/// one: the next attempt is made on the current one.
fn lease_changed() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the client's etcd lease changed during the attempt",
    )
}

/// A revision as a fencing token: positive on every real cluster.
fn fence(revision: i64) -> Result<FencingToken> {
    u64::try_from(revision)
        .ok()
        .filter(|r| *r > 0)
        .map(FencingToken::new)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("etcd reported revision {revision}"),
            )
        })
}

/// The revision a transaction was applied at.
fn revision(answer: &TxnResponse) -> i64 {
    answer.header().map_or(0, |h| h.revision())
}

/// The revision in a watch answer's header: for the answer that says a
/// watch was created, the store's revision just before it was (etcd's
/// watch server reads it, then registers the watch from the next).
fn header_revision(answer: &etcd_client::WatchResponse) -> i64 {
    answer.header().map_or(0, |h| h.revision())
}

/// The key-values of a transaction's last range read.
/// The keys every read of a transaction found, in the order of the reads.
fn all_gets(answer: &TxnResponse) -> Result<Vec<KeyValue>> {
    let mut kvs = Vec::new();
    let mut reads = 0;
    for r in answer.op_responses() {
        if let TxnOpResponse::Get(mut get) = r {
            reads += 1;
            kvs.extend(get.take_kvs());
        }
    }
    if reads == 0 {
        return Err(Error::new(
            ErrorKind::Protocol,
            "etcd answered a transaction without its read",
        ));
    }
    Ok(kvs)
}

/// The keys the last read of a transaction found.
fn last_get(answer: &TxnResponse) -> Result<Vec<KeyValue>> {
    match answer.op_responses().pop() {
        Some(TxnOpResponse::Get(mut get)) => Ok(get.take_kvs()),
        _ => Err(Error::new(
            ErrorKind::Protocol,
            "etcd answered a transaction without its read",
        )),
    }
}

/// How long a kept lock has left, from the deadline its key holds (the
/// releasing client's clock).
fn kept_left(kept: &Entry) -> Option<Duration> {
    let until = kept.mark.strip_prefix(mark::KEPT)?;
    let until: u64 = std::str::from_utf8(until).ok()?.parse().ok()?;
    Some(Duration::from_millis(until.saturating_sub(unix_ms())))
}

/// Milliseconds since the Unix epoch, on this client's clock.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs one request under `timeout`: its answer, or a timeout error.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    what: &str,
    request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<T> {
    let answer = tokio::time::timeout(timeout, request)
        .await
        .map(|r| r.map_err(|e| etcd_error(e, what)));
    net::within(timeout, "etcd", || what.to_owned(), answer)
}

/// Runs the request `request` makes on a clone of `client` within
/// `timeout`, making it again while it fails without having been sent (the
/// member it was routed to refused the connection: a member that is down,
/// before the client's balancer has stopped picking it). A request that was
/// sent is never sent again: its outcome is the caller's to settle.
pub(crate) async fn retried<C: Clone, T, F>(
    client: &C,
    timeout: Duration,
    what: &str,
    mut request: impl FnMut(C) -> F,
) -> Result<T>
where
    F: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        let answer = match tokio::time::timeout_at(deadline, request(client.clone())).await {
            Ok(Err(e)) if never_sent(&e) && Instant::now() + pause < deadline => {
                tracing::trace!(error = %e, "{what}: not sent; sending again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
                continue;
            }
            answer => answer.map(|r| r.map_err(|e| etcd_error(e, what))),
        };
        return net::within(timeout, "etcd", || what.to_owned(), answer);
    }
}

/// Whether a request failed before it was sent: its connection could not
/// be made.
fn never_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable && status.message().contains("connect error")
        }
        _ => false,
    }
}

/// Deletes the key `key` (of create revision `created`; 0: whichever),
/// retrying until it is gone (true), or the store is dropped (its lease is
/// then revoked, and its keys go with it). A failure no retry mends by
/// itself (the client's role lost its rights to the key) is logged as a
/// warning, once: the key, held under the client's lease, stays taken
/// until the deletion goes through.
async fn discard_in(session: Weak<Session>, key: String, created: i64) -> bool {
    let mut pause = Duration::from_millis(20);
    let mut warned = false;
    loop {
        let Some((mut client, timeout)) = session.upgrade().map(|s| (s.client(), s.timeout()))
        else {
            return false;
        };
        let mut txn = Txn::new();
        if created > 0 {
            txn = txn.when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                created,
            )]);
        }
        let txn = txn.and_then([TxnOp::delete(key.as_str(), None)]);
        match bounded(timeout, "deleting a lock's key", client.txn(txn)).await {
            Ok(_) => return true,
            Err(e) if !e.is_retryable() && !std::mem::replace(&mut warned, true) => {
                tracing::warn!(key = %key, error = %e, "deleting a lock's key failed, and retrying will not mend it: the key stays taken until its deletion goes through (retried every 2 s) or the client closes")
            }
            Err(e) => tracing::debug!(key = %key, error = %e, "deleting a key failed; retrying"),
        }
        drop(client);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(keys: &[&str]) -> Queue {
        Queue {
            entries: keys
                .iter()
                .enumerate()
                .map(|(i, k)| Entry {
                    key: (*k).to_owned(),
                    created: i as i64 + 1,
                    modified: i as i64 + 1,
                    mark: mark::LOCK.to_vec(),
                    token: None,
                })
                .collect(),
        }
    }

    #[test]
    fn only_a_predecessor_at_the_head_right_ahead_hands_over() {
        // `queue` numbers the keys' create revisions from 1, in order.
        let (p, w) = (("p", 1), ("w", 2));
        // The predecessor holds and the waiter is next.
        assert!(heads_with(&queue(&["p", "w"]), p, w));
        // Another key still heads the queue, ahead of the predecessor.
        assert!(!heads_with(&queue(&["x", "p", "w"]), ("p", 2), ("w", 3)));
        // The predecessor left; the key ahead of the waiter is another.
        assert!(!heads_with(&queue(&["x", "w"]), p, w));
        // The predecessor is gone too: the waiter heads the queue (it looks
        // again and takes the lock that way).
        assert!(!heads_with(&queue(&["w"]), p, ("w", 1)));
        // The waiter's own key is gone (its lease ended).
        assert!(!heads_with(&queue(&["p"]), p, w));
        // Earlier keys of the same names, in a state older than the
        // waiter's key (names are used again: see `slots`).
        assert!(!heads_with(&queue(&["p", "w"]), ("p", 7), ("w", 8)));
        assert!(!heads_with(&queue(&["p", "w"]), p, ("w", 8)));
    }

    #[test]
    fn a_queue_key_names_its_token_in_its_value() {
        let token = Token::random();
        let kept = b"k:1700000000000".to_vec();
        let e = Entry::parse("l/x/ab.0".into(), 3, 4, &queue_value(&kept, &token));
        assert_eq!((e.mark.as_slice(), e.token), (kept.as_slice(), Some(token)));
        assert_eq!((e.created, e.modified), (3, 4));
        let e = Entry::parse("l/x/ab.1".into(), 5, 5, &queue_value(mark::WRITE, &token));
        assert_eq!((e.mark.as_slice(), e.token), (mark::WRITE, Some(token)));
        // A key of an earlier build: named for its token, its mark alone.
        let e = Entry::parse(format!("l/x/{}", token.as_str()), 6, 6, mark::LOCK);
        assert_eq!((e.mark.as_slice(), e.token), (mark::LOCK, Some(token)));
        let e = Entry::parse("l/x/ab.2".into(), 7, 7, mark::LOCK);
        assert_eq!((e.mark.as_slice(), e.token), (mark::LOCK, None));
    }

    #[test]
    fn a_waiter_right_behind_the_head_is_handed_over_by_its_deletion() {
        let q = queue(&["h", "a", "b"]);
        let next = waits(&q, 1, Admission::Permits(1)).expect("waits");
        assert_eq!(next.key.as_deref(), Some("h"));
        assert!(next.hands_over);
        let further = waits(&q, 2, Admission::Permits(1)).expect("waits");
        assert_eq!(further.key.as_deref(), Some("a"));
        assert!(!further.hands_over, "its predecessor does not hold");
        assert!(waits(&q, 0, Admission::Permits(1)).is_none());
    }
}

/// The store driven through its [`LockStore`] boundary on a real etcd
/// member, in orders a client makes only under load or a frozen process.
#[cfg(all(test, feature = "testing"))]
mod on_a_server {
    use lockguard_core::store::Resource;
    use tokio::sync::mpsc;

    use super::*;
    use crate::testing::EtcdServer;

    /// An inbox passing on the handoffs made to its client's waiters.
    struct Handoffs(mpsc::UnboundedSender<Handoff>);

    impl Inbox for Handoffs {
        fn is_wanted(&self, _: &str) -> bool {
            false
        }
        fn deliver(&self, _: &str, _: &[u8]) {}
        fn handoff(&self, handoff: Handoff) {
            let _ = self.0.send(handoff);
        }
        fn wake(&self, _: &Token) {}
        fn near(&self, _: &Token) {}
        fn wake_all(&self) {}
    }

    /// A store of a client of its own on `server`, its lease's TTL 10 s.
    async fn store(server: &EtcdServer) -> Arc<EtcdStore> {
        let url = format!("http://{}", server.endpoint());
        let client = EtcdClient::connect([url], None)
            .await
            .expect("connect to etcd");
        let session = Session::open(client, Duration::from_secs(10), Duration::from_secs(5))
            .await
            .expect("the client's lease");
        EtcdStore::new(session, "/lockguard-test/".to_owned())
    }

    /// Two clients on a fresh member, `a` holding the lock `handed` with
    /// `lease`, then releasing it to `b`'s waiter, queued behind it with a
    /// place kept for `timeout`: the handoff, made when `b` heard of it.
    struct HandedOver {
        _server: EtcdServer,
        a: Arc<EtcdStore>,
        b: Arc<EtcdStore>,
        keys: Arc<LockKeys>,
        waiter: Token,
        timeout: Duration,
        handoff: Handoff,
        heard: Instant,
        _inbox: Arc<dyn Inbox>,
    }

    impl HandedOver {
        async fn new(lease: Duration, timeout: Duration) -> Self {
            let server = EtcdServer::start();
            let (a, b) = (store(&server).await, store(&server).await);
            let (tx, mut handed) = mpsc::unbounded_channel();
            let inbox: Arc<dyn Inbox> = Arc::new(Handoffs(tx));
            b.attach(Arc::downgrade(&inbox));
            let keys = Arc::new(LockKeys::checked("lg:", "handed", Resource::Lock).expect("a key"));
            let (first, waiter) = (Token::random(), Token::random());
            let held = a.acquire(&keys, &first, lease, None).await.expect("take");
            assert!(matches!(held, Outcome::Acquired { .. }), "{held:?}");
            let place = Some(Place::new(waiter, 1, timeout));
            let queued = b
                .acquire(&keys, &waiter, lease, place)
                .await
                .expect("queue");
            assert!(matches!(queued, Outcome::Busy(_)), "{queued:?}");
            assert!(a.release(&keys, &first).await.expect("release"));
            let handoff = tokio::time::timeout(Duration::from_secs(10), handed.recv())
                .await
                .expect("handed over within 10 s")
                .expect("a handoff");
            assert_eq!(handoff.token, waiter);
            Self {
                _server: server,
                a,
                b,
                keys,
                waiter,
                timeout,
                handoff,
                heard: Instant::now(),
                _inbox: inbox,
            }
        }

        /// The waiter's attempt number `attempt`, with `lease`.
        async fn attempt(&self, attempt: u32, lease: Duration) -> Outcome {
            let place = Some(Place::new(self.waiter, attempt, self.timeout));
            self.b
                .acquire(&self.keys, &self.waiter, lease, place)
                .await
                .expect("the waiter's attempt")
        }

        /// Asserts that another acquisition, through `a`, finds the lock
        /// taken: `when` says when, for the message.
        async fn still_taken(&self, when: &str) {
            let other = Token::random();
            let tried = self
                .a
                .acquire(&self.keys, &other, Duration::from_secs(1), None)
                .await
                .expect("try");
            assert!(matches!(tried, Outcome::Busy(_)), "taken {when}: {tried:?}");
        }

        /// Releases the waiter's hold, which must still be there.
        async fn release(&self) {
            assert!(
                self.b
                    .release(&self.keys, &self.waiter)
                    .await
                    .expect("release"),
                "the waiter's hold was gone before its release"
            );
        }
    }

    /// A waiter handed the lock by its watch, whose caller does not take
    /// the handoff (too old to place when it looked, or its process frozen
    /// past it), claims it with its next attempt: the hold then lasts that
    /// attempt's lease, as the caller counts it, not the handoff's. (The
    /// client used to keep the handoff's end, and delete the key while its
    /// caller held the lock: the history checker caught two holders, one a
    /// worker resumed from a pause.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_handoff_claimed_by_a_later_attempt_lasts_that_attempts_lease() {
        const LEASE: Duration = Duration::from_secs(2);
        let handed = HandedOver::new(LEASE, Duration::from_secs(1)).await;
        // The caller lets the handoff go; its next attempt claims the lock
        // half a lease later.
        tokio::time::sleep(LEASE / 2).await;
        let claimed_at = Instant::now();
        match handed.attempt(2, LEASE).await {
            Outcome::Acquired { fence, .. } => assert_eq!(fence, handed.handoff.fence),
            other => panic!("the handed lock not claimed: {other:?}"),
        }
        // Past the handoff's end (a quarter of a lease), inside the claim's
        // lease (a quarter of a lease before its end): still the waiter's.
        tokio::time::sleep_until(claimed_at + LEASE * 3 / 4).await;
        handed.still_taken("while the claim's lease ran").await;
        handed.release().await;
    }

    /// A handoff is the waiter's for the reservation it promises (the
    /// place's timeout, on which the waiter counts until it confirms the
    /// hold with its lease), even past a shorter lease. (The client used
    /// to end it at the lease, and delete the key under a waiter whose
    /// confirmation came late.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_handoff_lasts_its_reservation_past_a_shorter_lease() {
        const LEASE: Duration = Duration::from_millis(500);
        let handed = HandedOver::new(LEASE, Duration::from_secs(3)).await;
        // Past the lease by a second, a second and a half inside the
        // reservation.
        tokio::time::sleep_until(handed.heard + LEASE * 3).await;
        handed.still_taken("inside the handoff's reservation").await;
        match handed.attempt(2, LEASE).await {
            Outcome::Acquired { fence, .. } => assert_eq!(fence, handed.handoff.fence),
            other => panic!("the handed lock not claimed: {other:?}"),
        }
        handed.release().await;
    }
}
