crate::admit::response_future! {
    /// The response future of [`RateLimit`](super::RateLimit): the limiter's
    /// decision, then the inner service or a `429`.
}
