//! The in-memory store's rate limiters: a table per limiter, keyed by the
//! limiter's own keys, so that a check finds its state from the key the
//! caller gave, without building (and hashing) a store key around it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::expiring::{self, Expiring};
use super::shards::Shards;
use crate::clock::{self, Clock};
use crate::rate_limit::{Decision, fixed_window, gcra, sliding_window};
use crate::store::LimitOp;

/// Rate-limit state of one key.
#[derive(Debug)]
enum LimitState {
    Gcra(i64),
    Fixed(fixed_window::Window),
    Sliding(sliding_window::Log),
}

/// One limiter's state (one store key base: the client's prefix, the
/// algorithm and the name), by key.
///
/// Keys come from clients (an IP address, a header): each shard's map
/// hashes them with std's keyed `SipHash`, so nobody can choose keys that
/// collide. (The shard is picked by a cheaper hash, which only spreads
/// keys: see [`Shards`].)
#[derive(Debug)]
pub(crate) struct LimitTable {
    shards: Shards<Expiring<i64, LimitState>>,
    clock: Arc<dyn Clock>,
}

impl LimitTable {
    fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            shards: Shards::new(|n| Expiring::with_floor((expiring::SWEEP_FLOOR / n).max(16))),
            clock,
        }
    }

    /// Runs `op` for `key` on the store's clock, at a cost of `cost`;
    /// `peek` changes nothing.
    pub(crate) fn decide(&self, key: &str, op: LimitOp, cost: u64, peek: bool) -> Decision {
        let now = clock::micros(&*self.clock);
        let LimitOp::Gcra(p) = op else {
            return self.decide_window(key, op, cost, peek, now);
        };
        let mut limits = self.shards.lock(key);
        // A key seen before, even if its state has expired (a full
        // budget): one lookup, updated in place.
        let Some((state, ends, live)) = limits.slot_mut(key, now) else {
            return Self::decide_first(&mut limits, key, p, cost, peek, now);
        };
        let tat = match state {
            LimitState::Gcra(tat) if live => Some(*tat),
            _ => None,
        };
        let (d, new_tat) = gcra::step(p, tat, now, cost);
        if let Some(t) = new_tat.filter(|_| !peek) {
            (*state, *ends) = (LimitState::Gcra(t), Some(t));
        }
        d
    }

    /// GCRA for a key with no state in `limits` (its shard, locked): its
    /// first check, or its first since a sweep. Out of the line of a key
    /// checked again and again.
    #[inline(never)]
    fn decide_first(
        limits: &mut Expiring<i64, LimitState>,
        key: &str,
        p: gcra::Params,
        cost: u64,
        peek: bool,
        now: i64,
    ) -> Decision {
        let (d, new_tat) = gcra::step(p, None, now, cost);
        if let Some(t) = new_tat.filter(|_| !peek) {
            limits.insert_new(key, LimitState::Gcra(t), Some(t), now);
        }
        d
    }

    /// The window algorithms' steps, out of the line of GCRA's, the
    /// default.
    #[inline(never)]
    fn decide_window(&self, key: &str, op: LimitOp, cost: u64, peek: bool, now: i64) -> Decision {
        let mut limits = self.shards.lock(key);
        match op {
            LimitOp::Gcra(_) => unreachable!("GCRA is decided by `decide`"),
            LimitOp::Fixed { limit, period_us } => {
                let w = match limits.get(key, now) {
                    Some((LimitState::Fixed(w), _)) => Some(*w),
                    _ => None,
                };
                let (d, new_w) = fixed_window::step(limit, period_us, w, now, cost);
                if let Some(w) = new_w.filter(|_| !peek) {
                    limits.insert(key, LimitState::Fixed(w), Some(w.ends_at), now);
                }
                d
            }
            LimitOp::Sliding { limit, period_us } if peek => {
                let mut log = match limits.get(key, now) {
                    Some((LimitState::Sliding(log), _)) => log.clone(),
                    _ => sliding_window::Log::default(),
                };
                sliding_window::step(limit, period_us, &mut log, now, cost)
            }
            LimitOp::Sliding { limit, period_us } => {
                let (state, ends) = limits.entry(key, now, || {
                    (LimitState::Sliding(sliding_window::Log::default()), None)
                });
                if !matches!(state, LimitState::Sliding(_)) {
                    *state = LimitState::Sliding(sliding_window::Log::default());
                }
                let LimitState::Sliding(log) = state else {
                    unreachable!("set just above")
                };
                let d = sliding_window::step(limit, period_us, log, now, cost);
                *ends = log.expires_at(period_us);
                d
            }
        }
    }

    /// Whether any key still has state: a table without is a full budget
    /// for every key, as good as none.
    fn is_idle(&self) -> bool {
        let now = clock::micros(&*self.clock);
        self.shards.all(|limits| limits.is_empty_at(now))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.each().map(|l| l.len()).sum()
    }
}

/// Every limiter's table, by store key base (`{prefix}rl:{algorithm}:{name}:`).
///
/// A check finds its limiter's table under a read lock, which checks of
/// every thread share; the tables of limiters made and dropped on the fly
/// (a name per tenant) are dropped once no key has state left, checked
/// each time the registry doubles, so their number stays bounded too.
#[derive(Debug)]
pub(crate) struct Limits {
    /// Tells this registry's tables from another store's in the threads'
    /// caches of the last table used.
    id: u64,
    tables: RwLock<Registry>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
struct Registry {
    by_base: HashMap<Box<str>, Arc<LimitTable>>,
    sweep_at: usize,
}

/// A thread's last table: its registry, its limiter's identity, the table.
type LastTable = (u64, Arc<str>, Arc<LimitTable>);

/// Below this many tables the registry is never swept.
const TABLES_FLOOR: usize = 64;

impl Limits {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Self {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            tables: RwLock::new(Registry {
                by_base: HashMap::new(),
                sweep_at: TABLES_FLOOR,
            }),
            clock,
        }
    }

    /// Runs `op` for `key` of the limiter `limiter`; see
    /// [`LimitTable::decide`].
    pub(crate) fn decide(
        &self,
        limiter: &Arc<str>,
        key: &str,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Decision {
        self.with_table(limiter, |table| table.decide(key, op, cost, peek))
    }

    /// The table of `limiter`, for a limiter to hold (see
    /// [`Store::limit_table`](crate::store::Store::limit_table)).
    pub(crate) fn held(&self, limiter: &Arc<str>) -> Arc<LimitTable> {
        self.with_table(limiter, Arc::clone)
    }

    /// Runs `f` on the table of `limiter`. The table this thread used last,
    /// when it is this limiter's: calls of one limiter again and again on
    /// one thread (its peeks, or the checks of a limiter made per call)
    /// find its table with no hash and no lock.
    fn with_table<T>(&self, limiter: &Arc<str>, f: impl FnOnce(&Arc<LimitTable>) -> T) -> T {
        thread_local! {
            static LAST: std::cell::RefCell<Option<LastTable>> =
                const { std::cell::RefCell::new(None) };
        }
        LAST.with_borrow_mut(|last| {
            if let Some((id, base, table)) = last.as_ref()
                && *id == self.id
                && (Arc::ptr_eq(base, limiter) || **base == **limiter)
            {
                return f(table);
            }
            let table = self.registered(limiter);
            let out = f(&table);
            *last = Some((self.id, limiter.clone(), table));
            out
        })
    }

    /// The table of `limiter` from the registry, made if it is new: off
    /// the path of a thread that checks one limiter again and again.
    #[inline(never)]
    fn registered(&self, limiter: &Arc<str>) -> Arc<LimitTable> {
        let table = {
            let registry = self.tables.read().unwrap_or_else(PoisonError::into_inner);
            registry.by_base.get(&**limiter).cloned()
        };
        table.unwrap_or_else(|| self.table(limiter))
    }

    /// The table of the limiter whose store keys start with `base`.
    pub(crate) fn table(&self, base: &str) -> Arc<LimitTable> {
        // Every update below is complete before it can panic.
        let mut registry = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(table) = registry.by_base.get(base) {
            return table.clone();
        }
        if registry.by_base.len() >= registry.sweep_at {
            // Held only here, with no state left: nobody can tell it from
            // a new one.
            registry
                .by_base
                .retain(|_, t| Arc::strong_count(t) > 1 || !t.is_idle());
            registry.sweep_at = (registry.by_base.len() * 2).max(TABLES_FLOOR);
        }
        let table = Arc::new(LimitTable::new(self.clock.clone()));
        registry.by_base.insert(base.into(), table.clone());
        table
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let registry = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        registry.by_base.values().map(|t| t.len()).sum()
    }

    #[cfg(test)]
    pub(crate) fn tables(&self) -> usize {
        let registry = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        registry.by_base.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::rate_limit::Quota;

    fn gcra(per_second: u64) -> LimitOp {
        LimitOp::Gcra(gcra::Params::new(&Quota::per_second(per_second)))
    }

    /// A limiter's keys spend one budget each, escaped keys included,
    /// and another limiter's are another budget.
    #[test]
    fn each_limiter_and_key_has_a_budget_of_its_own() {
        let limits = Limits::new(Arc::new(ManualClock::new()));
        let base = "t:rl:gcra:api:";
        let table = limits.table(base);
        // The limiter's identity in an allocation of its own, as a client
        // keeps it, and a copy of it: both find the one table.
        let (shared, copy): (Arc<str>, Arc<str>) = (base.into(), base.into());
        for key in ["ann", "a}b", "back\\slash", ""] {
            assert!(table.decide(key, gcra(1), 1, false).allowed);
            assert!(
                !limits.decide(&shared, key, gcra(1), 1, false).allowed,
                "{key}"
            );
            assert!(!limits.decide(&copy, key, gcra(1), 1, true).allowed);
            assert!(!table.decide(key, gcra(1), 1, true).allowed);
        }
        // Another limiter's table is another budget.
        assert!(
            limits
                .table("t:rl:gcra:web:")
                .decide("ann", gcra(1), 1, false)
                .allowed
        );
        assert!(
            Arc::ptr_eq(&table, &limits.table(base)),
            "one table per limiter"
        );
    }

    /// Tables of limiters made and dropped on the fly (a name per tenant)
    /// go once nothing holds them and their keys' state has expired; a
    /// held one, or one with state, stays.
    #[test]
    fn idle_tables_nobody_holds_are_dropped() {
        let clock = ManualClock::new();
        let limits = Limits::new(Arc::new(clock.clone()));
        let held = limits.table("t:rl:gcra:held:");
        let busy = limits.table("t:rl:gcra:busy:");
        assert!(
            busy.decide(
                "k",
                LimitOp::Fixed {
                    limit: 5,
                    period_us: 3_600_000_000
                },
                1,
                false
            )
            .allowed
        );
        drop(busy);
        for i in 0..100_000 {
            let table = limits.table(&format!("t:rl:gcra:tenant-{i}:"));
            assert!(table.decide("k", gcra(100), 1, false).allowed);
            if i % 1000 == 999 {
                clock.advance(std::time::Duration::from_millis(20));
            }
        }
        assert!(
            limits.tables() <= 4 * 1000 + TABLES_FLOOR,
            "{} tables kept",
            limits.tables()
        );
        assert!(Arc::ptr_eq(&held, &limits.table("t:rl:gcra:held:")));
        let busy = limits.table("t:rl:gcra:busy:");
        let d = busy.decide(
            "k",
            LimitOp::Fixed {
                limit: 5,
                period_us: 3_600_000_000,
            },
            1,
            true,
        );
        assert_eq!(d.remaining, 3, "the busy table's state was kept");
    }
}
