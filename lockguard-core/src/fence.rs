//! Fencing tokens.
//!
//! A lease can run out while its holder is paused (a GC pause, a stalled VM, a
//! slow disk), after which a second holder may acquire the lock while the first
//! still believes it holds it. Fencing tokens close that gap: every acquisition
//! of a key gets a number strictly greater than every earlier one, and the
//! resource the lock protects rejects writes carrying a number older than the
//! newest it has seen. [`FencedResource`](crate::FencedResource) is such a
//! resource stored in the same store as the lock.

use std::fmt;

/// A number handed out with each acquisition of a lock, strictly greater than
/// every earlier one for the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token, for instance one read back from a resource.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A token is a `bigint` in PostgreSQL, so an application's own tables can
/// store it beside the rows it fences (see
/// `lockguard_postgres::FencedTable`). Tokens above
/// `i64::MAX` (never handed out by lockguard's stores) are refused.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl postgres_types::ToSql for FencingToken {
    fn to_sql(
        &self,
        ty: &postgres_types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        i64::try_from(self.0)?.to_sql(ty, out)
    }

    postgres_types::accepts!(INT8);
    postgres_types::to_sql_checked!();
}

/// Reads a token stored as a `bigint`; a negative one is refused.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl<'a> postgres_types::FromSql<'a> for FencingToken {
    fn from_sql(
        ty: &postgres_types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Self(u64::try_from(i64::from_sql(ty, raw)?)?))
    }

    postgres_types::accepts!(INT8);
}
