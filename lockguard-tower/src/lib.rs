//! Tower layers for lockguard.
//!
//! This crate is a placeholder: the rate-limit, lock and concurrency-limit
//! layers for axum and hyper services are being built and are not available
//! yet. Until then, take locks inside handlers with [`lockguard_core`].

#[doc(no_inline)]
pub use lockguard_core::Lockguard;
