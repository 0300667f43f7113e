//! What the code under test logs, captured for assertions.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Collects formatted `tracing` events in memory: a
/// [`MakeWriter`](tracing_subscriber::fmt::MakeWriter) for a subscriber of
/// the test's own making, or [`CapturedLog::install`] for the common case.
/// Clones share the text.
///
/// ```
/// use lockguard_testing::CapturedLog;
///
/// let log = CapturedLog::default();
/// let guard = log.install();
/// tracing::error!("lockguard is misconfigured: call Client::install_default");
/// drop(guard);
/// assert_eq!(log.lines_with("ERROR", "install_default"), 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Sets a subscriber writing every event (`DEBUG` and up, no colours)
    /// here as this thread's default until the guard is dropped. On a
    /// current-thread runtime that covers the test's spawned tasks too.
    ///
    /// Tests beside this one in the binary, on threads of their own with no
    /// subscriber, hit the same `tracing` call sites, and a call site's
    /// interest is cached for the whole process. While a single dispatcher
    /// is registered `tracing` computes that interest from the registering
    /// thread's subscriber alone, so a sibling test could switch off, for
    /// good, an event this test waits for. [`CapturedLog::install`] first
    /// registers a second dispatcher that lives as long as the process;
    /// from then on every call site's interest is asked of every live
    /// subscriber, this one included.
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        self.set_default(tracing_subscriber::fmt::format::FmtSpan::NONE)
    }

    /// As [`CapturedLog::install`], with a line as each span closes too
    /// (its fields and times), for tests of what spans record.
    pub fn install_with_span_closes(&self) -> tracing::subscriber::DefaultGuard {
        self.set_default(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
    }

    fn set_default(
        &self,
        spans: tracing_subscriber::fmt::format::FmtSpan,
    ) -> tracing::subscriber::DefaultGuard {
        static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        // Registering this subscriber asks every call site registered so far
        // again, of every live subscriber: one a sibling switched off before
        // now is switched back on.
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(self.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .with_span_events(spans)
                .finish(),
        )
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// How many times `needle` occurs.
    pub fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }

    /// How many lines contain both `level` (as formatted: `ERROR`, `WARN`,
    /// ...) and `needle`.
    pub fn lines_with(&self, level: &str, needle: &str) -> usize {
        self.text()
            .lines()
            .filter(|l| l.contains(level) && l.contains(needle))
            .count()
    }
}

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::CapturedLog;

    /// A call site a thread with no subscriber meets first, while this
    /// test's subscriber is the only one, still reaches this test's log:
    /// without the second dispatcher `tracing` would cache the other
    /// thread's "not interested" for the whole process.
    #[test]
    fn an_event_met_first_on_a_thread_without_a_subscriber_is_captured() {
        fn event() {
            tracing::debug!("met first on another thread");
        }
        let log = CapturedLog::default();
        let _guard = log.install();
        std::thread::spawn(event).join().unwrap();
        event();
        assert_eq!(
            log.count("met first on another thread"),
            1,
            "{}",
            log.text()
        );
    }
}
