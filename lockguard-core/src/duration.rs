//! The grammar of durations written as text (`"250ms"`, `"30s"`,
//! `"1m30s"`), from `lockguard-units`: the one home it shares with the
//! attribute macros, so `"1m30s"` means the same in an attribute and in a
//! configuration file.

pub(crate) use lockguard_units::duration::Text;
#[cfg(feature = "serde")]
pub(crate) use lockguard_units::duration::parse;
