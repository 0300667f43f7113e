//! Which limit applies to a request: a rule, a table of rules, a closure.

use std::borrow::Cow;

use http::Request;
use lockguard_core::RateLimiter;

use super::headers::Policy;
use crate::key::KeyExtractor;
use crate::outcome::{FailureMode, MissingKey};

/// The limit one request is checked against: a limiter, the key whose
/// budget it spends, and the cost.
///
/// Made by a [`RateLimitPolicy`]; a key of `None` means the request has no
/// usable key, and the layer's (or the selection's) [`MissingKey`] setting
/// decides. So does a key the store would refuse (empty, longer than
/// [`MAX_KEY_LEN`](lockguard_core::MAX_KEY_LEN), or with control
/// characters): it comes from the request, so it is the client's doing.
///
/// The limiter is the selection's own ([`Selection::new`]) or lent by the
/// policy for the length of the check ([`Selection::borrowed`], as a
/// [`Rule`] does): a lent limiter costs no reference count per request,
/// which on a server with many cores is the difference between every core
/// writing one shared counter and none doing so.
#[derive(Debug, Clone)]
pub struct Selection<'a> {
    pub(crate) limiter: Cow<'a, RateLimiter>,
    pub(crate) key: Option<Cow<'static, str>>,
    pub(crate) cost: u64,
    pub(crate) on_missing_key: Option<MissingKey>,
    pub(crate) failure: Option<FailureMode>,
    /// The limiter's policy headers, when made beforehand.
    pub(crate) policy: Option<&'a Policy>,
    /// Why there is no key, when the server's set-up is at fault (see
    /// [`KeyExtractor::misconfiguration`]).
    pub(crate) misconfigured: Option<String>,
}

impl Selection<'static> {
    /// Check `key` against `limiter`, at a cost of 1.
    pub fn new(limiter: RateLimiter, key: Option<String>) -> Self {
        Self::with(Cow::Owned(limiter), key)
    }
}

impl<'a> Selection<'a> {
    /// Check `key` against `limiter`, lent by the policy, at a cost of 1.
    ///
    /// For a policy that owns its limiters:
    ///
    /// ```
    /// use http::Request;
    /// use lockguard_core::{Client, Quota, RateLimiter};
    /// use lockguard_tower::{RateLimitLayer, RateLimitPolicy, Selection};
    ///
    /// /// Reads and writes of each tenant have their own budgets.
    /// struct ByMethod {
    ///     reads: RateLimiter,
    ///     writes: RateLimiter,
    /// }
    ///
    /// impl<B> RateLimitPolicy<B> for ByMethod {
    ///     fn select(&self, req: &Request<B>) -> Option<Selection<'_>> {
    ///         let tenant = req.headers().get("x-tenant")?.to_str().ok()?;
    ///         let limiter = if req.method().is_safe() { &self.reads } else { &self.writes };
    ///         Some(Selection::borrowed(limiter, Some(format!("tenant:{tenant}"))))
    ///     }
    /// }
    ///
    /// let lg = Client::memory();
    /// let layer = RateLimitLayer::with_policy(ByMethod {
    ///     reads: lg.rate_limiter("reads", Quota::per_second(100)),
    ///     writes: lg.rate_limiter("writes", Quota::per_second(10)),
    /// });
    /// # let _ = layer;
    /// ```
    pub fn borrowed(limiter: &'a RateLimiter, key: Option<String>) -> Self {
        Self::with(Cow::Borrowed(limiter), key)
    }

    fn with(limiter: Cow<'a, RateLimiter>, key: Option<String>) -> Self {
        Self {
            limiter,
            key: key.map(Cow::Owned),
            cost: 1,
            on_missing_key: None,
            failure: None,
            policy: None,
            misconfigured: None,
        }
    }

    /// Spends `cost` units instead of 1.
    #[must_use]
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// What to do without a key, instead of the layer's setting.
    #[must_use]
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.on_missing_key = Some(outcome);
        self
    }

    /// What to do when the store is down, instead of the layer's setting.
    #[must_use]
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure = Some(mode);
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// The key, if the request had one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

/// Decides which limit, if any, a request is checked against.
///
/// Implemented by [`Rule`] (one limiter and key for every request), by
/// [`RateLimitTable`](crate::RateLimitTable) (a rule per method and route),
/// and by every closure `Fn(&Request<B>) -> Option<Selection<'static>>`:
///
/// ```
/// use http::Request;
/// use lockguard_core::{Client, Quota};
/// use lockguard_tower::{RateLimitLayer, Selection};
///
/// let lg = Client::memory();
/// let reads = lg.rate_limiter("reads", Quota::per_second(100));
/// let writes = lg.rate_limiter("writes", Quota::per_second(10));
/// // Reads and writes of each tenant have their own budgets.
/// let layer = RateLimitLayer::with_policy(move |req: &Request<axum::body::Body>| {
///     let tenant = req.headers().get("x-tenant")?.to_str().ok()?;
///     let limiter = if req.method().is_safe() { &reads } else { &writes };
///     Some(Selection::new(limiter.clone(), Some(format!("tenant:{tenant}"))))
/// });
/// # let _ = layer;
/// ```
///
/// `None` lets the request through unchecked, without rate-limit headers.
/// A policy that owns its limiters lends them: see
/// [`Selection::borrowed`].
pub trait RateLimitPolicy<B> {
    /// The limit `req` is checked against, if any.
    fn select(&self, req: &Request<B>) -> Option<Selection<'_>>;

    /// Checks the limiters this policy can select, where it knows them
    /// (a [`Rule`], a [`RateLimitTable`](crate::RateLimitTable)); a closure
    /// has nothing to check.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// for a limiter, quota or cost that cannot work.
    fn validate(&self) -> Result<(), lockguard_core::Error> {
        Ok(())
    }
}

impl<B, F> RateLimitPolicy<B> for F
where
    F: Fn(&Request<B>) -> Option<Selection<'static>>,
{
    fn select(&self, req: &Request<B>) -> Option<Selection<'_>> {
        self(req)
    }
}

/// One limiter for every request, keyed by an extractor.
///
/// # Examples
///
/// ```
/// use lockguard_core::{Client, Quota};
/// use lockguard_tower::{RateLimitLayer, Rule, key};
///
/// let lg = Client::memory();
/// // Exports cost 10 units of a per-user budget of 100 per hour.
/// let rule = Rule::new(
///     lg.rate_limiter("exports", Quota::per_hour(100)),
///     key::Header::new(http::HeaderName::from_static("x-user-id")),
/// )
/// .cost(10);
/// let layer = RateLimitLayer::with_policy(rule);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct Rule<K> {
    limiter: RateLimiter,
    key: K,
    cost: u64,
    on_missing_key: Option<MissingKey>,
    failure: Option<FailureMode>,
    /// The limiter's policy headers, made once.
    policy: Policy,
}

impl<K> Rule<K> {
    /// `limiter`, keyed by `key`, at a cost of 1 per request.
    pub fn new(limiter: RateLimiter, key: K) -> Self {
        Self {
            policy: Policy::new(&limiter),
            limiter,
            key,
            cost: 1,
            on_missing_key: None,
            failure: None,
        }
    }

    /// Each request spends `cost` units.
    #[must_use]
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// What to do without a key, instead of the layer's setting.
    #[must_use]
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.on_missing_key = Some(outcome);
        self
    }

    /// What to do when the store is down, instead of the layer's setting.
    #[must_use]
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure = Some(mode);
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Checks the limiter's name and quota, and that the cost fits the
    /// quota; see [`RateLimitPolicy::validate`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming what cannot work.
    pub fn validate(&self) -> Result<(), lockguard_core::Error> {
        self.limiter.validate()?;
        if self.cost == 0 || self.cost > self.limiter.limit() {
            return Err(lockguard_core::Error::new(
                lockguard_core::ErrorKind::InvalidInput,
                format!(
                    "rate limit {:?}: a cost of {} can never pass a limit of {}",
                    self.limiter.name(),
                    self.cost,
                    self.limiter.limit()
                ),
            ));
        }
        Ok(())
    }
}

impl<B, K> RateLimitPolicy<B> for Rule<K>
where
    K: KeyExtractor<B>,
{
    fn select(&self, req: &Request<B>) -> Option<Selection<'_>> {
        // Checked by the layer, as every policy's keys are.
        let key = self.key.extract_key(req);
        let misconfigured = match key {
            Some(_) => None,
            None => self.key.misconfiguration(req),
        };
        Some(Selection {
            limiter: Cow::Borrowed(&self.limiter),
            key,
            cost: self.cost,
            on_missing_key: self.on_missing_key,
            failure: self.failure,
            policy: Some(&self.policy),
            misconfigured,
        })
    }

    fn validate(&self) -> Result<(), lockguard_core::Error> {
        Rule::validate(self)
    }
}
