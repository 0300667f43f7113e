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
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(self.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
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
