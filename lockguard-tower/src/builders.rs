//! The builder methods the layers share, written once.
//!
//! Each layer keeps its own docs for them; the macro supplies the
//! signature and the body. A layer that uses it has a private
//! `fn edit(self, f: impl FnOnce(&mut T)) -> Self` over its options, whose
//! type has the fields the chosen methods set (`on_missing_key`, `failure`,
//! and for the lock and concurrency-limit layers `wait`, `lease`,
//! `busy_status`, `name`).

/// Defines the listed builder methods, each with the docs written above
/// its name:
///
/// ```text
/// builders! {
///     /// What to do with a request that has no usable key.
///     on_missing_key;
///     /// What to do when the store is down.
///     failure_mode;
/// }
/// ```
macro_rules! builders {
    ($($(#[$doc:meta])* $method:ident;)*) => {
        $($crate::builders::builders!(@method $method $(#[$doc])*);)*
    };
    (@method wait $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn wait(self, wait: std::time::Duration) -> Self {
            self.edit(|s| s.wait = Some(wait))
        }
    };
    (@method lease $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn lease(self, lease: std::time::Duration) -> Self {
            self.edit(|s| s.lease = Some(lease))
        }
    };
    (@method busy_status $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn busy_status(self, status: http::StatusCode) -> Self {
            self.edit(|s| s.busy_status = status)
        }
    };
    (@method on_missing_key $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn on_missing_key(self, outcome: $crate::MissingKey) -> Self {
            self.edit(|s| s.on_missing_key = outcome)
        }
    };
    (@method failure_mode $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn failure_mode(self, mode: $crate::FailureMode) -> Self {
            self.edit(|s| s.failure = mode)
        }
    };
    (@method on_refusal $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn on_refusal(self, hook: impl $crate::OnRefusal) -> Self {
            self.edit(|s| s.refusals = $crate::refusal::Refusals::new(hook))
        }
    };
    (@method fail_open $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn fail_open(self) -> Self {
            self.failure_mode($crate::FailureMode::Open)
        }
    };
    (@method fail_closed $(#[$doc:meta])*) => {
        $(#[$doc])*
        #[must_use]
        pub fn fail_closed(self) -> Self {
            self.failure_mode($crate::FailureMode::Closed)
        }
    };
    (@method name $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn name(&self) -> &str {
            &self.options.name
        }
    };
}

pub(crate) use builders;
