//! The recorded history: one JSON object per line, an operation's
//! invocation and its completion as separate lines, each stamped on the
//! shared monotonic clock.
//!
//! A line is written (and flushed) before the call starts and after it
//! returns, so a worker killed mid-call leaves an invocation without a
//! completion: an operation whose outcome is unknown.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::clock::now_ns;

/// What an operation asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub(crate) enum Call {
    /// `lock(key).acquire()` with a wait of `wait_ms`; a fixed lease of
    /// `lease_ms`, or the watchdog renewing a lease of `lease_ms`. With
    /// `read`, `rw_lock(key).read().acquire()`: a hold shared with other
    /// readers (a `rw_lock(key).write()` is recorded without it, as
    /// exclusive as a lock). With `permits`, `semaphore(key, permits)
    /// .acquire()`: a hold shared with at most `permits - 1` others. With
    /// `multi`, one key of `multi_lock(keys).acquire()` (recorded as one
    /// acquisition per key, invoked and completed together): its return
    /// says every key is held. With `at_least_ms`, a scheduled job's
    /// `lock(key).at_least(..)`: the lock is kept that long after the
    /// store took it, released or not.
    Acquire {
        key: String,
        wait_ms: u64,
        lease_ms: u64,
        watchdog: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permits: Option<u32>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        multi: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_least_ms: Option<u64>,
    },
    /// `guard.is_held()` on the guard with `fence`.
    IsHeld { key: String, fence: u64 },
    /// A fenced write with `fence` to the resource `key`.
    FencedWrite { key: String, fence: u64 },
    /// `guard.release()` of the guard with `fence`.
    Release { key: String, fence: u64 },
    /// `counter(key).incr_by(n)`.
    Incr { key: String, n: i64 },
    /// `counter(key).decr_if_at_least(n)`.
    Take { key: String, n: i64 },
    /// `counter(key).set(n)` (the runner, before the workers start).
    Set { key: String, n: i64 },
    /// `counter(key).get_versioned()`.
    Get { key: String },
    /// `counter(key).compare_and_set(version, new)`, after a read of
    /// `read` at `version`.
    Cas {
        key: String,
        version: u64,
        read: i64,
        new: i64,
    },
    /// `rate_limiter(..).check(key)`.
    Check { key: String },
    /// `leader(key).campaign()` with a wait of `wait_ms` and a fixed lease
    /// of `lease_ms`.
    Campaign {
        key: String,
        wait_ms: u64,
        lease_ms: u64,
    },
    /// `leadership.is_held()` of the leadership of `term`.
    Leads { key: String, term: u64 },
    /// `leadership.resign()` of the leadership of `term`.
    Resign { key: String, term: u64 },
    /// `leader(key).current()`; with `observer`, the `next()` of the
    /// worker's observer of the election (`leader(key).observe()`).
    WhoLeads {
        key: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        observer: bool,
    },
    /// A run of the scheduled job `key` for `period`, from its start to
    /// its end (`Acquired` with the run's fencing token).
    ScheduledRun { key: String, period: u64 },
    /// A fault the runner injected, from its start to its heal.
    Fault { what: String, target: String },
}

impl Call {
    /// The key (lock, counter, resource or limiter key) the call is on.
    pub(crate) fn key(&self) -> &str {
        match self {
            Call::Acquire { key, .. }
            | Call::IsHeld { key, .. }
            | Call::FencedWrite { key, .. }
            | Call::Release { key, .. }
            | Call::Incr { key, .. }
            | Call::Take { key, .. }
            | Call::Set { key, .. }
            | Call::Get { key }
            | Call::Cas { key, .. }
            | Call::Check { key }
            | Call::Campaign { key, .. }
            | Call::Leads { key, .. }
            | Call::Resign { key, .. }
            | Call::WhoLeads { key, .. }
            | Call::ScheduledRun { key, .. } => key,
            Call::Fault { target, .. } => target,
        }
    }
}

/// What an operation returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// Acquired with this fencing token.
    Acquired { fence: u64 },
    /// `is_held()`'s answer.
    Held { yes: bool },
    /// A fenced write accepted.
    Written,
    /// A fenced write refused as stale.
    Stale,
    /// A release; whether the lock was still ours.
    Released { was_held: bool },
    /// A counter's value (incr, set, get) and its version when read.
    Value { v: i64, version: Option<u64> },
    /// A bounded decrement: the new value, or `None` when refused.
    Taken { v: Option<i64> },
    /// Whether a compare-and-set applied.
    Swapped { ok: bool },
    /// A limiter's decision.
    Decided { allowed: bool },
    /// Elected, for this term.
    Elected { term: u64 },
    /// Who `current()` said leads: the term, or `None` for nobody.
    Leader { term: Option<u64> },
    /// A fault healed.
    Healed,
    /// An error, by kind (`busy`, `timed out`, `store unavailable`, ...).
    Error { kind: String, msg: String },
}

impl Outcome {
    pub(crate) fn error(e: &lockguard_core::Error) -> Self {
        Outcome::Error {
            kind: e.kind().to_string(),
            msg: e.message().to_owned(),
        }
    }

    /// Whether this error certainly left the store unchanged (bad input,
    /// an unsupported call); any other error may or may not have applied.
    pub(crate) fn definitely_not_applied(&self) -> bool {
        matches!(self, Outcome::Error { kind, .. } if kind == "invalid input" || kind == "unsupported" || kind == "busy")
    }
}

/// One line of a history file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Line {
    /// The process: 0 for the runner, workers from 1.
    pub(crate) w: u32,
    /// The operation's number within its process.
    pub(crate) op: u64,
    /// When, on the shared monotonic clock (ns).
    pub(crate) t: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) call: Option<Call>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) out: Option<Outcome>,
}

/// Writes one process's history, a line per invocation and completion.
pub(crate) struct Recorder {
    /// Errors recorded since the caller last reset this.
    pub(crate) errors: usize,
    w: u32,
    next: u64,
    out: Box<dyn Write + Send>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("w", &self.w)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder for process `w` writing to `out` (flushed line by line).
    pub(crate) fn new(w: u32, out: Box<dyn Write + Send>) -> Self {
        Self {
            errors: 0,
            w,
            next: 0,
            out,
        }
    }

    fn write(&mut self, line: &Line) {
        // A history that cannot be written is a broken run, not a result.
        let mut text = serde_json::to_string(line).expect("a history line serializes");
        text.push('\n');
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .expect("cannot write the history");
    }

    /// Records the invocation of `call` now; returns its operation number.
    /// The timestamp is taken last, right before the call starts.
    pub(crate) fn invoke(&mut self, call: Call) -> u64 {
        let op = self.next;
        self.next += 1;
        let mut line = Line {
            w: self.w,
            op,
            t: 0,
            call: Some(call),
            out: None,
        };
        line.t = now_ns();
        self.write(&line);
        op
    }

    /// Records the completion of `op` now. The timestamp is taken first,
    /// right after the call returned.
    pub(crate) fn complete(&mut self, op: u64, out: Outcome) {
        let t = now_ns();
        self.complete_at(op, t, out);
    }

    /// Records the completion of `op` at `t` (taken by the caller right
    /// after the call returned).
    pub(crate) fn complete_at(&mut self, op: u64, t: u64, out: Outcome) {
        if matches!(out, Outcome::Error { .. }) {
            self.errors += 1;
        }
        self.write(&Line {
            w: self.w,
            op,
            t,
            call: None,
            out: Some(out),
        });
    }

    /// Records an invocation at `t` and its completion at `t2` at once:
    /// for a call timed by the caller.
    pub(crate) fn record(&mut self, call: Call, t: u64, t2: u64, out: Outcome) {
        let op = self.next;
        self.next += 1;
        self.write(&Line {
            w: self.w,
            op,
            t,
            call: Some(call),
            out: None,
        });
        self.complete_at(op, t2, out);
    }
}

/// One operation of the merged history.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub(crate) w: u32,
    pub(crate) op: u64,
    pub(crate) call: Call,
    /// Invocation time (ns).
    pub(crate) invoke: u64,
    /// Completion time and outcome; `None` when the process died first.
    pub(crate) done: Option<(u64, Outcome)>,
}

impl Op {
    /// The completion time, or `u64::MAX` for an operation that never
    /// completed (it may take effect at any time after its invocation).
    pub(crate) fn end(&self) -> u64 {
        self.done.as_ref().map_or(u64::MAX, |(t, _)| *t)
    }

    pub(crate) fn outcome(&self) -> Option<&Outcome> {
        self.done.as_ref().map(|(_, o)| o)
    }

    /// `w3#17 acquire{...} @1234.5ms -> ...`, for reports.
    pub(crate) fn describe(&self, t0: u64) -> String {
        let rel = |t: u64| crate::clock::ms(t.saturating_sub(t0));
        let done = match &self.done {
            Some((t, o)) => format!(
                "{:.1}ms {}",
                rel(*t),
                serde_json::to_string(o).unwrap_or_default()
            ),
            None => "never completed".to_owned(),
        };
        format!(
            "w{}#{} {} invoked {:.1}ms, returned {}",
            self.w,
            self.op,
            serde_json::to_string(&self.call).unwrap_or_default(),
            rel(self.invoke),
            done
        )
    }
}

/// Reads every history file in `dir` and pairs invocations with
/// completions, ordered by invocation time.
pub(crate) fn load(dir: &Path) -> std::io::Result<Vec<Op>> {
    let mut ops: HashMap<(u32, u64), Op> = HashMap::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    entries.sort();
    for path in entries {
        let file = std::io::BufReader::new(std::fs::File::open(&path)?);
        for line in file.lines() {
            let line = line?;
            // A process killed mid-write leaves a torn last line: its
            // operation then counts as never completed.
            let Ok(line) = serde_json::from_str::<Line>(&line) else {
                continue;
            };
            match (line.call, line.out) {
                (Some(call), _) => {
                    ops.insert(
                        (line.w, line.op),
                        Op {
                            w: line.w,
                            op: line.op,
                            call,
                            invoke: line.t,
                            done: None,
                        },
                    );
                }
                (None, Some(out)) => {
                    if let Some(op) = ops.get_mut(&(line.w, line.op)) {
                        op.done = Some((line.t, out));
                    }
                }
                (None, None) => {}
            }
        }
    }
    let mut ops: Vec<Op> = ops.into_values().collect();
    ops.sort_by_key(|o| (o.invoke, o.w, o.op));
    Ok(ops)
}
