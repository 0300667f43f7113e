//! Locks held by database sessions of the client's own: the server's own
//! lock (PostgreSQL's advisory locks, MySQL's `GET_LOCK`), waited for in
//! the server, which grants it to its first waiter the moment the holder
//! unlocks or its session ends.
//!
//! [`SessionLocks`] is what every such store does alike: one session per
//! held or awaited lock, taken from the client's idle sessions or opened
//! for it; a wait started on a session of its own whose grant wakes the
//! waiter; leases ended by the client when unrenewed ([`LeaseEnds`]); a
//! session whose answer was lost, or whose wait was given up, never handed
//! on but dropped (its end frees whatever it took); a grant recorded for
//! the waiter timeout and extended to the lease by the waiter's client a
//! third of the way into it, if it still holds the lock then (a short
//! hold sends no extension), so that a waiter that died as it was granted
//! holds the queue up no longer than that. A store gives its statements
//! through [`LockSessions`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::{Inbox, LeaseEnd, LeaseEnds, LockKeys, Outcome, Token, net};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::token::TokenHashing;

/// The most idle sessions a client keeps for later holds.
const IDLE_SESSIONS: usize = 64;

/// The answer of a try on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tried {
    /// The session holds the lock, with this fencing token.
    Taken(FencingToken),
    /// Someone else holds it; the time left of their lease, when known.
    Busy(Option<Duration>),
}

/// The answer of a wait on a session: the lock granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waited {
    /// The fencing token drawn.
    pub fence: FencingToken,
    /// How long the statement waited in the server before the grant, on
    /// the server's clock: from the statement's start to the time the
    /// lease is recorded from. The lease is counted from the wait's send
    /// plus this (never later than its answer), so that a client paused
    /// between the grant and reading it does not count on a lease the
    /// server started earlier.
    pub waited: Duration,
}

impl Waited {
    /// The lock granted with `fence`, `waited` after the statement began.
    pub fn new(fence: FencingToken, waited: Duration) -> Self {
        Self { fence, waited }
    }
}

/// A store's sessions and statements for [`SessionLocks`]: each method
/// runs on one session the engine owns meanwhile, and answers the store's
/// own errors (the engine bounds each with the response timeout).
pub trait LockSessions: Send + Sync + 'static {
    /// One session of the client's locks, its statements prepared.
    type Session: Send + Sync + 'static;
    /// What stops a wait running on a session, from elsewhere.
    type Cancel: Send + 'static;

    /// The store's name, for errors.
    fn name(&self) -> &'static str;

    /// How long a statement may take to answer.
    fn response_timeout(&self) -> Duration;

    /// Opens a session (bounded by the store's connect timeout).
    fn connect(&self) -> impl Future<Output = Result<Self::Session>> + Send;

    /// Whether `session` has ended: its connection is closed.
    fn is_closed(&self, session: &Self::Session) -> bool;

    /// What stops a wait running on `session`.
    fn cancel_handle(&self, session: &Self::Session) -> Self::Cancel;

    /// Stops the wait `cancel` names, if it still runs (best effort: the
    /// waiting session is dropped when its wait ends whatever happens).
    fn cancel(&self, cancel: Self::Cancel) -> impl Future<Output = ()> + Send;

    /// One try of `token` at the lock `key` on `session`, never waiting:
    /// the fencing token drawn, or the holder's lease left.
    fn try_lock(
        &self,
        session: &Self::Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> impl Future<Output = Result<Tried>> + Send;

    /// Waits in the server for the lock `key` on `session` until it is
    /// granted (or cancelled): the fencing token drawn, and how long the
    /// server waited before the grant.
    fn wait(
        &self,
        session: &Self::Session,
        key: &str,
        token: &Token,
        lease: Duration,
    ) -> impl Future<Output = Result<Waited>> + Send;

    /// Unlocks `key` on `session`: true when the session held it.
    fn unlock(
        &self,
        session: &Self::Session,
        key: &str,
        token: &Token,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Records the lease of a hold as `lease` from now, on its session;
    /// with `keep`, kept past the client's end (`at_least`). Answers
    /// whether the session still holds the lock.
    fn renew(
        &self,
        session: &Self::Session,
        hold: &HoldOf<'_>,
        lease: Duration,
        keep: bool,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Ends the lease an attempt of `token` may have recorded for `key`,
    /// on any session.
    fn forget(
        &self,
        session: &Self::Session,
        key: &str,
        token: &Token,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// A hold a renewal names.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HoldOf<'a> {
    /// The lock's key.
    pub key: &'a str,
    /// The holder's token.
    pub token: &'a Token,
    /// Its fencing token.
    pub fence: FencingToken,
}

/// A lock held on a session.
struct Hold<S: LockSessions> {
    session: Arc<S::Session>,
    keys: Arc<LockKeys>,
    token: Token,
    fence: FencingToken,
}

/// What this client knows of one token.
enum Entry<S: LockSessions> {
    /// Waiting in the server, on a session the waiting task owns.
    Waiting { cancel: S::Cancel },
    /// Granted to a waiter that has not claimed it yet, at `at` or later
    /// (the lease recorded, `recorded` long, runs from `at`).
    Granted {
        hold: Hold<S>,
        at: Instant,
        recorded: Duration,
    },
    /// The wait failed; the waiter's next attempt is told.
    Failed(Error),
    /// Held, until `end` unless renewed.
    Holding { hold: Hold<S>, end: LeaseEnd },
    /// Released before its `at_least` passed: kept until `end`.
    Kept { hold: Hold<S>, end: LeaseEnd },
}

/// A client's locks on sessions of its own: its idle sessions and what
/// each token holds or awaits. A store keeps one and calls it from its
/// [`LockStore`](super::LockStore) methods for the keys it serves so.
pub struct SessionLocks<S: LockSessions> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: LockSessions> {
    sessions: S,
    idle: Mutex<Vec<Arc<S::Session>>>,
    entries: Mutex<HashMap<Token, Entry<S>, TokenHashing>>,
    inbox: OnceLock<Weak<dyn Inbox>>,
    ends: Arc<LeaseEnds>,
}

impl<S: LockSessions> fmt::Debug for SessionLocks<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLocks")
            .field("store", &self.inner.sessions.name())
            .field("idle_sessions", &self.inner.idle().len())
            .field("tokens", &self.inner.entries().len())
            .finish_non_exhaustive()
    }
}

impl<S: LockSessions> Drop for SessionLocks<S> {
    fn drop(&mut self) {
        self.inner.ends.close();
        // Waits still running are cancelled; every other session closes
        // with its entry.
        let entries = std::mem::take(&mut *self.inner.entries());
        let cancels: Vec<S::Cancel> = entries
            .into_values()
            .filter_map(|e| match e {
                Entry::Waiting { cancel } => Some(cancel),
                _ => None,
            })
            .collect();
        if !cancels.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let inner = self.inner.clone();
            runtime.spawn(async move {
                for cancel in cancels {
                    inner.sessions.cancel(cancel).await;
                }
            });
        }
    }
}

impl<S: LockSessions> SessionLocks<S> {
    /// The locks of a client whose sessions `sessions` opens.
    pub fn new(sessions: S) -> Self {
        let inner = Arc::new_cyclic(|me: &Weak<Inner<S>>| {
            let me = me.clone();
            Inner {
                sessions,
                idle: Mutex::default(),
                entries: Mutex::default(),
                inbox: OnceLock::new(),
                ends: LeaseEnds::new(move |token, now| expire(&me, token, now)),
            }
        });
        Self { inner }
    }

    /// The store's sessions.
    pub fn sessions(&self) -> &S {
        &self.inner.sessions
    }

    /// Where a waiter is told that the server granted it the lock.
    pub fn attach(&self, inbox: Weak<dyn Inbox>) {
        let _ = self.inner.inbox.set(inbox);
    }

    /// One attempt of `token` at the lock of `keys`: claims a lock the
    /// server granted to its wait; without `wait`, one try; with it (the
    /// waiter's timeout, its place's), a wait in the server, started on a
    /// session of its own (the waiter is woken when it ends), or still
    /// running.
    ///
    /// # Errors
    ///
    /// The store's error, or [`ErrorKind::Timeout`] for a try that did
    /// not answer in time.
    pub async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Outcome> {
        let lapsed = {
            let mut entries = self.inner.entries();
            match entries.remove(token) {
                None => None,
                // The server counts the lease from its grant, which came
                // before its answer, perhaps long before (the client was
                // paused): a lease that ran out before this claim is given
                // back, and the attempt starts anew (below).
                Some(Entry::Granted { hold, at, recorded }) if at + recorded <= Instant::now() => {
                    Some(hold)
                }
                Some(Entry::Granted { hold, at, recorded }) => {
                    let fence = hold.fence;
                    let end = self.inner.ends.schedule(*token, at + recorded);
                    entries.insert(*token, Entry::Holding { hold, end });
                    return Ok(Outcome::Granted {
                        fence,
                        keys: keys.clone(),
                        at,
                        recorded,
                    });
                }
                Some(Entry::Failed(e)) => return Err(e),
                Some(entry @ Entry::Waiting { .. }) => {
                    entries.insert(*token, entry);
                    return Ok(Outcome::Busy(None));
                }
                Some(entry) => {
                    entries.insert(*token, entry);
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        "a token already holding asked to acquire again",
                    ));
                }
            }
        };
        if let Some(hold) = lapsed {
            // Unlocked on its own session before the new attempt asks: the
            // unlock ends the lease first, so it cannot end the lease the
            // new attempt records under the same token, which only a
            // grant after this unlock can draw. A session that fails to
            // answer is dropped (its end frees the lock), its lease left
            // to run out: this token's next draw does not wait for it,
            // others do. Never ended by token from another session
            // (`forget`), which could land after the new attempt's draw.
            let _ = self.inner.unlock(hold).await;
        }
        if let Some(waiter_timeout) = wait {
            self.wait(keys, token, lease, waiter_timeout).await
        } else {
            self.try_lock(keys, token, lease).await
        }
    }

    /// One try, never waiting. The statement runs in the attempt's task
    /// ([`Trying`]); when nobody waits for it any more (the attempt was
    /// dropped, or timed out), the rest runs in a task of its own, which
    /// owns the session until the answer comes, releases a lock it took
    /// and ends its lease.
    async fn try_lock(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
    ) -> Result<Outcome> {
        let (mut session, mut reused) = self.inner.reused_or_new().await?;
        let (session, sent, tried) = loop {
            let sent = Instant::now();
            let trying = Trying::start(&self.inner, session, keys, *token, lease);
            let timeout = self.inner.sessions.response_timeout();
            match tokio::time::timeout(timeout, trying).await {
                Ok((s, Ok(tried))) => break (s, sent, tried),
                Ok((s, Err(_))) if self.inner.again(&s, reused) => {
                    session = Arc::new(self.inner.connect().await?);
                    reused = false;
                }
                Ok((_, Err(e))) => return Err(e),
                Err(_) => {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "acquiring {:?}: no answer from {} within {timeout:?}",
                            keys.id(),
                            self.inner.sessions.name()
                        ),
                    ));
                }
            }
        };
        let fence = match tried {
            Tried::Taken(fence) => fence,
            Tried::Busy(left) => {
                self.inner.put_back(session);
                return Ok(Outcome::Busy(left));
            }
        };
        let end = self.inner.ends.schedule(*token, sent + lease);
        let hold = Hold {
            session,
            keys: keys.clone(),
            token: *token,
            fence,
        };
        self.inner
            .entries()
            .insert(*token, Entry::Holding { hold, end });
        Ok(Outcome::Acquired {
            fence,
            keys: keys.clone(),
        })
    }

    /// Starts `token`'s wait in the server.
    async fn wait(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        waiter_timeout: Duration,
    ) -> Result<Outcome> {
        let (session, reused) = self.inner.reused_or_new().await?;
        let cancel = self.inner.sessions.cancel_handle(&session);
        self.inner
            .entries()
            .insert(*token, Entry::Waiting { cancel });
        tokio::spawn(wait_for(
            self.inner.clone(),
            session,
            reused,
            keys.clone(),
            *token,
            lease,
            waiter_timeout,
        ));
        Ok(Outcome::Busy(None))
    }

    /// Gives up `token`'s lock, or its wait: true when it held the lock.
    ///
    /// # Errors
    ///
    /// The store's error when the unlock did not answer and its session
    /// still runs.
    pub async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        let entry = self.inner.entries().remove(token);
        match entry {
            // An attempt that failed (its answer lost, its session gone)
            // may have taken the lock: its lease is ended.
            None | Some(Entry::Failed(_)) => {
                self.inner.forget(keys, token).await;
                Ok(false)
            }
            Some(Entry::Waiting { cancel }) => {
                // The waiting task drops its session when the wait ends,
                // which frees a lock granted meanwhile.
                let inner = self.inner.clone();
                tokio::spawn(async move { inner.sessions.cancel(cancel).await });
                Ok(false)
            }
            Some(Entry::Granted { hold, .. }) => self.inner.unlock(hold).await,
            Some(Entry::Holding { hold, end } | Entry::Kept { hold, end }) => {
                drop(end);
                self.inner.unlock(hold).await
            }
        }
    }

    /// Renews `token`'s lease to `lease` from now, on its session: true
    /// when it still holds the lock.
    ///
    /// # Errors
    ///
    /// The store's error when the renewal did not answer and its session
    /// still runs.
    pub async fn extend(&self, token: &Token, lease: Duration) -> Result<bool> {
        self.renew(token, lease, false).await
    }

    /// Keeps `token`'s lock for `keep` more, past its client's end.
    ///
    /// # Errors
    ///
    /// As [`extend`](Self::extend).
    pub async fn release_later(&self, token: &Token, keep: Duration) -> Result<bool> {
        self.renew(token, keep, true).await
    }

    async fn renew(&self, token: &Token, lease: Duration, keep: bool) -> Result<bool> {
        let (session, keys, fence) = match self.inner.entries().get(token) {
            Some(Entry::Holding { hold, .. }) => {
                (hold.session.clone(), hold.keys.clone(), hold.fence)
            }
            _ => return Ok(false),
        };
        let what = || format!("extending {:?}", keys.id());
        let sent = Instant::now();
        let hold = HoldOf {
            key: keys.id(),
            token,
            fence,
        };
        let answer = self
            .inner
            .ask(
                || self.inner.sessions.renew(&session, &hold, lease, keep),
                &what,
            )
            .await;
        let mut entries = self.inner.entries();
        let same = matches!(
            entries.get(token),
            Some(Entry::Holding { hold, .. }) if Arc::ptr_eq(&hold.session, &session)
        );
        match answer {
            Ok(true) if same => {
                let end = self.inner.ends.schedule(*token, sent + lease);
                if let Some(Entry::Holding { hold, .. }) = entries.remove(token) {
                    let entry = if keep {
                        Entry::Kept { hold, end }
                    } else {
                        Entry::Holding { hold, end }
                    };
                    entries.insert(*token, entry);
                }
                Ok(true)
            }
            Ok(true) => Ok(false),
            // The session no longer holds it: dropped, which frees
            // whatever it still holds.
            Ok(false) => {
                if same {
                    entries.remove(token);
                }
                Ok(false)
            }
            // The session ended, and the lock with it.
            Err(_) if self.inner.sessions.is_closed(&session) => {
                if same {
                    entries.remove(token);
                }
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

impl<S: LockSessions> Inner<S> {
    fn entries(&self) -> MutexGuard<'_, HashMap<Token, Entry<S>, TokenHashing>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Arc<S::Session>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session. Its future is boxed: a store's connect future is
    /// large (13 KB on PostgreSQL, a TLS handshake and the statements'
    /// preparation), and inline it would make every operation that may
    /// open a session as large, copied whole into the store boundary's box
    /// at each call, though it opens one rarely.
    async fn connect(&self) -> Result<S::Session> {
        Box::pin(self.sessions.connect()).await
    }

    /// An idle session, or a new one.
    async fn session(&self) -> Result<Arc<S::Session>> {
        Ok(self.reused_or_new().await?.0)
    }

    /// An idle session (and true), or a new one (and false).
    async fn reused_or_new(&self) -> Result<(Arc<S::Session>, bool)> {
        loop {
            let Some(session) = self.idle().pop() else {
                break;
            };
            if !self.sessions.is_closed(&session) {
                return Ok((session, true));
            }
        }
        Ok((Arc::new(self.connect().await?), false))
    }

    /// Whether a statement that failed on `session`, taken from the idle
    /// ones, is sent again on a new session: the session ended while idle
    /// (the server restarted, or ended it), so the statement took nothing.
    fn again(&self, session: &S::Session, reused: bool) -> bool {
        reused && self.sessions.is_closed(session)
    }

    /// Keeps `session` for a later hold, unless it is closed or enough
    /// are kept.
    fn put_back(&self, session: Arc<S::Session>) {
        if self.sessions.is_closed(&session) || Arc::strong_count(&session) > 1 {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < IDLE_SESSIONS {
            idle.push(session);
        }
    }

    /// Runs one statement, made by `statement`, within the response
    /// timeout. Made here rather than passed in: an `async fn` keeps its
    /// arguments apart from what it awaits, so a statement's future passed
    /// in would take its room twice in this future.
    async fn ask<T, F: Future<Output = Result<T>>>(
        &self,
        statement: impl FnOnce() -> F,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<T> {
        let timeout = self.sessions.response_timeout();
        let answer = tokio::time::timeout(timeout, statement()).await;
        net::within(timeout, self.sessions.name(), what, answer)
    }

    /// Gives back a lock taken for nobody: unlocked, its lease ended; a
    /// session that fails to do it is dropped (its end frees the lock).
    async fn abandon(&self, hold: Hold<S>) {
        let (keys, token) = (hold.keys.clone(), hold.token);
        if !matches!(self.unlock(hold).await, Ok(true)) {
            self.forget(&keys, &token).await;
        }
    }

    /// Ends the lease an attempt of `token` may have recorded, on any
    /// session; what fails is left to the lease's end.
    async fn forget(&self, keys: &Arc<LockKeys>, token: &Token) {
        let what = || format!("ending an attempt at {:?}", keys.id());
        let Ok(session) = self.session().await else {
            return;
        };
        let answer = self
            .ask(|| self.sessions.forget(&session, keys.id(), token), &what)
            .await;
        if answer.is_ok() {
            self.put_back(session);
        }
    }

    /// Unlocks `hold` on its session: true when the session held it. A
    /// session that fails to answer is dropped: its end frees the lock.
    async fn unlock(&self, hold: Hold<S>) -> Result<bool> {
        let what = || format!("releasing {:?}", hold.keys.id());
        let answer = self
            .ask(
                || {
                    self.sessions
                        .unlock(&hold.session, hold.keys.id(), &hold.token)
                },
                &what,
            )
            .await;
        match answer {
            Ok(held) => {
                if held {
                    self.put_back(hold.session);
                }
                Ok(held)
            }
            // The session ended, and the lock with it.
            Err(_) if self.sessions.is_closed(&hold.session) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The wait of `token` for the lock of `keys`, on `session`: records the
/// grant (or the failure) for the waiter's next attempt, and wakes it. A
/// wait given up meanwhile drops its session.
async fn wait_for<S: LockSessions>(
    inner: Arc<Inner<S>>,
    mut session: Arc<S::Session>,
    reused: bool,
    keys: Arc<LockKeys>,
    token: Token,
    lease: Duration,
    waiter_timeout: Duration,
) {
    // What the grant records: a reservation of the waiter's timeout, which
    // its client extends to the lease a third of the way into it, if it
    // still holds the lock then (the hold's first renewal). A waiter's
    // process may die just before its grant, too late for any server to
    // notice first: its session records the hold and ends as the answer
    // finds no client, and the next holder waits out what was recorded,
    // as for any holder whose session ended. The reservation bounds that
    // by the waiter timeout, never a lease.
    let lease = waiter_timeout.min(lease);
    // A client dropped meanwhile cancels the wait (`SessionLocks`'s drop).
    let mut sent = Instant::now();
    let mut answer = inner
        .sessions
        .wait(&session, keys.id(), &token, lease)
        .await;
    if answer.is_err() && inner.again(&session, reused) {
        // Once more on a new session, whose wait the waiter's release
        // cancels from now on.
        answer = match inner.connect().await {
            Ok(fresh) => {
                session = Arc::new(fresh);
                let cancel = inner.sessions.cancel_handle(&session);
                let waiting = match inner.entries().get_mut(&token) {
                    Some(Entry::Waiting { cancel: c }) => {
                        *c = cancel;
                        true
                    }
                    _ => false,
                };
                if !waiting {
                    return;
                }
                sent = Instant::now();
                inner
                    .sessions
                    .wait(&session, keys.id(), &token, lease)
                    .await
            }
            Err(e) => Err(e),
        };
    }
    let received = Instant::now();
    let waiting = matches!(inner.entries().get(&token), Some(Entry::Waiting { .. }));
    if !waiting {
        // Given up: a cancel may still be on its way to this session, so
        // it serves nothing else; a lease it recorded is ended (also when
        // the cancel cut the statement short: a store whose statement is
        // no transaction may have recorded it).
        drop(session);
        inner.forget(&keys, &token).await;
        return;
    }
    {
        let lock = keys.clone();
        let entry = match answer {
            // From the wait's send plus the server's wait, never later
            // than the answer: a lower bound of the grant on this clock.
            Ok(Waited { fence, waited }) => Entry::Granted {
                hold: Hold {
                    session,
                    keys,
                    token,
                    fence,
                },
                at: (sent + waited).min(received),
                recorded: lease,
            },
            Err(e) => Entry::Failed(e),
        };
        let late = {
            let mut entries = inner.entries();
            if matches!(entries.get(&token), Some(Entry::Waiting { .. })) {
                entries.insert(token, entry);
                None
            } else {
                Some(entry)
            }
        };
        // Given up while the answer was read: as above.
        if let Some(entry) = late {
            drop(entry);
            inner.forget(&lock, &token).await;
            return;
        }
    }
    if let Some(inbox) = inner.inbox.get().and_then(Weak::upgrade) {
        inbox.wake(&token);
    }
}

/// The answer of a try, with its session.
type TryAnswer<S> = (Arc<<S as LockSessions>::Session>, Result<Tried>);

/// A try's statement at the lock of `keys` on its session, polled by the
/// attempt that awaits it: no task, and no channel, between the two.
/// Dropped before its answer (the attempt was dropped, or timed out), it
/// runs the rest in a task of its own, where the answer is nobody's
/// ([`settle`]). Outside a runtime, the statement is dropped with its
/// session, whose end frees what it took.
struct Trying<S: LockSessions> {
    running: Option<Pin<Box<dyn Future<Output = TryAnswer<S>> + Send>>>,
    inner: Arc<Inner<S>>,
    keys: Arc<LockKeys>,
    token: Token,
}

impl<S: LockSessions> Trying<S> {
    /// `token`'s try at the lock of `keys` on `session`, sent at the
    /// first poll.
    fn start(
        inner: &Arc<Inner<S>>,
        session: Arc<S::Session>,
        keys: &Arc<LockKeys>,
        token: Token,
        lease: Duration,
    ) -> Self {
        let running = {
            let (inner, keys) = (inner.clone(), keys.clone());
            Box::pin(async move {
                let answer = inner
                    .sessions
                    .try_lock(&session, keys.id(), &token, lease)
                    .await;
                (session, answer)
            })
        };
        Self {
            running: Some(running),
            inner: inner.clone(),
            keys: keys.clone(),
            token,
        }
    }
}

impl<S: LockSessions> Future for Trying<S> {
    type Output = TryAnswer<S>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<TryAnswer<S>> {
        let running = self
            .running
            .as_mut()
            .expect("a try polled after its answer");
        let answer = std::task::ready!(running.as_mut().poll(cx));
        self.running = None;
        Poll::Ready(answer)
    }
}

impl<S: LockSessions> Drop for Trying<S> {
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, keys, token) = (self.inner.clone(), self.keys.clone(), self.token);
        runtime.spawn(async move {
            let (session, answer) = running.await;
            settle(&inner, session, keys, token, answer).await;
        });
    }
}

/// The answer of `token`'s try that nobody took: a lock taken is released
/// (on the session, which is then kept) and its lease ended.
async fn settle<S: LockSessions>(
    inner: &Inner<S>,
    session: Arc<S::Session>,
    keys: Arc<LockKeys>,
    token: Token,
    answer: Result<Tried>,
) {
    match answer {
        Ok(Tried::Taken(fence)) => {
            let hold = Hold {
                session,
                keys,
                token,
                fence,
            };
            inner.abandon(hold).await;
        }
        Ok(Tried::Busy(_)) => inner.put_back(session),
        // Dropped, which frees what it took; a lease it may have recorded
        // is ended.
        Err(_) => {
            drop(session);
            inner.forget(&keys, &token).await;
        }
    }
}

/// Ends `token`'s hold, whose lease ended by `now` unless it was renewed
/// or released since: it is unlocked in the background.
fn expire<S: LockSessions>(inner: &Weak<Inner<S>>, token: Token, now: Instant) {
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let ended = {
        let mut entries = inner.entries();
        let due = matches!(
            entries.get(&token),
            Some(Entry::Holding { end, .. } | Entry::Kept { end, .. }) if end.at() <= now
        );
        if due { entries.remove(&token) } else { None }
    };
    if let Some(Entry::Holding { hold, .. } | Entry::Kept { hold, .. }) = ended {
        tracing::debug!(lock = %hold.keys.id(), "lease ended; unlocking");
        tokio::spawn(async move {
            if let Err(e) = inner.unlock(hold).await {
                tracing::debug!(error = %e, "unlocking a lock whose lease ended");
            }
        });
    }
}
