//! Running code in the primitives' tracing spans.

/// Runs `f` in `span`, entering it only when something listens: entering
/// a disabled span still costs checks (and, with tracing's `log` feature,
/// a look at the `log` crate's level) on every call.
pub(crate) fn in_span<R>(span: &tracing::Span, f: impl FnOnce() -> R) -> R {
    if span.is_disabled() {
        f()
    } else {
        span.in_scope(f)
    }
}

/// `fut` in `span`, or as it is where nothing listens: entering and leaving
/// a span nobody records is still work on every poll.
pub(crate) async fn instrumented<T>(fut: impl Future<Output = T>, span: &tracing::Span) -> T {
    if span.is_none() {
        fut.await
    } else {
        use tracing::Instrument as _;
        fut.instrument(span.clone()).await
    }
}
