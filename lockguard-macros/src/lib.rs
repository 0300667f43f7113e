//! Attribute macros for lockguard.
//!
//! This crate is a placeholder: `#[distributed_lock]`, `#[rate_limit]` and
//! `#[concurrency_limit]` are being built and are not available yet. Use the
//! `lockguard` facade with the `macros` feature once they land.
