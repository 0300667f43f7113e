crate::admit::response_future! {
    /// The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit): a permit,
    /// then the inner service or a refusal.
}
