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

/// An acquisition asked for at `started` ended: granted, or refused.
pub(crate) fn acquisition(
    primitive: &'static str,
    name: &str,
    result: Result<(), &Error>,
    started: tokio::time::Instant,
) {
    #[cfg(feature = "metrics")]
    {
        let waited = started.elapsed();
        let outcome = match result {
            Ok(()) => "acquired",
            Err(e) => match e.kind() {
                ErrorKind::Busy => "busy",
                ErrorKind::Timeout => "timeout",
                ErrorKind::InvalidInput => "invalid",
                _ => "error",
            },
        };
        let name = name.to_owned();
        ::metrics::counter!(
            "lockguard_acquisitions_total",
            "primitive" => primitive,
            "name" => name.clone(),
            "outcome" => outcome,
        )
        .increment(1);
        if result.is_ok() {
            ::metrics::histogram!("lockguard_wait_seconds", "primitive" => primitive, "name" => name)
                .record(waited.as_secs_f64());
        } else if matches!(outcome, "timeout" | "error") {
            store_error(primitive, "acquire");
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, result, started);
}

/// A lease had `margin` left when it was released or renewed: how close
/// its holder came to losing it.
pub(crate) fn lease_margin(primitive: &'static str, name: &str, margin: std::time::Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!("lockguard_lease_margin_seconds", "primitive" => primitive, "name" => name.to_owned())
        .record(margin.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, margin);
}

/// A lock or permit is now held.
pub(crate) fn held(primitive: &'static str, name: &str) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!("lockguard_held", "primitive" => primitive, "name" => name.to_owned())
        .increment(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name);
}

/// A lock or permit held since `since` was given back (the clock is read
/// only for the metrics).
pub(crate) fn released(primitive: &'static str, name: &str, since: tokio::time::Instant) {
    #[cfg(feature = "metrics")]
    {
        let held_for = since.elapsed();
        let name = name.to_owned();
        ::metrics::gauge!("lockguard_held", "primitive" => primitive, "name" => name.clone())
            .decrement(1.0);
        ::metrics::counter!("lockguard_releases_total", "primitive" => primitive, "name" => name.clone())
            .increment(1);
        ::metrics::histogram!("lockguard_hold_seconds", "primitive" => primitive, "name" => name)
            .record(held_for.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, since);
}

/// A held lease was lost.
pub(crate) fn lost(primitive: &'static str, name: &str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lockguard_leases_lost_total", "primitive" => primitive, "name" => name.to_owned())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name);
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
        // As `metrics::counter!` makes it.
        static METADATA: ::metrics::Metadata<'static> =
            ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
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
