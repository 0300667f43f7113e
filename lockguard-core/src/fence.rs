//! Fencing tokens and the fenced-write helper.
//!
//! A lease can run out while its holder is paused (a GC pause, a stalled VM, a
//! slow disk), after which a second holder may acquire the lock while the first
//! still believes it holds it. Fencing tokens close that gap: every acquisition
//! of a key gets a number strictly greater than every earlier one, and the
//! resource the lock protects rejects writes carrying a number older than the
//! newest it has seen. [`FencedResource`] is such a resource stored in the
//! same backend as the lock.

use std::fmt;
use std::sync::Arc;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};

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

/// A value in the store that only accepts writes whose fencing token is at
/// least the newest one it has accepted.
///
/// Obtained from [`Client::fenced`]. The check and the write are one atomic
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
    client: Client,
    name: Arc<str>,
    key: Result<String, String>,
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
    pub(crate) fn new(client: Client, name: &str) -> Self {
        let key = crate::key::validate("fenced resource", name)
            .map(|()| crate::key::base(client.prefix(), "fenced", name));
        Self {
            client,
            name: name.into(),
            key: key.map_err(|e| e.message().to_owned()),
        }
    }

    fn key(&self) -> Result<&str> {
        self.key.as_deref().map_err(|e| Error::invalid(e.clone()))
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
            .client
            .store()
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

    /// Reads the stored value and the token that wrote it, if any.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn read(&self) -> Result<Option<FencedValue>> {
        let key = self.key()?;
        Ok(self
            .client
            .store()
            .fenced_read(key)
            .await?
            .map(|(token, value)| FencedValue {
                token: FencingToken(token),
                value,
            }))
    }
}
