//! Attribute macros for lockguard. Docs come later.

mod attr;
mod duration;
mod expand;
mod rate;
mod template;

use proc_macro::TokenStream;

use crate::attr::Kind;

/// A distributed lock around an `async fn`.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::Lock, args.into(), item.into()).into()
}

/// A rate limit on an `async fn`.
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::RateLimit, args.into(), item.into()).into()
}

/// A concurrency limit on an `async fn`.
#[proc_macro_attribute]
pub fn concurrency_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::ConcurrencyLimit, args.into(), item.into()).into()
}
