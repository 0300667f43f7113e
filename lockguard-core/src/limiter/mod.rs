//! The rate limiter: a quota per key, decided by the store on its own
//! clock, with an optional local cache of refusals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, Invalid, Result};
use crate::rate_limit::{Algorithm, Decision, Quota, gcra};
use crate::store::memory::LimitTable;
use crate::store::{LimitKeys, LimitOp, Store};

mod refused;
mod site;

pub use site::LimiterSite;

/// A rate limiter: a [`Quota`] per key, shared by every process using the
/// store.
///
/// Made by [`Client::rate_limiter`](crate::Client::rate_limiter). The name separates limiters; the key
/// passed to [`RateLimiter::check`] picks whose budget is spent (a user, an
/// IP address, an API key).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use lockguard_core::{Client, Quota};
/// let lg = Client::memory();
/// let login = lg.rate_limiter("login", Quota::per_minute(5));
/// for _ in 0..5 {
///     assert!(login.check("ip:203.0.113.9").await?.allowed);
/// }
/// let refused = login.check("ip:203.0.113.9").await?;
/// assert!(!refused.allowed);
/// println!("retry in {} s", refused.retry_after_secs());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a rate limiter does nothing until checked"]
pub struct RateLimiter {
    /// Everything in one allocation: a clone (an HTTP layer's, per
    /// request) touches one reference count, not four.
    shared: Arc<Shared>,
}

/// What a limiter and its clones share.
#[derive(Debug, Clone)]
struct Shared {
    engine: Arc<Engine>,
    name: Arc<str>,
    quota: Quota,
    algorithm: Algorithm,
    /// What every check needs of the settings, built once, not per check;
    /// or why the name or quota cannot work.
    prepared: Result<Prepared, Invalid>,
    /// Keys the store refused, refused locally until their `retry_after`
    /// ends (opt-in; shared by clones, not by a limiter made with another
    /// algorithm).
    refused: Option<Arc<refused::RefusedCache>>,
    /// Shadow mode: decide and record, never refuse.
    shadow: bool,
    /// Decide locally, for this process's share, while the store cannot
    /// be reached (opt-in).
    fallback: Option<Arc<Fallback>>,
    /// The decisions' counters (feature `metrics`).
    decisions: crate::meter::Decisions,
}

/// A limiter's stand-in while its store cannot be reached: an in-memory
/// limiter of this process's share of the quota.
#[derive(Debug)]
struct Fallback {
    /// How many processes share the quota.
    processes: u32,
    /// The in-memory limiter, made at the first outage.
    local: OnceLock<RateLimiter>,
    /// Whether the store is unreachable now: its outage is told once, and
    /// its end.
    down: AtomicBool,
}

impl Fallback {
    fn new(processes: u32) -> Arc<Self> {
        Arc::new(Self {
            processes,
            local: OnceLock::new(),
            down: AtomicBool::new(false),
        })
    }
}

/// What every check of a limiter needs of its settings.
#[derive(Debug, Clone)]
struct Prepared {
    /// The limiter's identity, `{prefix}rl:{algorithm}:{name}:`.
    base: Arc<str>,
    /// The store's step, with the quota's constants.
    op: LimitOp,
    /// On the in-memory store, the table the limiter's keys are decided
    /// in, held from its first check on so a check goes to it straight.
    table: OnceLock<Option<Arc<LimitTable>>>,
}

impl Prepared {
    /// The in-memory store's table of this limiter; `None` on any other
    /// store. Found at the first check, not when the limiter is made: a
    /// limiter made per call (`#[rate_limit]`'s) finds it through the
    /// thread's last table, with no lock taken.
    fn table(&self, store: &Store) -> Option<&LimitTable> {
        self.table
            .get_or_init(|| store.limit_table(&self.base))
            .as_deref()
    }
}

impl Shared {
    fn prepare(&self) -> Result<Prepared, Invalid> {
        crate::key::validate_key("rate limiter name", &self.name)
            .and_then(|()| crate::key::validate_plain("rate limiter name", &self.name))?;
        self.quota.validate()?;
        // `{prefix}rl:{kind}:{name}:`, pushed into one allocation of its
        // size (a limiter made per call, `#[rate_limit]`'s, builds it at
        // every call).
        let (prefix, kind) = (&*self.engine.prefix, self.algorithm.key_kind());
        let mut base = String::with_capacity(prefix.len() + kind.len() + self.name.len() + 5);
        for part in [prefix, "rl:", kind, ":", &self.name, ":"] {
            base.push_str(part);
        }
        let quota = &self.quota;
        let op = match self.algorithm {
            Algorithm::Gcra => LimitOp::Gcra(gcra::Params::new(quota)),
            Algorithm::FixedWindow => LimitOp::Fixed {
                limit: quota.count(),
                period_us: quota.period_us(),
            },
            Algorithm::SlidingWindow => LimitOp::Sliding {
                limit: quota.count(),
                period_us: quota.period_us(),
            },
        };
        Ok(Prepared {
            base: base.into(),
            op,
            table: OnceLock::new(),
        })
    }
}

impl RateLimiter {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, quota: Quota) -> Self {
        let mut shared = Shared {
            engine,
            name: name.into(),
            quota,
            algorithm: Algorithm::default(),
            prepared: Err(Error::invalid("not yet checked").into()),
            refused: None,
            shadow: false,
            fallback: None,
            decisions: crate::meter::Decisions::new(name),
        };
        shared.prepared = shared.prepare();
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The settings, to change before the limiter is shared (a builder
    /// step): copied first if a clone shares them.
    fn settings_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.shared)
    }

    /// Refuses keys the store has refused locally, without a round trip,
    /// until the store's `retry_after` has passed: under a flood from
    /// clients over their limit, each refused key costs the store one
    /// request per `retry_after` instead of one per request. At most
    /// `capacity` keys are remembered (a refusal that finds the cache full
    /// of live refusals is not cached); clones share the cache, except one
    /// made with another [`algorithm`](RateLimiter::algorithm), which gets
    /// its own.
    ///
    /// The cache only refuses, and only while the store would: its wait is
    /// counted from when the store's answer arrived (a little after the
    /// store decided), and a request costing less than the refused one
    /// still asks the store. So it never admits more than the store would;
    /// what it changes is that another process's spending cannot shorten
    /// a local refusal, and that a refusal it answers carries the store's
    /// figures as they were then (`remaining` 0, the waits counted down).
    pub fn cache_refusals(mut self, capacity: usize) -> Self {
        self.settings_mut().refused =
            (capacity > 0).then(|| Arc::new(refused::RefusedCache::new(capacity)));
        self
    }

    /// Shadow mode, for rolling a limit out: every check is decided by the
    /// store and recorded as usual, and none is refused. A request over the
    /// quota is counted as a refusal in `lockguard_rate_limit_decisions_total`
    /// (feature `metrics`) and logged at `DEBUG`, and its decision comes
    /// back allowed, marked [`shadowed`](Decision::shadowed) (its
    /// `remaining` and `retry_after` the refusal's), so
    /// [`try_acquire`](RateLimiter::try_acquire) and
    /// [`until_ready`](RateLimiter::until_ready) go ahead at once. A request
    /// within the quota spends its budget as always, so the figures are the
    /// ones the limit would give once it is enforced.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// use lockguard_core::{Client, Quota};
    ///
    /// let limiter = Client::memory()
    ///     .rate_limiter("exports", Quota::per_minute(1))
    ///     .shadow(true);
    /// assert!(!limiter.check("ann").await?.shadowed);
    /// let over = limiter.check("ann").await?;
    /// assert!(over.allowed && over.shadowed);
    /// # Ok(()) }
    /// ```
    pub fn shadow(mut self, on: bool) -> Self {
        self.settings_mut().shadow = on;
        self
    }

    /// Where the limiter's store is ([`Client::store_address`](crate::Client::store_address)).
    pub fn store_address(&self) -> Option<&str> {
        self.shared.engine.store.address()
    }

    /// While the store cannot be reached, decides in this process instead,
    /// for its share of the quota: `processes` share it (the replicas of a
    /// service), so each admits `count / processes` per period (at least
    /// one; GCRA's burst likewise), on an in-memory limiter of its own, and
    /// together they admit about the quota. The outage is logged once as a
    /// warning when the first check falls back, and its end once when the
    /// store answers again; a decision made so carries
    /// [`decided_locally`](Decision::decided_locally). Without it (the
    /// default), a check while the store cannot be reached is the store's
    /// error, which the HTTP layers answer by their failure mode (closed or
    /// open). `processes` of 0 is taken as 1.
    ///
    /// What it cannot keep: a process's share is its own, so a client that
    /// spreads its requests over the processes gets up to the whole quota,
    /// and one that sends them all to one process gets that process's
    /// share; the budget spent in the store before the outage is not
    /// counted against the local one.
    ///
    /// # Examples
    ///
    /// ```
    /// use lockguard_core::{Client, Quota};
    ///
    /// // Three replicas share 300 a minute: each admits 100 a minute on its
    /// // own while the store is down.
    /// let api = Client::memory()
    ///     .rate_limiter("api", Quota::per_minute(300))
    ///     .fallback_locally(3);
    /// # let _ = api;
    /// ```
    pub fn fallback_locally(mut self, processes: u32) -> Self {
        self.settings_mut().fallback = Some(Fallback::new(processes.max(1)));
        self
    }

    /// This process's share of the quota, on its own limiter.
    fn local<'a>(&self, fallback: &'a Fallback) -> &'a RateLimiter {
        fallback.local.get_or_init(|| {
            let n = u64::from(fallback.processes.max(1));
            let quota = &self.shared.quota;
            let mut share = Quota::new((quota.count() / n).max(1), quota.period());
            if let Some(burst) = quota.explicit_burst() {
                share = share.burst((burst / n).max(1));
            }
            crate::Client::memory()
                .rate_limiter(&self.shared.name, share)
                .algorithm(self.shared.algorithm)
        })
    }

    /// The store's `error` for a check of `key`, or, with a local fallback
    /// and a store that cannot be reached, this process's decision.
    fn fall_back(&self, key: &str, cost: u64, error: Error) -> Result<Decision> {
        let Some(fallback) = &self.shared.fallback else {
            return Err(error);
        };
        if !(error.is_unavailable() || error.is_timeout()) {
            return Err(error);
        }
        if !fallback.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limiter = %self.shared.name,
                store = self.store_address().unwrap_or("(no address)"),
                processes = fallback.processes,
                error = %error,
                "the store cannot be reached; deciding locally for this process's share of the quota"
            );
        }
        let local = self.local(fallback);
        // An in-memory limiter answers at once.
        let decided = local
            .check_now(key, cost.min(local.limit()))
            .unwrap_or_else(|| Err(error));
        decided.map(|d| Decision {
            decided_locally: true,
            ..d
        })
    }

    /// The store answered: the end of a local fallback, if one was on.
    fn store_answered(&self) {
        if let Some(fallback) = &self.shared.fallback
            && fallback.down.swap(false, Ordering::Relaxed)
        {
            tracing::info!(limiter = %self.shared.name, "the store answers again; local decisions end");
        }
    }

    /// Whether the limiter is in [shadow mode](RateLimiter::shadow).
    pub fn is_shadow(&self) -> bool {
        self.shared.shadow
    }

    /// `d`, let through when the limiter is in shadow mode and `d` is a
    /// refusal.
    fn shadowed(&self, key: &str, d: Decision) -> Decision {
        if !self.shared.shadow || d.allowed {
            return d;
        }
        self.let_through(key, d)
    }

    /// The refusal `d`, let through in shadow mode.
    #[inline(never)]
    fn let_through(&self, key: &str, d: Decision) -> Decision {
        tracing::debug!(
            limiter = %self.shared.name,
            key,
            retry_after_ms = u64::try_from(d.retry_after.as_millis()).unwrap_or(u64::MAX),
            "request over the rate limit let through in shadow mode"
        );
        d.let_through()
    }

    /// Runs `algorithm` instead of GCRA. The limiter's store keys name the
    /// algorithm, so another algorithm makes another limiter: it gets a
    /// refusal cache of its own (of the same capacity) rather than sharing
    /// its origin's. The algorithm the limiter already runs changes
    /// nothing.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        if self.shared.algorithm == algorithm {
            return self;
        }
        let shared = self.settings_mut();
        shared.algorithm = algorithm;
        shared.prepared = shared.prepare();
        if let Some(cache) = &shared.refused {
            shared.refused = Some(Arc::new(refused::RefusedCache::new(cache.capacity())));
        }
        if let Some(fallback) = &shared.fallback {
            shared.fallback = Some(Fallback::new(fallback.processes));
        }
        self
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.shared.quota
    }

    /// The algorithm.
    pub fn algorithm_kind(&self) -> Algorithm {
        self.shared.algorithm
    }

    /// The most a single request may cost: the burst for GCRA, the count
    /// for windows.
    pub fn limit(&self) -> u64 {
        match self.shared.algorithm {
            Algorithm::Gcra => self.shared.quota.burst_size(),
            _ => self.shared.quota.count(),
        }
    }

    /// Spends one unit of `key`'s budget if it has one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad
    /// key or quota; the store's errors. A refusal is not an error: it is a
    /// [`Decision`] with `allowed == false`.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_cost(key, 1).await
    }

    /// Checks the name and quota now, without a round trip: what every
    /// check would refuse as [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) whatever its key.
    /// For configuration checked at start-up.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty or braced name, or a quota
    /// that cannot work.
    pub fn validate(&self) -> Result<()> {
        self.shared
            .prepared
            .as_ref()
            .map(drop)
            .map_err(Invalid::error)
    }

    /// Spends `cost` units of `key`'s budget if it has them (all or nothing).
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::check`], and
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a cost
    /// of zero or above [`RateLimiter::limit`], which could never pass.
    pub async fn check_cost(&self, key: &str, cost: u64) -> Result<Decision> {
        self.decide(key, cost).await
    }

    /// What a [`check`](RateLimiter::check) of `key` would decide now,
    /// changing nothing: whether it would pass, what would remain, and when
    /// to retry or when the budget is whole again. One round trip (refusals
    /// cached by [`cache_refusals`](RateLimiter::cache_refusals) are not
    /// consulted: this asks the store).
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::check`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// use lockguard_core::{Client, Quota};
    ///
    /// let limiter = Client::memory().rate_limiter("api", Quota::per_minute(10));
    /// limiter.check("ann").await?;
    /// let now = limiter.peek("ann").await?;
    /// assert!(now.allowed);
    /// assert_eq!(now.remaining, 8); // after the request it describes
    /// assert_eq!(limiter.peek("ann").await?.remaining, 8); // nothing spent
    /// # Ok(()) }
    /// ```
    pub async fn peek(&self, key: &str) -> Result<Decision> {
        let (prepared, op) = self.checked(key, 1)?;
        let keys = LimitKeys::new(&prepared.base, key);
        self.store()?
            .rate_limit(&keys, op, 1, true)
            .await
            .map(|reply| self.shadowed(key, op.decide(reply)))
            .inspect_err(|_| crate::meter::store_error("rate_limiter", "peek"))
    }

    /// Like [`RateLimiter::check`], but a refusal is an error of kind
    /// [`ErrorKind::RateLimited`](crate::ErrorKind::RateLimited) carrying the
    /// decision's `retry_after`, for code that propagates it with `?`.
    ///
    /// # Errors
    ///
    /// `RateLimited` on a refusal; otherwise as [`RateLimiter::check`].
    pub async fn try_acquire(&self, key: &str) -> Result<Decision> {
        self.try_acquire_cost(key, 1).await
    }

    /// [`RateLimiter::try_acquire`] with a cost.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::try_acquire`] and [`RateLimiter::check_cost`].
    pub async fn try_acquire_cost(&self, key: &str, cost: u64) -> Result<Decision> {
        let d = self.check_cost(key, cost).await?;
        if d.allowed {
            Ok(d)
        } else {
            Err(self.limited(key, d.retry_after))
        }
    }

    /// Waits until `key`'s budget admits one request, then spends it
    /// (governor's `until_ready`, bounded): after a refusal it sleeps for
    /// the decision's `retry_after` and asks again (one round trip per
    /// attempt, never sooner than the store said), and it refuses at once,
    /// without sleeping, when the next attempt would come later than
    /// `max_wait` from the call.
    ///
    /// Dropping the future while it sleeps spends nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::RateLimited`](crate::ErrorKind::RateLimited), carrying
    /// the last decision's `retry_after`, when `max_wait` is too short;
    /// otherwise as [`RateLimiter::check`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// use std::time::Duration;
    /// use lockguard_core::{Client, Quota};
    ///
    /// let limiter = Client::memory().rate_limiter("mail", Quota::per_second(2));
    /// limiter.until_ready("smtp", Duration::from_secs(1)).await?;
    /// limiter.until_ready("smtp", Duration::from_secs(1)).await?;
    /// // The third waits half a second for its turn, then goes.
    /// let d = limiter.until_ready("smtp", Duration::from_secs(1)).await?;
    /// assert!(d.allowed);
    /// // A wait past the bound is refused at once.
    /// let e = limiter.until_ready("smtp", Duration::from_millis(100)).await.unwrap_err();
    /// assert!(e.is_rate_limited());
    /// # Ok(()) }
    /// ```
    pub async fn until_ready(&self, key: &str, max_wait: Duration) -> Result<Decision> {
        self.until_ready_cost(key, 1, max_wait).await
    }

    /// [`RateLimiter::until_ready`] for a request of `cost` units.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::until_ready`] and [`RateLimiter::check_cost`].
    pub async fn until_ready_cost(
        &self,
        key: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decision> {
        let deadline = tokio::time::Instant::now().checked_add(max_wait);
        loop {
            let d = self.check_cost(key, cost).await?;
            if d.allowed {
                return Ok(d);
            }
            // Never a zero sleep: a refusal's retry_after is above zero, but
            // a store's rounding must not make this spin.
            let next = tokio::time::Instant::now() + d.retry_after.max(Duration::from_millis(1));
            if deadline.is_some_and(|deadline| next > deadline) {
                return Err(self.limited(key, d.retry_after));
            }
            tokio::time::sleep_until(next).await;
        }
    }

    /// The error for a refusal of `key`, to retry after `retry_after`.
    fn limited(&self, key: &str, retry_after: Duration) -> Error {
        Error::new(
            crate::error::ErrorKind::RateLimited,
            format!(
                "rate limit {:?} for {key:?} exceeded; retry after {retry_after:?}",
                self.shared.name
            ),
        )
        .with_retry_after(retry_after)
    }

    /// Decides at once, without awaiting, where no round trip is needed:
    /// on a store that answers in process (the
    /// [in-memory](crate::Client::memory) store), or for a refusal cached by
    /// [`cache_refusals`](RateLimiter::cache_refusals) on any store. `None`
    /// when the store must be asked over the network: then
    /// [`check_cost`](RateLimiter::check_cost) it. A `Some` is the decision
    /// `check_cost` would have given, with the same effect.
    ///
    /// For callers that can skip a future when the answer is known: an
    /// HTTP layer answers a request without boxing a check.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::check_cost`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// use lockguard_core::{Client, Quota};
    ///
    /// let limiter = Client::memory().rate_limiter("api", Quota::per_minute(10));
    /// let decision = match limiter.check_now("ann", 1) {
    ///     Some(decided) => decided?,
    ///     None => limiter.check_cost("ann", 1).await?,
    /// };
    /// assert!(decision.allowed);
    /// # Ok(()) }
    /// ```
    pub fn check_now(&self, key: &str, cost: u64) -> Option<Result<Decision>> {
        if let Some(table) = self.held_table() {
            return Some(self.decide_in(table, key, cost));
        }
        let at_once = self.shared.engine.store.answers_at_once();
        if !at_once && self.shared.refused.is_none() {
            return None;
        }
        let (prepared, op) = match self.checked(key, cost) {
            Ok(checked) => checked,
            Err(e) => return Some(Err(e)),
        };
        if let Some(d) = self.cached_refusal(key, cost) {
            return Some(Ok(d));
        }
        if !at_once {
            return None;
        }
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => return Some(Err(e)),
        };
        let keys = LimitKeys::new(&prepared.base, key);
        let answer = store.rate_limit_now(&keys, op, cost, false)?;
        Some(self.decided(key, cost, answer.map(|reply| op.decide(reply))))
    }

    async fn decide(&self, key: &str, cost: u64) -> Result<Decision> {
        if let Some(table) = self.held_table() {
            return self.decide_in(table, key, cost);
        }
        let (prepared, op) = self.checked(key, cost)?;
        let store = self.store()?;
        if let Some(d) = self.cached_refusal(key, cost) {
            return Ok(d);
        }
        let keys = LimitKeys::new(&prepared.base, key);
        let answer = match store.rate_limit_now(&keys, op, cost, false) {
            Some(answer) => answer,
            None => store.rate_limit(&keys, op, cost, false).await,
        };
        self.decided(key, cost, answer.map(|reply| op.decide(reply)))
    }

    /// The in-memory store's table of this limiter, when the store is the
    /// in-memory one and the settings are valid.
    fn held_table(&self) -> Option<&LimitTable> {
        let prepared = self.shared.prepared.as_ref().ok()?;
        prepared.table(&self.shared.engine.store)
    }

    /// A check of `key` in `table`, the in-memory store's table of this
    /// limiter: the step [`DataStore::rate_limit`](crate::store::DataStore::rate_limit)
    /// runs there, with nothing between.
    fn decide_in(&self, table: &LimitTable, key: &str, cost: u64) -> Result<Decision> {
        let (_, op) = self.checked(key, cost)?;
        if let Some(d) = self.cached_refusal(key, cost) {
            return Ok(d);
        }
        self.decided(key, cost, Ok(table.decide(key, op, cost, false)))
    }

    /// A refusal of `key` still cached, if any.
    fn cached_refusal(&self, key: &str, cost: u64) -> Option<Decision> {
        let cache = self.shared.refused.as_ref()?;
        self.cached_refusal_in(cache, key, cost)
    }

    /// A refusal of `key` still in `cache`, if any: out of the line of a
    /// limiter without a refusal cache.
    #[inline(never)]
    fn cached_refusal_in(
        &self,
        cache: &refused::RefusedCache,
        key: &str,
        cost: u64,
    ) -> Option<Decision> {
        let d = cache.lookup(key, cost, tokio::time::Instant::now())?;
        tracing::trace!(limiter = %self.shared.name, key, cost, "request rate limited (cached refusal)");
        crate::meter::decision(&self.shared.decisions, false);
        Some(self.shadowed(key, d))
    }

    /// Accounts for the store's `answer` to a check of `key`.
    fn decided(&self, key: &str, cost: u64, answer: Result<Decision>) -> Result<Decision> {
        let d = match answer {
            Ok(d) => d,
            Err(e) => return self.failed(key, cost, e),
        };
        self.store_answered();
        crate::meter::decision(&self.shared.decisions, d.allowed);
        if let Some(cache) = &self.shared.refused {
            cache.record(key, cost, &d, tokio::time::Instant::now());
        }
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            self.log_decision(key, cost, &d);
        }
        Ok(self.shadowed(key, d))
    }

    /// Accounts for a check of `key` the store could not answer.
    #[cold]
    #[inline(never)]
    fn failed(&self, key: &str, cost: u64, error: Error) -> Result<Decision> {
        crate::meter::store_error("rate_limiter", "check");
        let d = self.fall_back(key, cost, error)?;
        Ok(self.shadowed(key, d))
    }

    /// Logs the store's decision `d` on `key`: with debug logging on only,
    /// so out of the line of a check.
    #[cold]
    #[inline(never)]
    fn log_decision(&self, key: &str, cost: u64, d: &Decision) {
        if d.allowed {
            tracing::trace!(limiter = %self.shared.name, key, cost, remaining = d.remaining, "request allowed");
        } else {
            tracing::debug!(limiter = %self.shared.name, key, cost, retry_after_ms = d.retry_after.as_millis() as u64, "request rate limited");
        }
    }

    /// The store's limiters, or `Unsupported` on a store without them.
    fn store(&self) -> Result<&Store> {
        Ok(&self.shared.engine.store)
    }

    /// Checks `key` and `cost`: what the limiter prepared, and the store's
    /// step.
    fn checked(&self, key: &str, cost: u64) -> Result<(&Prepared, LimitOp)> {
        let prepared = self.shared.prepared.as_ref().map_err(Invalid::error)?;
        crate::key::validate_key("rate limit", key)?;
        if cost == 0 || cost > self.limit() {
            return Err(self.bad_cost(cost));
        }
        Ok((prepared, prepared.op))
    }

    /// Why `cost` cannot be spent.
    #[cold]
    #[inline(never)]
    fn bad_cost(&self, cost: u64) -> Error {
        if cost == 0 {
            return Error::invalid("rate limit cost must be at least 1");
        }
        Error::invalid(format!(
            "rate limit cost {cost} exceeds the limiter's {} ({:?}), so it could never pass",
            self.limit(),
            self.shared.algorithm
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Algorithm, Client, Quota};

    /// A limiter made from another with another algorithm spends other
    /// store keys, so a refusal its origin cached never answers for it.
    #[tokio::test]
    async fn another_algorithm_gets_a_refusal_cache_of_its_own() {
        let lg = Client::memory();
        let gcra = lg
            .rate_limiter("own-cache", Quota::per_minute(1))
            .cache_refusals(8);
        let fixed = gcra.clone().algorithm(Algorithm::FixedWindow);
        assert!(gcra.check("k").await.unwrap().allowed);
        assert!(!gcra.check("k").await.unwrap().allowed);
        // The fixed window's budget for `k` is untouched.
        assert!(fixed.check("k").await.unwrap().allowed);
        assert!(!fixed.check("k").await.unwrap().allowed);
    }

    /// On the in-memory store a limiter decides in the table it holds:
    /// two limiters of one name, made apart, still spend one budget, which
    /// a peek (through the store's own call) sees; another name, or the
    /// same name under another prefix, is another budget.
    #[tokio::test]
    async fn limiters_of_one_name_share_the_table_they_hold() {
        let store = crate::store::Store::memory();
        let lg = Client::builder().build(store.clone()).unwrap();
        let a = lg.rate_limiter("held", Quota::per_minute(3));
        let b = lg.rate_limiter("held", Quota::per_minute(3));
        assert_eq!(a.check_now("k", 1).unwrap().unwrap().remaining, 2);
        assert_eq!(b.check("k").await.unwrap().remaining, 1);
        // The request a peek describes would leave none.
        let peeked = a.peek("k").await.unwrap();
        assert!(peeked.allowed && peeked.remaining == 0, "{peeked:?}");
        assert!(b.check_now("k", 1).unwrap().unwrap().allowed);
        assert!(!a.check("k").await.unwrap().allowed);
        let other = lg.rate_limiter("other", Quota::per_minute(3));
        assert_eq!(other.check("k").await.unwrap().remaining, 2);
        let prefixed = Client::builder()
            .prefix("tenant:")
            .build(store)
            .unwrap()
            .rate_limiter("held", Quota::per_minute(3));
        assert_eq!(prefixed.check("k").await.unwrap().remaining, 2);
    }
}
