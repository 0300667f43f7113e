//! The options a rate-limit layer applies to every request: a leaf the
//! layer fills and the service reads.

use super::headers::HeaderOptions;
use crate::outcome::{FailureMode, MissingKey};
use crate::refusal::Refusals;

/// The options of a rate-limit layer, for every request (a rule or a
/// table's entry may override the missing-key and failure modes).
#[derive(Debug, Clone, Default)]
pub(crate) struct RateLimitOptions {
    pub(crate) on_missing_key: MissingKey,
    pub(crate) failure: FailureMode,
    pub(crate) headers: HeaderOptions,
    pub(crate) refusals: Refusals,
    /// Whether an admitted request carries its `Decision`.
    pub(crate) decision_extension: bool,
    /// Shadow mode: decide and send the headers, never refuse.
    pub(crate) shadow: bool,
}
