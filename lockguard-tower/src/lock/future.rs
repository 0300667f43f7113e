crate::admit::response_future! {
    /// The response future of [`LockService`](super::LockService): the lock, then
    /// the inner service or a refusal.
}
