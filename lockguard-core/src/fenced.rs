//! The fenced-write helper: a value that refuses writes carrying an older
//! fencing token than one it has accepted.

use std::sync::Arc;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::fence::FencingToken;

/// A value in the store that only accepts writes whose fencing token is at
/// least the newest one it has accepted.
///
/// Obtained from [`Client::fenced`](crate::Client::fenced). The check and the write are one atomic
/// step (one Lua script on Redis).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// let lg = lockguard_core::Client::memory();
/// let guard = lg.lock("invoice:7").lease(std::time::Duration::from_secs(5)).acquire().await?;
/// let ledger = lg.fenced("ledger:7");
/// ledger.write(guard.fencing_token(), b"paid").await?;
/// assert_eq!(ledger.read().await?.unwrap().value, b"paid");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedResource {
    engine: Arc<Engine>,
    name: Arc<str>,
    key: Result<String, Invalid>,
}

/// The current contents of a [`FencedResource`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedValue {
    /// The token of the write that stored `value`.
    pub token: FencingToken,
    /// The bytes written.
    pub value: Vec<u8>,
}

impl FencedResource {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        let key = crate::key::validate_key("fenced resource", name)
            .map(|()| crate::key::base(&engine.prefix, "fenced", name))
            .map_err(Invalid::from);
        Self {
            engine,
            name: name.into(),
            key,
        }
    }

    /// The value behind the election `name`'s announcement
    /// ([`Leader`](crate::Leader)), on a key of its own kind.
    pub(crate) fn announcement(engine: Arc<Engine>, name: &str) -> Self {
        Self::of_kind(engine, "election", crate::key::ANNOUNCEMENT_KIND, name)
    }

    /// The record of the last period the scheduled job `name` ran
    /// ([`Client::schedule`](crate::Client::schedule)), on a key of its own
    /// kind.
    pub(crate) fn schedule_runs(engine: Arc<Engine>, name: &str) -> Self {
        Self::of_kind(engine, "scheduled job", crate::key::SCHEDULE_RUN_KIND, name)
    }

    /// A value on a key of `kind`, named `name` (checked as `what`'s).
    fn of_kind(engine: Arc<Engine>, what: &str, kind: &str, name: &str) -> Self {
        let key = crate::key::validate_key(what, name)
            .map(|()| crate::key::base(&engine.prefix, kind, name))
            .map_err(Invalid::from);
        Self {
            engine,
            name: name.into(),
            key,
        }
    }

    pub(crate) fn key(&self) -> Result<&str> {
        self.key.as_deref().map_err(Invalid::error)
    }

    /// The resource's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stores `value` if `token` is at least the newest token this resource
    /// has accepted.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StaleFencingToken`] when a newer token has written
    /// already; the store's errors otherwise.
    pub async fn write(&self, token: FencingToken, value: impl AsRef<[u8]>) -> Result<()> {
        let key = self.key()?;
        let accepted = self
            .engine
            .store
            .fenced_write(key, token.get(), value.as_ref())
            .await?;
        if accepted {
            tracing::debug!(resource = %self.name, fence = token.get(), "fenced write accepted");
            Ok(())
        } else {
            tracing::warn!(resource = %self.name, fence = token.get(), "fenced write rejected: stale token");
            Err(Error::new(
                ErrorKind::StaleFencingToken,
                format!(
                    "write to {:?} with fencing token {token} rejected: a newer token has written",
                    self.name
                ),
            ))
        }
    }

    /// Removes the stored value if `token` is at least the newest token
    /// this resource has accepted, in one atomic step, and keeps `token` as
    /// the newest.
    ///
    /// The token stays behind (a tombstone of a few bytes per resource):
    /// afterwards [`read`](Self::read) answers `None`, a write with an older
    /// token is still refused, and a write with the same or a newer token is
    /// accepted. Removing a resource that holds nothing records `token` all
    /// the same, so a later write with an older one is refused. Deleting the
    /// token as well would let a holder paused past its lease write again
    /// with its stale token.
    ///
    /// A fenced value never expires by itself: an expiry would forget the
    /// newest token and admit the stale writers the resource exists to
    /// refuse. Remove it, with a current token, when it is no longer needed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// # use std::time::Duration;
    /// let lg = lockguard_core::Client::memory();
    /// let ledger = lg.fenced("ledger:7");
    /// let old = lg.lock("invoice:7").lease(Duration::from_secs(5)).acquire().await?;
    /// let old_token = old.fencing_token();
    /// old.release().await?;
    ///
    /// let guard = lg.lock("invoice:7").lease(Duration::from_secs(5)).acquire().await?;
    /// ledger.write(guard.fencing_token(), b"paid").await?;
    /// ledger.remove(guard.fencing_token()).await?;
    /// assert_eq!(ledger.read().await?, None);
    ///
    /// // The token stays: a holder with an older one cannot write again.
    /// let stale = ledger.write(old_token, b"pending").await.unwrap_err();
    /// assert!(stale.is_stale_fencing_token());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StaleFencingToken`] when a newer token has written
    /// already (nothing is removed); [`ErrorKind::Unsupported`] on a store
    /// without fenced values; the store's errors otherwise.
    pub async fn remove(&self, token: FencingToken) -> Result<()> {
        let key = self.key()?;
        let removed = self.engine.store.fenced_remove(key, token.get()).await?;
        if removed {
            tracing::debug!(resource = %self.name, fence = token.get(), "fenced value removed");
            Ok(())
        } else {
            tracing::warn!(resource = %self.name, fence = token.get(), "fenced remove rejected: stale token");
            Err(Error::new(
                ErrorKind::StaleFencingToken,
                format!(
                    "removal of {:?} with fencing token {token} rejected: a newer token has written",
                    self.name
                ),
            ))
        }
    }

    /// Reads the stored value and the token that wrote it, if any.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn read(&self) -> Result<Option<FencedValue>> {
        let key = self.key()?;
        Ok(self
            .engine
            .store
            .fenced_read(key)
            .await?
            .map(|(token, value)| FencedValue {
                token: FencingToken::new(token),
                value,
            }))
    }
}
