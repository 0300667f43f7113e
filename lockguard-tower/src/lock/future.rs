crate::admit::response_future! {
    /// The response future of [`Lock`](super::Lock): the lock, then
    /// the inner service or a refusal.
}
