//! The in-memory store: the same semantics as Redis, inside one process.
//!
//! Locks and semaphore leases follow tokio's clock (so tests with paused
//! time drive them, like the waiting that goes with them); counters' expiry
//! and rate limiters follow the client's [`Clock`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Attempt, LimitKeys, LimitOp};
use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::rate_limit::{Decision, fixed_window, gcra, sliding_window};
use crate::token::Token;

mod expiring;

use expiring::Expiring;

/// Rate-limit state of one key.
#[derive(Debug)]
enum LimitState {
    Gcra(i64),
    Fixed(fixed_window::Window),
    Sliding(sliding_window::Log),
}

#[derive(Debug, Default)]
struct State {
    locks: Expiring<Instant, Token>,
    /// Semaphore holders: token → lease end.
    permits: Expiring<Instant, HashMap<Token, Instant>>,
    /// One counter for every key: strictly increasing per key as the
    /// guarantee asks, with no state per key.
    fence: u64,
    counters: Expiring<i64, (i64, u64)>,
    marks: Expiring<i64, HashSet<String>>,
    limits: Expiring<i64, LimitState>,
    fenced: HashMap<String, (u64, Vec<u8>)>,
}

/// The in-memory store.
#[derive(Debug)]
pub(crate) struct MemoryStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

fn ms_to_us(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn overflow(key: &str) -> Error {
    Error::invalid(format!(
        "counter {key:?}: increment or decrement would overflow"
    ))
}

impl MemoryStore {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is complete before it can panic (none do), so a
        // poisoned mutex still guards consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_us(&self) -> i64 {
        clock::micros(&*self.clock)
    }

    // ---- locks and semaphores ------------------------------------------

    pub(crate) fn try_acquire(&self, keys: &LockKeys, token: &Token, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut st = self.state();
        let st = &mut *st;
        match keys.permits {
            None => {
                if let Some((_, Some(ends))) = st.locks.get(&keys.lock, now) {
                    return Attempt::Held(Some(ends - now));
                }
                st.locks.insert(&keys.lock, *token, Some(now + lease), now);
            }
            Some(permits) => {
                let (holders, ends) = st.permits.entry(&keys.lock, now, || (HashMap::new(), None));
                holders.retain(|_, e| *e > now);
                if holders.len() >= permits as usize {
                    let first = holders.values().min().copied();
                    return Attempt::Held(first.map(|e| e - now));
                }
                holders.insert(*token, now + lease);
                *ends = holders.values().max().copied();
            }
        }
        st.fence += 1;
        Attempt::Acquired(FencingToken::new(st.fence))
    }

    pub(crate) fn release(&self, keys: &LockKeys, token: &Token) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        match keys.permits {
            None => {
                if st
                    .locks
                    .get(&keys.lock, now)
                    .is_some_and(|(t, _)| t == token)
                {
                    st.locks.remove(&keys.lock);
                    true
                } else {
                    false
                }
            }
            Some(_) => match st.permits.get_mut(&keys.lock, now) {
                Some((holders, _)) => holders.remove(token).is_some_and(|e| e > now),
                None => false,
            },
        }
    }

    pub(crate) fn transfer(
        &self,
        keys: &LockKeys,
        old: &Token,
        new: &Token,
        lease: Duration,
    ) -> Option<FencingToken> {
        let now = Instant::now();
        let mut st = self.state();
        match st.locks.get_mut(&keys.lock, now) {
            Some((t, ends)) if t == old => {
                *t = *new;
                *ends = Some(now + lease);
            }
            _ => return None,
        }
        st.fence += 1;
        Some(FencingToken::new(st.fence))
    }

    pub(crate) fn extend(&self, keys: &LockKeys, token: &Token, lease: Duration) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        match keys.permits {
            None => match st.locks.get_mut(&keys.lock, now) {
                Some((t, ends)) if t == token => {
                    *ends = Some(now + lease);
                    true
                }
                _ => false,
            },
            Some(_) => match st.permits.get_mut(&keys.lock, now) {
                Some((holders, ends)) => match holders.get_mut(token) {
                    Some(e) if *e > now => {
                        *e = now + lease;
                        *ends = (*ends).max(Some(now + lease));
                        true
                    }
                    _ => false,
                },
                None => false,
            },
        }
    }

    // ---- fenced resources ----------------------------------------------

    pub(crate) fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> bool {
        let mut st = self.state();
        match st.fenced.get(key) {
            Some((newest, _)) if *newest > token => false,
            _ => {
                st.fenced.insert(key.to_owned(), (token, value.to_vec()));
                true
            }
        }
    }

    pub(crate) fn fenced_read(&self, key: &str) -> Option<(u64, Vec<u8>)> {
        self.state().fenced.get(key).cloned()
    }

    // ---- counters --------------------------------------------------------

    fn counter_entry<'a>(
        st: &'a mut State,
        key: &str,
        now: i64,
        ttl: Option<Duration>,
    ) -> &'a mut (i64, u64) {
        // A new counter's version starts at the clock's microseconds, so a
        // counter that expired and came back never repeats a version.
        let seed = u64::try_from(now).unwrap_or(0);
        let (v, ends) = st.counters.entry(key, now, || ((0, seed), None));
        if ends.is_none()
            && let Some(ttl) = ms_to_us(ttl)
        {
            *ends = Some(now.saturating_add(ttl));
        }
        v
    }

    pub(crate) fn counter_add(&self, key: &str, delta: i64, ttl: Option<Duration>) -> Result<i64> {
        let now = self.now_us();
        let mut st = self.state();
        let current = st.counters.get(key, now).map_or(0, |((v, _), _)| *v);
        let new = current.checked_add(delta).ok_or_else(|| overflow(key))?;
        let entry = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (new, entry.1 + 1);
        Ok(new)
    }

    pub(crate) fn counter_take(
        &self,
        key: &str,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let now = self.now_us();
        let mut st = self.state();
        let current = st.counters.get(key, now).map_or(0, |((v, _), _)| *v);
        if current < n {
            return Ok(Err(current));
        }
        let new = current.checked_sub(n).ok_or_else(|| overflow(key))?;
        let entry = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (new, entry.1 + 1);
        Ok(Ok(new))
    }

    pub(crate) fn counter_get(&self, key: &str) -> (i64, u64) {
        let now = self.now_us();
        self.state()
            .counters
            .get(key, now)
            .map_or((0, 0), |(v, _)| *v)
    }

    pub(crate) fn counter_set(
        &self,
        key: &str,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<u64, u64> {
        let now = self.now_us();
        let mut st = self.state();
        let version = st.counters.get(key, now).map_or(0, |((_, ver), _)| *ver);
        if expected.is_some_and(|e| e != version) {
            return Err(version);
        }
        let entry = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (value, entry.1 + 1);
        Ok(entry.1)
    }

    pub(crate) fn mark_once(&self, key: &str, member: &str, ttl: Option<Duration>) -> bool {
        let now = self.now_us();
        let mut st = self.state();
        let (set, ends) = st.marks.entry(key, now, || (HashSet::new(), None));
        if ends.is_none()
            && let Some(ttl) = ms_to_us(ttl)
        {
            *ends = Some(now.saturating_add(ttl));
        }
        set.insert(member.to_owned())
    }

    // ---- rate limits -----------------------------------------------------

    pub(crate) fn rate_limit(
        &self,
        keys: &LimitKeys,
        op: LimitOp,
        cost: u64,
        now: Option<i64>,
    ) -> Decision {
        let now = now.unwrap_or_else(|| self.now_us());
        let mut st = self.state();
        let key = keys.main.as_str();
        match op {
            LimitOp::Gcra(p) => {
                let tat = match st.limits.get(key, now) {
                    Some((LimitState::Gcra(tat), _)) => Some(*tat),
                    _ => None,
                };
                let (d, new_tat) = gcra::step(p, tat, now, cost);
                if let Some(t) = new_tat {
                    st.limits.insert(key, LimitState::Gcra(t), Some(t), now);
                }
                d
            }
            LimitOp::Fixed { limit, period_us } => {
                let w = match st.limits.get(key, now) {
                    Some((LimitState::Fixed(w), _)) => Some(*w),
                    _ => None,
                };
                let (d, new_w) = fixed_window::step(limit, period_us, w, now, cost);
                if let Some(w) = new_w {
                    st.limits
                        .insert(key, LimitState::Fixed(w), Some(w.ends_at), now);
                }
                d
            }
            LimitOp::Sliding { limit, period_us } => {
                let (state, ends) = st.limits.entry(key, now, || {
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

    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let st = self.state();
        (st.locks.len(), st.limits.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::rate_limit::Quota;

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_under_a_flood_of_keys() {
        let clock = ManualClock::new();
        let store = MemoryStore::new(Arc::new(clock.clone()));
        let lease = Duration::from_millis(10);
        let op = LimitOp::Gcra(gcra::Params::new(&Quota::per_second(100)));
        for i in 0..100_000 {
            let keys = LockKeys::new("t:", &format!("k{i}"));
            assert!(matches!(
                store.try_acquire(&keys, &Token::random(), lease),
                Attempt::Acquired(_)
            ));
            let lk = LimitKeys::new(format!("rl{i}"));
            assert!(store.rate_limit(&lk, op, 1, None).allowed);
            if i % 1000 == 999 {
                tokio::time::advance(Duration::from_millis(20)).await;
                clock.advance(Duration::from_millis(20));
            }
        }
        // At most ~1000 live entries at any time, plus what awaits a sweep.
        let (locks, limits) = store.sizes();
        assert!(locks <= 4 * expiring::SWEEP_FLOOR, "{locks} locks kept");
        assert!(
            limits <= 4 * expiring::SWEEP_FLOOR,
            "{limits} limiter keys kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_key_and_stale_tokens_cannot_act() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let keys = LockKeys::new("t:", "k");
        let (a, b) = (Token::random(), Token::random());
        let lease = Duration::from_millis(100);
        let Attempt::Acquired(fa) = store.try_acquire(&keys, &a, lease) else {
            panic!("free key not acquired")
        };
        assert!(matches!(
            store.try_acquire(&keys, &b, lease),
            Attempt::Held(Some(_))
        ));
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(!store.extend(&keys, &a, lease), "extend after expiry");
        let Attempt::Acquired(fb) = store.try_acquire(&keys, &b, lease) else {
            panic!("expired key not acquired")
        };
        assert!(fb > fa);
        assert!(!store.release(&keys, &a), "non-holder released");
        assert!(store.release(&keys, &b));
    }
}
