//! What the primitives record through the `metrics` facade, with the
//! `metrics` feature (the names and labels are in the crate docs, under
//! "Metrics"); without it every function here is empty and compiles away.

use crate::error::Error;
#[cfg(feature = "metrics")]
use crate::error::ErrorKind;
use crate::key::{LockKeys, Resource};

/// The `primitive` label of a lock, a semaphore or a read-write lock.
pub(crate) fn primitive(keys: &LockKeys) -> &'static str {
    match (keys.rw, keys.resource) {
        (Some(_), _) => "rw_lock",
        (None, Resource::Lock) => "lock",
        (None, Resource::Semaphore { .. }) => "semaphore",
    }
}

/// The metadata every series is registered with, as `metrics::counter!`
/// and its kin make it for a call in this module.
#[cfg(feature = "metrics")]
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// An acquisition of the lock named `name` was refused with `error` (an
/// outcome of its own, off the hot path: its labels are built here).
pub(crate) fn refused(primitive: &'static str, name: &std::sync::Arc<str>, error: &Error) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match error.kind() {
            ErrorKind::Busy => "busy",
            ErrorKind::Timeout => "timeout",
            ErrorKind::InvalidInput => "invalid",
            _ => "error",
        };
        ::metrics::counter!(
            "lockguard_acquisitions_total",
            "primitive" => primitive,
            "name" => ::metrics::SharedString::from(name.clone()),
            "outcome" => outcome,
        )
        .increment(1);
        if matches!(outcome, "timeout" | "error") {
            store_error(primitive, "acquire");
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, error);
}

/// A lock's series (a semaphore's, a read-write lock's) by its
/// `primitive` and `name` labels, named once for the lock and shared by
/// its holds: a lock cycle then builds no labels (no allocation) and hands
/// the recorder keys whose hash is kept. Without the `metrics` feature it
/// is empty.
///
/// As with [`Decisions`], the recorder's handles are not kept.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    #[cfg(feature = "metrics")]
    keys: std::sync::Arc<SeriesKeys>,
}

/// The most series a client keeps named by their labels (see
/// [`SeriesNames`]): enough for every lock name of an application that
/// templates its ids, and a bound for one that does not.
#[cfg(feature = "metrics")]
const SERIES_NAMED: usize = 1024;

/// A client's lock series by their `primitive` and `name` labels, so that
/// a `Lock` made per request (a tower layer's, a macro's), whose labels
/// are the same request after request, finds its series named already.
/// Up to [`SERIES_NAMED`] of them: past that, a lock names its own.
/// Without the `metrics` feature it is empty.
#[derive(Debug, Default)]
pub(crate) struct SeriesNames {
    #[cfg(feature = "metrics")]
    named: std::sync::Mutex<std::collections::HashMap<(&'static str, std::sync::Arc<str>), Series>>,
}

#[cfg(feature = "metrics")]
impl SeriesNames {
    /// The series of the lock whose labels are `primitive` and `name`.
    pub(crate) fn series(&self, primitive: &'static str, name: &std::sync::Arc<str>) -> Series {
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        let key = (primitive, name.clone());
        if let Some(series) = named.get(&key) {
            return series.clone();
        }
        let series = Series::new(primitive, name);
        if named.len() < SERIES_NAMED {
            named.insert(key, series.clone());
        }
        series
    }
}

/// The keys of a lock's series that every cycle records.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct SeriesKeys {
    primitive: &'static str,
    name: std::sync::Arc<str>,
    /// `lockguard_acquisitions_total`, `outcome="acquired"`.
    acquired: ::metrics::Key,
    /// `lockguard_wait_seconds`.
    wait: ::metrics::Key,
    /// `lockguard_held`.
    held: ::metrics::Key,
    /// `lockguard_releases_total`.
    releases: ::metrics::Key,
    /// `lockguard_hold_seconds`.
    hold: ::metrics::Key,
    /// `lockguard_lease_margin_seconds`.
    margin: ::metrics::Key,
}

impl Series {
    /// The series of the lock whose `name` label is `name`.
    pub(crate) fn new(primitive: &'static str, name: &std::sync::Arc<str>) -> Self {
        #[cfg(feature = "metrics")]
        {
            use ::metrics::{Key, Label};
            let key = |metric: &'static str, outcome: Option<&'static str>| {
                let mut labels = Vec::with_capacity(3);
                labels.push(Label::from_static_parts("primitive", primitive));
                labels.push(Label::new(
                    "name",
                    ::metrics::SharedString::from(name.clone()),
                ));
                if let Some(outcome) = outcome {
                    labels.push(Label::from_static_parts("outcome", outcome));
                }
                Key::from_parts(metric, labels)
            };
            Self {
                keys: std::sync::Arc::new(SeriesKeys {
                    primitive,
                    name: name.clone(),
                    acquired: key("lockguard_acquisitions_total", Some("acquired")),
                    wait: key("lockguard_wait_seconds", None),
                    held: key("lockguard_held", None),
                    releases: key("lockguard_releases_total", None),
                    hold: key("lockguard_hold_seconds", None),
                    margin: key("lockguard_lease_margin_seconds", None),
                }),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (primitive, name);
            Self {}
        }
    }

    /// An acquisition asked for at `started` was granted.
    pub(crate) fn acquired(&self, started: tokio::time::Instant) {
        #[cfg(feature = "metrics")]
        {
            let waited = started.elapsed();
            let keys = &*self.keys;
            ::metrics::with_recorder(|r| {
                r.register_counter(&keys.acquired, &METADATA).increment(1);
                r.register_histogram(&keys.wait, &METADATA)
                    .record(waited.as_secs_f64());
            });
        }
        #[cfg(not(feature = "metrics"))]
        let _ = started;
    }

    /// A lease had `margin` left when it was released or renewed: how
    /// close its holder came to losing it.
    pub(crate) fn lease_margin(&self, margin: std::time::Duration) {
        #[cfg(feature = "metrics")]
        ::metrics::with_recorder(|r| {
            r.register_histogram(&self.keys.margin, &METADATA)
                .record(margin.as_secs_f64());
        });
        #[cfg(not(feature = "metrics"))]
        let _ = margin;
    }

    /// A lock or permit is now held.
    pub(crate) fn held(&self) {
        #[cfg(feature = "metrics")]
        ::metrics::with_recorder(|r| {
            r.register_gauge(&self.keys.held, &METADATA).increment(1.0);
        });
    }

    /// A lock or permit held since `since` was given back (the clock is
    /// read only for the metrics).
    pub(crate) fn released(&self, since: tokio::time::Instant) {
        #[cfg(feature = "metrics")]
        {
            let held_for = since.elapsed();
            let keys = &*self.keys;
            ::metrics::with_recorder(|r| {
                r.register_gauge(&keys.held, &METADATA).decrement(1.0);
                r.register_counter(&keys.releases, &METADATA).increment(1);
                r.register_histogram(&keys.hold, &METADATA)
                    .record(held_for.as_secs_f64());
            });
        }
        #[cfg(not(feature = "metrics"))]
        let _ = since;
    }

    /// A held lease was lost.
    pub(crate) fn lost(&self) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!(
            "lockguard_leases_lost_total",
            "primitive" => self.keys.primitive,
            "name" => ::metrics::SharedString::from(self.keys.name.clone()),
        )
        .increment(1);
    }
}

/// A store request of `op` failed.
pub(crate) fn store_error(primitive: &'static str, op: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lockguard_store_errors_total", "primitive" => primitive, "op" => op)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, op);
}

/// A rate limiter's decision counters, named once when the limiter is
/// made: a decision, made up to millions of times a second on the
/// in-memory store, then builds no labels (no allocation) and hands the
/// recorder in place a key whose hash is kept.
///
/// The recorder's handles are not kept: a recorder is told apart from the
/// next only by its address, which a test's local recorders made one
/// after the other share, so a kept handle would count into a recorder
/// gone.
#[derive(Debug, Clone)]
pub(crate) struct Decisions {
    #[cfg(feature = "metrics")]
    allowed: Counter,
    #[cfg(feature = "metrics")]
    refused: Counter,
}

/// One decision counter's key.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone)]
struct Counter {
    key: ::metrics::Key,
}

#[cfg(feature = "metrics")]
impl Counter {
    fn new(limiter: &str, outcome: &'static str) -> Self {
        Self {
            key: ::metrics::Key::from_parts(
                "lockguard_rate_limit_decisions_total",
                vec![
                    ::metrics::Label::new("limiter", limiter.to_owned()),
                    ::metrics::Label::from_static_parts("outcome", outcome),
                ],
            ),
        }
    }

    fn increment(&self) {
        ::metrics::with_recorder(|recorder| {
            recorder.register_counter(&self.key, &METADATA).increment(1);
        });
    }
}

impl Decisions {
    /// The counters of the limiter `limiter`.
    pub(crate) fn new(limiter: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            Self {
                allowed: Counter::new(limiter, "allowed"),
                refused: Counter::new(limiter, "refused"),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = limiter;
            Self {}
        }
    }
}

/// A rate limiter decided.
pub(crate) fn decision(counters: &Decisions, allowed: bool) {
    #[cfg(feature = "metrics")]
    if allowed {
        counters.allowed.increment();
    } else {
        counters.refused.increment();
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (counters, allowed);
}

/// A scheduled job's period ended: `ran`, `failed`, `lost`, `skipped` or
/// `error`.
pub(crate) fn scheduled(schedule: &str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        "lockguard_scheduled_runs_total",
        "schedule" => schedule.to_owned(),
        "outcome" => outcome,
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (schedule, outcome);
}

/// A task waiting, counted in `lockguard_waiting` until this is dropped.
#[derive(Debug)]
#[must_use = "the task counts as waiting until this is dropped"]
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    gauge: ::metrics::Gauge,
}

/// Counts a task as waiting until the returned value is dropped.
pub(crate) fn waiting(primitive: &'static str, name: &str) -> Waiting {
    #[cfg(feature = "metrics")]
    {
        let gauge = ::metrics::gauge!("lockguard_waiting", "primitive" => primitive, "name" => name.to_owned());
        gauge.increment(1.0);
        Waiting { gauge }
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (primitive, name);
        Waiting {}
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        self.gauge.decrement(1.0);
    }
}
