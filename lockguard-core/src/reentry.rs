//! Reentrancy, scoped to a body: inside [`LockGuard::scope`] (and so inside
//! [`Lock::run`](crate::Lock::run) and the `#[distributed_lock]` bodies),
//! acquiring the lock the scope holds, on the same client, gives a
//! reentrant guard at once, without a round trip. Outside any scope every
//! acquisition is its own owner, so requests served by one task, or the
//! branches of one `join!`, exclude each other as they would across
//! processes.

use std::future::Future;
use std::sync::{Arc, Weak};

use crate::engine::Engine;
use crate::guard::{Guards, LockGuard};

/// A lock an enclosing scope holds.
#[derive(Debug, Clone)]
struct Scoped {
    /// The client, by identity.
    engine: Weak<Engine>,
    guards: Weak<Guards>,
}

tokio::task_local! {
    /// The locks held by the scopes the current code runs inside.
    static SCOPE: Arc<Vec<Scoped>>;
}

/// The lock on `key` (its store key) that an enclosing scope holds through
/// `engine`, if it is still held.
pub(crate) fn find(engine: &Arc<Engine>, key: &str) -> Option<Arc<Guards>> {
    SCOPE
        .try_with(|held| {
            held.iter().rev().find_map(|h| {
                if !std::ptr::eq(h.engine.as_ptr(), Arc::as_ptr(engine)) {
                    return None;
                }
                let guards = h.guards.upgrade()?;
                (guards.key() == key && guards.is_held()).then_some(guards)
            })
        })
        .ok()
        .flatten()
}

/// Runs `body` as the holder of every lock in `guards` (see
/// [`LockGuard::scope`]).
pub(crate) fn scope_all<F: Future>(
    guards: &[LockGuard],
    body: F,
) -> impl Future<Output = F::Output> + use<F> {
    let mut held: Vec<Scoped> = SCOPE.try_with(|h| h.to_vec()).unwrap_or_default();
    for guard in guards {
        held.push(Scoped::of(guard.guards()));
    }
    SCOPE.scope(Arc::new(held), body)
}

impl Scoped {
    fn of(guards: &Arc<Guards>) -> Self {
        Self {
            engine: Arc::downgrade(guards.engine()),
            guards: Arc::downgrade(guards),
        }
    }
}

impl LockGuard {
    /// Runs `body` as the holder of this lock: inside it (and in the
    /// functions it awaits), acquiring this lock again on the same client
    /// gives a reentrant guard at once, without a round trip and without
    /// deadlock, as nested `#[distributed_lock]` functions do. The scope
    /// does not reach tasks spawned from `body`: they, like every other
    /// task, are excluded as usual.
    ///
    /// The guard stays yours: `scope` neither releases it nor watches the
    /// lease (see [`Lock::run`](crate::Lock::run) for both).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// let lg = lockguard_core::Client::memory();
    /// let guard = lg.lock("ledger").acquire().await?;
    /// let nested = guard
    ///     .scope(async {
    ///         // Reentrant: no round trip, no deadlock.
    ///         let inner = lg.lock("ledger").acquire().await?;
    ///         Ok::<_, lockguard_core::Error>(inner.is_reentrant())
    ///     })
    ///     .await?;
    /// assert!(nested);
    /// // Outside the scope, the same task is another owner.
    /// assert!(lg.lock("ledger").try_acquire().await.unwrap_err().is_busy());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> + use<F> {
        scope_all(std::slice::from_ref(self), body)
    }
}
