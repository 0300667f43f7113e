//! What a call site that makes its limiter at every call keeps between
//! its calls (`#[rate_limit]`'s): the limiter's prepared settings, for the
//! client it ran on last.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{Prepared, RateLimiter, Shared};
use crate::engine::Engine;
use crate::meter::Decisions;
use crate::rate_limit::{Algorithm, Quota};

/// A call site's last limiter, kept between its calls: its name, its
/// prepared settings (the store keys' base, the step, the in-memory
/// table) and its decision counters, so that the next call on the same
/// client builds none of them again.
///
/// The client is held weakly: a site keeps no store open after the
/// client's last handle is dropped. One client at a time: a call on
/// another client prepares its limiter anew and keeps that one.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct LimiterSite {
    last: Mutex<Option<Kept>>,
}

/// A limiter's settings without its engine.
#[derive(Debug)]
struct Kept {
    /// The engine the settings were prepared for. Weak: it keeps the
    /// engine's allocation (so no other engine takes its address while
    /// this is kept), not the engine.
    engine: Weak<Engine>,
    name: Arc<str>,
    quota: Quota,
    algorithm: Algorithm,
    shadow: bool,
    prepared: Prepared,
    decisions: Decisions,
}

impl LimiterSite {
    /// A site that has kept nothing yet (`const`, for a `static`).
    pub const fn new() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }

    fn last(&self) -> MutexGuard<'_, Option<Kept>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RateLimiter {
    /// The limiter `name` of `quota`, `algorithm` and `shadow` on
    /// `engine`, from what `site` kept of its last call when that was the
    /// same limiter on the same engine; otherwise made anew, and kept.
    pub(crate) fn at_site(
        site: &LimiterSite,
        engine: &Arc<Engine>,
        name: &str,
        quota: Quota,
        algorithm: Algorithm,
        shadow: bool,
    ) -> Self {
        let mut last = site.last();
        if let Some(kept) = &*last
            && std::ptr::eq(kept.engine.as_ptr(), Arc::as_ptr(engine))
            && *kept.name == *name
            && kept.quota == quota
            && kept.algorithm == algorithm
            && kept.shadow == shadow
        {
            return Self {
                shared: Arc::new(Shared {
                    engine: engine.clone(),
                    name: kept.name.clone(),
                    quota,
                    algorithm,
                    prepared: Ok(kept.prepared.clone()),
                    refused: None,
                    shadow,
                    fallback: None,
                    decisions: kept.decisions.clone(),
                }),
            };
        }
        let limiter = Self::new(engine.clone(), name, quota)
            .algorithm(algorithm)
            .shadow(shadow);
        // A name or quota that cannot work is told at every call, as the
        // limiter made anew tells it.
        if let Ok(prepared) = &limiter.shared.prepared {
            *last = Some(Kept {
                engine: Arc::downgrade(engine),
                name: limiter.shared.name.clone(),
                quota,
                algorithm,
                shadow,
                prepared: prepared.clone(),
                decisions: limiter.shared.decisions.clone(),
            });
        }
        limiter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Client;

    /// Whether `limiter` lets one more call on the key "k" through.
    async fn allows(limiter: &RateLimiter) -> bool {
        limiter.check("k").await.unwrap().allowed
    }

    /// A site's limiter is the limiter made anew: calls through it spend
    /// one budget with a limiter of the same name made by hand, on the
    /// client of the call; another client, name, quota or algorithm is
    /// another limiter, kept in its turn.
    #[tokio::test]
    async fn a_site_limiter_is_the_limiter_of_its_call() {
        static SITE: LimiterSite = LimiterSite::new();
        let (a, b) = (Client::memory(), Client::memory());
        let quota = Quota::per_minute(3);
        let at = |lg: &Client, name: &str, quota: Quota, algorithm: Algorithm| {
            lg.rate_limiter_at(&SITE, name, quota, algorithm, false)
        };
        let gcra = |lg: &Client, name: &str| at(lg, name, quota, Algorithm::Gcra);
        assert!(allows(&gcra(&a, "s")).await);
        assert!(allows(&gcra(&a, "s")).await);
        let by_hand = a.rate_limiter("s", quota);
        assert!(allows(&by_hand).await);
        assert!(!allows(&gcra(&a, "s")).await);
        // Another client's store: a budget of its own.
        assert!(allows(&gcra(&b, "s")).await);
        assert!(!allows(&by_hand).await);
        // Another name, quota or algorithm: another limiter.
        assert!(allows(&gcra(&a, "t")).await);
        let more = Quota::per_minute(10);
        let kept = at(&a, "s", more, Algorithm::Gcra);
        assert_eq!(kept.quota(), more);
        assert_eq!(kept.limit(), more.burst_size());
        let window = at(&a, "s", quota, Algorithm::FixedWindow);
        assert_eq!(window.algorithm_kind(), Algorithm::FixedWindow);
        assert!(allows(&window).await);
        // A name that cannot work is an error at every call.
        for _ in 0..2 {
            let bad = gcra(&a, "").check("k").await;
            assert!(bad.unwrap_err().is_invalid_input());
        }
    }

    /// A site holds its client weakly: dropping the client's last handle
    /// drops its engine, and a later call on a new client at the same
    /// address is not taken for it.
    #[tokio::test]
    async fn a_site_keeps_no_client_alive() {
        static SITE: LimiterSite = LimiterSite::new();
        let lg = Client::memory();
        let engine = Arc::downgrade(lg.engine());
        let quota = Quota::per_minute(1);
        let first = lg.rate_limiter_at(&SITE, "s", quota, Algorithm::Gcra, false);
        assert!(allows(&first).await);
        drop((first, lg));
        assert_eq!(
            engine.strong_count(),
            0,
            "the site kept the client's engine"
        );
        let next = Client::memory();
        let limiter = next.rate_limiter_at(&SITE, "s", quota, Algorithm::Gcra, false);
        assert!(
            allows(&limiter).await,
            "a new client's store has a budget of its own"
        );
    }
}
