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
        let of = series::Of { primitive, name };
        of.counter(
            "lockguard_acquisitions_total",
            Some(("outcome", outcome)),
            1,
        );
        if result.is_ok() {
            of.histogram("lockguard_wait_seconds", waited.as_secs_f64());
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
    series::Of { primitive, name }
        .histogram("lockguard_lease_margin_seconds", margin.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, margin);
}

/// A lock or permit is now held.
pub(crate) fn held(primitive: &'static str, name: &str) {
    #[cfg(feature = "metrics")]
    series::Of { primitive, name }.gauge("lockguard_held", 1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name);
}

/// A lock or permit held since `since` was given back (the clock is read
/// only for the metrics).
pub(crate) fn released(primitive: &'static str, name: &str, since: tokio::time::Instant) {
    #[cfg(feature = "metrics")]
    {
        let held_for = since.elapsed();
        let of = series::Of { primitive, name };
        of.gauge("lockguard_held", -1.0);
        of.counter("lockguard_releases_total", None, 1);
        of.histogram("lockguard_hold_seconds", held_for.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, name, since);
}

/// A held lease was lost.
pub(crate) fn lost(primitive: &'static str, name: &str) {
    #[cfg(feature = "metrics")]
    series::Of { primitive, name }.counter("lockguard_leases_lost_total", None, 1);
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
/// made, and their handles once a recorder gave them: a decision, made up
/// to millions of times a second on the in-memory store, then builds no
/// labels (no allocation) and asks the recorder nothing.
///
/// A handle is kept with the recorder that gave it, and used only while
/// that recorder is the one in place (told by its address): a recorder
/// installed after the limiter's first decision (the global one, set late,
/// or a local one in a test) is asked at each decision instead, with the
/// key made once.
#[derive(Debug, Clone)]
pub(crate) struct Decisions {
    #[cfg(feature = "metrics")]
    allowed: Counter,
    #[cfg(feature = "metrics")]
    refused: Counter,
}

/// One decision counter: its key, and its handle with the address of the
/// recorder that gave it.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone)]
struct Counter {
    key: ::metrics::Key,
    handle: std::sync::OnceLock<(usize, ::metrics::Counter)>,
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
            handle: std::sync::OnceLock::new(),
        }
    }

    fn increment(&self) {
        // As `metrics::counter!` makes it.
        static METADATA: ::metrics::Metadata<'static> =
            ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
        ::metrics::with_recorder(|recorder| {
            let at = std::ptr::from_ref(recorder).cast::<()>().addr();
            let (kept_at, handle) = self
                .handle
                .get_or_init(|| (at, recorder.register_counter(&self.key, &METADATA)));
            if *kept_at == at {
                handle.increment(1);
            } else {
                recorder.register_counter(&self.key, &METADATA).increment(1);
            }
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
        let gauge = series::Of { primitive, name }.waiting();
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

/// The series of a lock, a semaphore or a read-write lock by name, and the
/// handles the recorder gave for them, kept per thread.
///
/// Each metric call used to build its labels (the name copied, a label
/// vector) and have the recorder look the series up: with a registry
/// recorder, some 18,000 instructions and 28 allocations for one lock
/// cycle (`METRICS=1 bash lockguard-bench/layer-cost.sh lock`). A thread
/// now finds a series' handle by the name it has, with no allocation. The
/// handles are kept with the recorder in place (told by its address): all
/// are forgotten when another one is. A thread keeps at most
/// [`MAX_NAMES`](series::MAX_NAMES) names; a name that carries an id
/// (`order:42`) makes a series per id anyway (see `Lock::metric_name`).
#[cfg(feature = "metrics")]
mod series {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use ::metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};

    /// The most names a thread keeps handles for; past it, it starts over.
    pub(super) const MAX_NAMES: usize = 1024;

    /// As `metrics::counter!` and the others make it.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// A label past `primitive` and `name` (an acquisition's `outcome`).
    type Extra = Option<(&'static str, &'static str)>;

    #[derive(Debug)]
    enum Handle {
        Counter(Counter),
        Gauge(Gauge),
        Histogram(Histogram),
    }

    /// One series of a name: its primitive, metric and extra label, and
    /// its handle.
    #[derive(Debug)]
    struct Entry {
        primitive: &'static str,
        metric: &'static str,
        extra: Extra,
        handle: Handle,
    }

    #[derive(Debug, Default)]
    struct Cache {
        /// The address of the recorder the handles are from.
        recorder: usize,
        by_name: HashMap<Box<str>, Vec<Entry>>,
    }

    thread_local! {
        static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
    }

    /// The series of one primitive's name.
    pub(super) struct Of<'a> {
        pub(super) primitive: &'static str,
        pub(super) name: &'a str,
    }

    impl Of<'_> {
        pub(super) fn counter(&self, metric: &'static str, extra: Extra, n: u64) {
            self.with(metric, extra, Kind::Counter, |h| {
                if let Handle::Counter(c) = h {
                    c.increment(n);
                }
            });
        }

        /// Moves the gauge `metric` by `by`.
        pub(super) fn gauge(&self, metric: &'static str, by: f64) {
            self.with(metric, None, Kind::Gauge, |h| {
                if let Handle::Gauge(g) = h {
                    if by < 0.0 {
                        g.decrement(-by);
                    } else {
                        g.increment(by);
                    }
                }
            });
        }

        pub(super) fn histogram(&self, metric: &'static str, value: f64) {
            self.with(metric, None, Kind::Histogram, |h| {
                if let Handle::Histogram(hist) = h {
                    hist.record(value);
                }
            });
        }

        /// The `lockguard_waiting` gauge, to keep.
        pub(super) fn waiting(&self) -> Gauge {
            let mut gauge = Gauge::noop();
            self.with("lockguard_waiting", None, Kind::Gauge, |h| {
                if let Handle::Gauge(g) = h {
                    gauge = g.clone();
                }
            });
            gauge
        }

        fn with(&self, metric: &'static str, extra: Extra, kind: Kind, f: impl FnOnce(&Handle)) {
            ::metrics::with_recorder(|recorder| {
                let at = std::ptr::from_ref(recorder).cast::<()>().addr();
                let mut f = Some(f);
                // Not while the thread's cache is gone (a guard dropped as
                // the thread ends) or in use: then without it.
                let _ = CACHE.try_with(|cache| {
                    let Ok(mut cache) = cache.try_borrow_mut() else {
                        return;
                    };
                    if cache.recorder != at {
                        cache.by_name.clear();
                        cache.recorder = at;
                    }
                    if !cache.by_name.contains_key(self.name) && cache.by_name.len() >= MAX_NAMES {
                        cache.by_name.clear();
                    }
                    let entries = match cache.by_name.get_mut(self.name) {
                        Some(entries) => entries,
                        None => cache.by_name.entry(self.name.into()).or_default(),
                    };
                    let found = entries.iter().position(|e| {
                        e.metric == metric && e.primitive == self.primitive && e.extra == extra
                    });
                    let i = found.unwrap_or_else(|| {
                        entries.push(Entry {
                            primitive: self.primitive,
                            metric,
                            extra,
                            handle: self.register(recorder, metric, extra, kind),
                        });
                        entries.len() - 1
                    });
                    if let Some(f) = f.take() {
                        f(&entries[i].handle);
                    }
                });
                if let Some(f) = f {
                    f(&self.register(recorder, metric, extra, kind));
                }
            });
        }

        fn register(
            &self,
            recorder: &dyn Recorder,
            metric: &'static str,
            extra: Extra,
            kind: Kind,
        ) -> Handle {
            let mut labels = vec![
                Label::from_static_parts("primitive", self.primitive),
                Label::new("name", self.name.to_owned()),
            ];
            if let Some((k, v)) = extra {
                labels.push(Label::from_static_parts(k, v));
            }
            let key = Key::from_parts(metric, labels);
            match kind {
                Kind::Counter => Handle::Counter(recorder.register_counter(&key, &METADATA)),
                Kind::Gauge => Handle::Gauge(recorder.register_gauge(&key, &METADATA)),
                Kind::Histogram => Handle::Histogram(recorder.register_histogram(&key, &METADATA)),
            }
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Counter,
        Gauge,
        Histogram,
    }
}
