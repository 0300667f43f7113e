//! The metrics the primitives record (feature `metrics`), read back from
//! `metrics-util`'s debugging recorder.
#![cfg(feature = "metrics")]

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use lockguard_core::{Client, Quota, RateLimiter};
use lockguard_redis::BuilderExt as _;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What was recorded so far. The debugging recorder's snapshots reset what
/// they read (counters, gauges and histograms alike), so every read takes
/// a snapshot and adds it to the running totals here.
#[derive(Default)]
struct Totals {
    snapshotter: Option<Snapshotter>,
    counters: RefCell<HashMap<Series, u64>>,
    gauges: RefCell<HashMap<Series, f64>>,
    histograms: RefCell<HashMap<Series, Vec<f64>>>,
}

/// A metric's name and its sorted labels.
type Series = (String, Vec<(String, String)>);

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

impl Totals {
    fn new(recorder: &DebuggingRecorder) -> Self {
        Self {
            snapshotter: Some(recorder.snapshotter()),
            ..Self::default()
        }
    }

    fn refresh(&self) {
        let snapshot = self.snapshotter.as_ref().unwrap().snapshot();
        for (key, _, _, value) in snapshot.into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.borrow_mut().entry(id).or_default() += n,
                DebugValue::Gauge(g) => {
                    *self.gauges.borrow_mut().entry(id).or_default() += g.into_inner()
                }
                DebugValue::Histogram(h) => self
                    .histograms
                    .borrow_mut()
                    .entry(id)
                    .or_default()
                    .extend(h.into_iter().map(|v| v.into_inner())),
            }
        }
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.refresh();
        self.counters
            .borrow()
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.refresh();
        self.gauges
            .borrow()
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.refresh();
        self.histograms
            .borrow()
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }
}

/// Runs `f` on a current-thread runtime (so the watchdog and background
/// releases run on this thread too) with `recorder` as the recorder.
fn recorded<F: Future<Output = ()>>(recorder: &DebuggingRecorder, f: impl FnOnce() -> F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(recorder, || rt.block_on(f()));
}

const LOCK: &[(&str, &str)] = &[("primitive", "lock"), ("name", "order")];

#[test]
fn locks_record_outcomes_waits_holds_and_losses() {
    let recorder = DebuggingRecorder::new();
    let s = Totals::new(&recorder);
    recorded(&recorder, || async {
        let lg = Client::memory();
        let other = lg.peer();
        // Ids in the names, one templated metric name.
        let guard = lg
            .lock("order:42")
            .metric_name("order")
            .acquire()
            .await
            .unwrap();
        assert_eq!(s.gauge("lockguard_held", LOCK), 1.0);
        let busy = other
            .lock("order:42")
            .metric_name("order")
            .try_acquire()
            .await;
        assert!(busy.unwrap_err().is_busy());
        // A waiter counts as waiting until it holds the lock.
        let waiter = tokio::spawn({
            let other = other.clone();
            async move {
                other
                    .lock("order:42")
                    .metric_name("order")
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        for _ in 0..100 {
            if s.gauge("lockguard_waiting", LOCK) == 1.0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(s.gauge("lockguard_waiting", LOCK), 1.0);
        assert!(guard.release().await.unwrap());
        let second = waiter.await.unwrap().unwrap();
        assert_eq!(s.gauge("lockguard_waiting", LOCK), 0.0);
        assert_eq!(s.gauge("lockguard_held", LOCK), 1.0);
        drop(second);
        tokio::task::yield_now().await;
        assert_eq!(s.gauge("lockguard_held", LOCK), 0.0);

        let outcome = |o: &'static str| {
            let mut l = LOCK.to_vec();
            l.push(("outcome", o));
            s.counter("lockguard_acquisitions_total", &l)
        };
        assert_eq!(outcome("acquired"), 2);
        assert_eq!(outcome("busy"), 1);
        assert_eq!(s.counter("lockguard_releases_total", LOCK), 2);
        assert_eq!(s.samples("lockguard_hold_seconds", LOCK).len(), 2);
        // Each release records the margin its lease had left (and so does
        // each renewal, below; the lock handed to the waiter was released
        // before its reservation was extended).
        let margins = s.samples("lockguard_lease_margin_seconds", LOCK);
        assert_eq!(margins.len(), 2, "{margins:?}");
        assert!(margins.iter().all(|m| *m > 0.0), "{margins:?}");
        let waits = s.samples("lockguard_wait_seconds", LOCK);
        assert_eq!(waits.len(), 2);
        assert!(waits.iter().all(|w| *w >= 0.0));

        // A lock without a metric name is labelled with its name; a lease
        // the store no longer has is counted as lost.
        let plain = [("primitive", "lock"), ("name", "report")];
        let g = lg
            .lock("report")
            .lease(Duration::from_millis(100))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(g.extend(Duration::from_secs(1)).await.is_err());
        assert_eq!(s.counter("lockguard_leases_lost_total", &plain), 1);
        // Each renewal records the margin the lease had left when it was
        // sent, as the release does.
        let renewed = [("primitive", "lock"), ("name", "renewed")];
        let g = lg
            .lock("renewed")
            .watchdog(Duration::from_millis(600))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(g.release().await.unwrap());
        let margins = s.samples("lockguard_lease_margin_seconds", &renewed);
        assert!(
            margins.len() >= 3,
            "two renewals and the release: {margins:?}"
        );
        assert!(margins.iter().all(|m| *m > 0.0 && *m <= 0.6), "{margins:?}");
        let invalid = lg.lock("").try_acquire().await;
        assert!(invalid.unwrap_err().is_invalid_input());
        assert_eq!(
            s.counter(
                "lockguard_acquisitions_total",
                &[("primitive", "lock"), ("name", ""), ("outcome", "invalid")]
            ),
            1
        );
    });
}

#[test]
fn semaphores_count_permits_and_limiters_their_decisions() {
    let recorder = DebuggingRecorder::new();
    let s = Totals::new(&recorder);
    recorded(&recorder, || async {
        let lg = Client::memory();
        let exports = lg.semaphore("exports", 2);
        let a = exports.acquire().await.unwrap();
        let b = exports.acquire().await.unwrap();
        let sem = [("primitive", "semaphore"), ("name", "exports")];
        assert_eq!(s.gauge("lockguard_held", &sem), 2.0);
        assert!(exports.try_acquire().await.unwrap_err().is_busy());
        assert!(a.release().await.unwrap());
        assert_eq!(s.gauge("lockguard_held", &sem), 1.0);
        drop(b);

        let login = lg.rate_limiter("login", Quota::per_minute(1));
        assert!(login.check("ip:1").await.unwrap().allowed);
        assert!(!login.check("ip:1").await.unwrap().allowed);
        assert!(!login.check("ip:1").await.unwrap().allowed);
        let decided = |o| {
            s.counter(
                "lockguard_rate_limit_decisions_total",
                &[("limiter", "login"), ("outcome", o)],
            )
        };
        assert_eq!(decided("allowed"), 1);
        assert_eq!(decided("refused"), 2);
    });
}

/// What a lock cycle of "order" and a decision of the limiter "login" for
/// `ip:1` recorded, as `(acquisitions, allowed, refused)`.
fn lock_and_login(t: &Totals) -> (u64, u64, u64) {
    let acquired = [
        ("primitive", "lock"),
        ("name", "order"),
        ("outcome", "acquired"),
    ];
    let decided = |o| {
        t.counter(
            "lockguard_rate_limit_decisions_total",
            &[("limiter", "login"), ("outcome", o)],
        )
    };
    (
        t.counter("lockguard_acquisitions_total", &acquired),
        decided("allowed"),
        decided("refused"),
    )
}

/// A lock cycle of "order" and a decision of `login` for `ip:1`, under
/// `recorder`.
fn cycle_and_decide(recorder: &DebuggingRecorder, lg: &Client, login: &RateLimiter) {
    recorded(recorder, || async {
        let guard = lg.lock("order").acquire().await.unwrap();
        assert!(guard.release().await.unwrap());
        login.check("ip:1").await.unwrap();
    });
}

/// A lock's series and a limiter's decisions are recorded into whichever
/// recorder is in place: another one, and the first one again after it.
#[test]
fn series_follow_the_recorder_in_place() {
    let lg = Client::memory();
    let login = lg.rate_limiter("login", Quota::per_minute(2));
    let (first, later) = (DebuggingRecorder::new(), DebuggingRecorder::new());
    let (a, b) = (Totals::new(&first), Totals::new(&later));
    for recorder in [&first, &later, &later, &first] {
        cycle_and_decide(recorder, &lg, &login);
    }
    // Two decisions allowed, two refused, in that order.
    assert_eq!(lock_and_login(&a), (2, 1, 1));
    assert_eq!(lock_and_login(&b), (2, 1, 1));
    for t in [&a, &b] {
        assert_eq!(t.counter("lockguard_releases_total", LOCK), 2);
        assert_eq!(t.gauge("lockguard_held", LOCK), 0.0);
        assert_eq!(t.samples("lockguard_hold_seconds", LOCK).len(), 2);
    }
}

/// A store that stops answering is counted as a store error of the
/// operation that met it.
#[test]
fn store_errors_are_counted_by_operation() {
    let mut server = lockguard_testing::RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let s = Totals::new(&recorder);
    recorded(&recorder, || async {
        let lg = Client::builder()
            .response_timeout(Duration::from_millis(200))
            .connect_redis(&server.url())
            .await
            .unwrap();
        let limiter = lg.rate_limiter("api", Quota::per_second(10));
        assert!(limiter.check("k").await.unwrap().allowed);
        server.pause();
        assert!(limiter.check("k").await.is_err());
        assert!(lg.lock("down").try_acquire().await.is_err());
        server.resume();
        assert_eq!(
            s.counter(
                "lockguard_store_errors_total",
                &[("primitive", "rate_limiter"), ("op", "check")]
            ),
            1
        );
        assert_eq!(
            s.counter(
                "lockguard_store_errors_total",
                &[("primitive", "lock"), ("op", "acquire")]
            ),
            1
        );
        let failed: u64 = ["timeout", "error"]
            .into_iter()
            .map(|o| {
                s.counter(
                    "lockguard_acquisitions_total",
                    &[("primitive", "lock"), ("name", "down"), ("outcome", o)],
                )
            })
            .sum();
        assert_eq!(failed, 1, "the failed acquire is counted once");
    });
}

/// Recorders made one after the other (each in the same place, so at the
/// same address) each get what was recorded under them: nothing is kept
/// from one for the next.
#[test]
fn a_recorder_made_after_another_gets_its_own_series() {
    fn under_a_recorder_of_its_own(lg: &Client, login: &RateLimiter) -> (u64, u64, u64) {
        let recorder = DebuggingRecorder::new();
        let t = Totals::new(&recorder);
        cycle_and_decide(&recorder, lg, login);
        lock_and_login(&t)
    }
    let lg = Client::memory();
    let login = lg.rate_limiter("login", Quota::per_minute(100));
    for _ in 0..3 {
        assert_eq!(under_a_recorder_of_its_own(&lg, &login), (1, 1, 0));
    }
}

/// A tower layer's locks and permits carry the layer's name in their
/// metrics, whatever key each request has: one series for every key (a
/// series per client or per user would grow without bound).
#[test]
fn a_layers_locks_make_one_series_for_every_key() {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{HeaderName, Request, StatusCode};
    use axum::routing::get;
    use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, key};
    use tower::ServiceExt as _;

    let recorder = DebuggingRecorder::new();
    let s = Totals::new(&recorder);
    recorded(&recorder, || async {
        let lg = Client::memory();
        let user = || key::Header::new(HeaderName::from_static("x-user"));
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(LockLayer::new(lg.clone(), "jobs", user()))
            .layer(ConcurrencyLimitLayer::new(lg.clone(), "exports", 4, user()));
        for u in ["ada", "bob", "cy"] {
            let req = Request::builder()
                .uri("/")
                .header("x-user", u)
                .body(Body::empty())
                .unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            drop(res);
        }
        // Each response's drop releases its lock and permit in a task of
        // their own, on this thread.
        let jobs = [("primitive", "lock"), ("name", "jobs")];
        for _ in 0..1000 {
            if s.counter("lockguard_releases_total", &jobs) == 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let count = |metric, primitive, name| {
            s.counter(
                metric,
                &[
                    ("primitive", primitive),
                    ("name", name),
                    ("outcome", "acquired"),
                ],
            )
        };
        assert_eq!(count("lockguard_acquisitions_total", "lock", "jobs"), 3);
        assert_eq!(
            count("lockguard_acquisitions_total", "semaphore", "exports"),
            3
        );
        assert_eq!(s.counter("lockguard_releases_total", &jobs), 3);
        assert_eq!(s.gauge("lockguard_held", &jobs), 0.0);
    });
}

/// `#[distributed_lock]` and `#[concurrency_limit]` name their metrics
/// after the key's template: one series for every order, not one each.
#[cfg(feature = "macros")]
mod macro_series {
    use super::*;
    use lockguard::{concurrency_limit, distributed_lock};

    #[distributed_lock(key = "order:{id}", client = lg)]
    async fn ship(lg: &Client, id: u32) -> Result<u32, lockguard::Error> {
        Ok(id)
    }

    #[concurrency_limit(key = "export:{tenant}", permits = 2, client = lg)]
    async fn export(lg: &Client, tenant: &str) -> Result<usize, lockguard::Error> {
        Ok(tenant.len())
    }

    #[test]
    fn a_macros_locks_make_one_series_for_every_key() {
        let recorder = DebuggingRecorder::new();
        let s = Totals::new(&recorder);
        recorded(&recorder, || async {
            let lg = Client::memory();
            for id in [41, 42, 43] {
                assert_eq!(ship(&lg, id).await.unwrap(), id);
            }
            for tenant in ["ada", "bob"] {
                export(&lg, tenant).await.unwrap();
            }
            let acquired = |primitive, name| {
                s.counter(
                    "lockguard_acquisitions_total",
                    &[
                        ("primitive", primitive),
                        ("name", name),
                        ("outcome", "acquired"),
                    ],
                )
            };
            assert_eq!(acquired("lock", "order:{id}"), 3);
            assert_eq!(acquired("semaphore", "export:{tenant}"), 2);
        });
    }
}
