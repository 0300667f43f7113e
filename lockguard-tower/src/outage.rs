//! Outages as an operator sees them: one warning when a policy's store
//! stops answering, with the cause, then quiet counting of what was refused
//! or let through meanwhile, and one line when it answers again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Whether any policy is in an outage now: a request that succeeds looks
/// no further while none is (one load, no lock).
static ANY: AtomicBool = AtomicBool::new(false);

/// The policies in an outage, by `what` and name.
static DOWN: Mutex<Option<HashMap<(&'static str, String), Down>>> = Mutex::new(None);

/// One policy's outage so far.
#[derive(Debug)]
struct Down {
    since: Instant,
    refused: u64,
    admitted: u64,
}

/// The store (at `store`, when it said where it is) failed a check of the
/// `what` named `name` with `error`, and the layer `refused` the request
/// (fail-closed) or let it through unchecked (fail-open): the first
/// failure of an outage is a warning with the store's address and the
/// cause; the rest are counted, and logged at debug.
pub(crate) fn failed(
    what: &'static str,
    name: &str,
    store: Option<&str>,
    error: &lockguard_core::Error,
    refused: bool,
) {
    let mut down = DOWN.lock().unwrap_or_else(PoisonError::into_inner);
    let down = down.get_or_insert_with(HashMap::new);
    let key = (what, name.to_owned());
    let first = !down.contains_key(&key);
    let entry = down.entry(key).or_insert_with(|| Down {
        since: Instant::now(),
        refused: 0,
        admitted: 0,
    });
    if refused {
        entry.refused += 1;
    } else {
        entry.admitted += 1;
    }
    ANY.store(true, Ordering::Relaxed);
    let cause = causes(error);
    let action = if refused {
        "refusing requests until it answers (fail-closed)"
    } else {
        "letting requests through unchecked until it answers (fail-open)"
    };
    if first {
        let store = store.unwrap_or("(no address)");
        tracing::warn!(what, name, store, error = %cause, "the store at {store} cannot be reached; {action}");
    } else {
        tracing::debug!(what, name, error = %cause, "the store still cannot be reached");
    }
}

/// The store answered a check of the `what` named `name`: the end of its
/// outage, if it was in one, told once with what happened meanwhile.
#[inline]
pub(crate) fn answered(what: &'static str, name: &str) {
    if ANY.load(Ordering::Relaxed) {
        outage_over(what, name);
    }
}

/// [`answered`] while some store is in an outage: out of the line of a
/// check.
#[cold]
#[inline(never)]
fn outage_over(what: &'static str, name: &str) {
    let mut guard = DOWN.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(down) = guard.as_mut() else { return };
    if let Some(ended) = down.remove(&(what, name.to_owned())) {
        tracing::info!(
            what,
            name,
            down_ms = u64::try_from(ended.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            refused = ended.refused,
            admitted_unchecked = ended.admitted,
            "the store answers again"
        );
    }
    if down.is_empty() {
        ANY.store(false, Ordering::Relaxed);
    }
}

/// `error` with its causes, outermost first: `store unavailable: acquiring
/// "x": connection refused (os error 111)`.
pub(crate) fn causes(error: &lockguard_core::Error) -> String {
    let mut out = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        let text = e.to_string();
        // A wrapper that repeats its cause adds nothing.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_chained_outermost_first() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e =
            lockguard_core::Error::new(lockguard_core::ErrorKind::Unavailable, "acquiring \"x\"")
                .with_source(io);
        assert_eq!(
            causes(&e),
            "store unavailable: acquiring \"x\": connection refused"
        );
    }

    /// One warning for an outage however many requests it meets, the
    /// requests counted by what the layer did, and one line at its end.
    #[test]
    fn an_outage_is_told_once_and_counted_until_the_store_answers() {
        let captured = lockguard_testing::CapturedLog::default();
        let _log = captured.install();
        let e = lockguard_core::Error::new(lockguard_core::ErrorKind::Unavailable, "down");
        let at = Some("127.0.0.1:6379");
        failed("rate limit", "outage-test", at, &e, true);
        failed("rate limit", "outage-test", at, &e, true);
        failed("rate limit", "outage-test", at, &e, false);
        {
            let down = DOWN.lock().unwrap();
            let entry = &down.as_ref().unwrap()[&("rate limit", "outage-test".to_owned())];
            assert_eq!((entry.refused, entry.admitted), (2, 1));
        }
        assert_eq!(
            captured.lines_with("WARN", "outage-test"),
            1,
            "{}",
            captured.text()
        );
        answered("rate limit", "outage-test");
        answered("rate limit", "outage-test");
        let back = captured.text();
        assert_eq!(
            captured.lines_with("INFO", "the store answers again"),
            1,
            "{back}"
        );
        assert!(
            back.contains("refused=2") && back.contains("admitted_unchecked=1"),
            "{back}"
        );
        let down = DOWN.lock().unwrap();
        assert!(
            !down
                .as_ref()
                .unwrap()
                .contains_key(&("rate limit", "outage-test".to_owned()))
        );
    }
}
