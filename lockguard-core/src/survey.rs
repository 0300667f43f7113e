//! What an operator sees and does across every client of a store: the
//! locks held or awaited ([`Client::locks`]) and a forced release
//! ([`Client::force_release`]), what the `lockguard locks` and
//! `lockguard release --force` commands run.

use std::fmt;
use std::sync::Arc;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::key::{
    ELECTION_KIND, LockKeys, Resource, RwMode, SCHEDULE_KIND, UPGRADE_GATE_KIND, UPGRADEABLE_KIND,
    untag,
};
use crate::store::{Holder, Holding, Waiter};

/// What kind of lock a [`LockState`] is: the primitive that took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Lock`](crate::Lock).
    Lock,
    /// A [`Semaphore`](crate::Semaphore): its permits' holders.
    Semaphore,
    /// A [`RwLock`](crate::RwLock): its readers or its writer.
    ReadWrite,
    /// The lock behind a [`Leader`](crate::Leader) election.
    Election,
    /// The lock behind a scheduled job ([`Client::schedule`]).
    Schedule,
    /// An [`UpgradeableRwLock`](crate::UpgradeableRwLock): its readers
    /// (the upgradeable reader among them) or its writer.
    Upgradeable,
    /// The gate of an [`UpgradeableRwLock`](crate::UpgradeableRwLock):
    /// its upgradeable reader or its writer.
    UpgradeGate,
}

impl LockKind {
    /// The kind as the `lockguard` tool prints it and reads it back:
    /// `lock`, `semaphore`, `rw`, `leader`, `schedule`, `urw` or
    /// `urw-gate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::ReadWrite => "rw",
            Self::Election => "leader",
            Self::Schedule => "schedule",
            Self::Upgradeable => UPGRADEABLE_KIND,
            Self::UpgradeGate => UPGRADE_GATE_KIND,
        }
    }

    /// The kind named `text` (what [`as_str`](Self::as_str) prints).
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Lock,
            Self::Semaphore,
            Self::ReadWrite,
            Self::Election,
            Self::Schedule,
            Self::Upgradeable,
            Self::UpgradeGate,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }

    /// The kind of a store identity's kind part.
    fn of_id_kind(kind: &str) -> Option<Self> {
        match kind {
            "lock" => Some(Self::Lock),
            "sem" => Some(Self::Semaphore),
            "rw" => Some(Self::ReadWrite),
            ELECTION_KIND => Some(Self::Election),
            SCHEDULE_KIND => Some(Self::Schedule),
            UPGRADEABLE_KIND => Some(Self::Upgradeable),
            UPGRADE_GATE_KIND => Some(Self::UpgradeGate),
            _ => None,
        }
    }

    /// The keys of a hold of the lock `name` of this kind (`mode` for a
    /// read-write lock's), for a forced release.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a semaphore, whose release needs its permits.
    fn keys(self, prefix: &str, name: &str, mode: Option<RwMode>) -> Result<LockKeys> {
        let mode = mode.unwrap_or(RwMode::Write);
        Ok(match self {
            Self::Lock => LockKeys::new(prefix, name, Resource::Lock),
            Self::ReadWrite => LockKeys::rw(prefix, name, mode),
            Self::Election => LockKeys::election(prefix, name),
            Self::Schedule => LockKeys::of_kind(prefix, SCHEDULE_KIND, name),
            Self::Upgradeable => LockKeys::rw_of_kind(prefix, UPGRADEABLE_KIND, name, mode),
            Self::UpgradeGate => LockKeys::of_kind(prefix, UPGRADE_GATE_KIND, name),
            Self::Semaphore => {
                return Err(Error::invalid(format!(
                    "semaphore {name:?}: a forced release frees locks, read-write locks, \
                     elections and scheduled jobs; a semaphore's permits end with their leases"
                )));
            }
        })
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lock, semaphore or read-write lock held or awaited now, as
/// [`Client::locks`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// What took it.
    pub kind: LockKind,
    /// Its name, as given to [`Client::lock`] (and the others).
    pub name: String,
    /// Who holds it: for each holder its token (the identity of its
    /// hold), its mode of a read-write lock, its fencing token and its
    /// lease left where the store keeps them.
    pub holders: Vec<Holder>,
    /// Who waits for it, first in line first.
    pub waiters: Vec<Waiter>,
    /// The newest fencing token drawn for it: no holder's is greater.
    pub latest_fence: Option<FencingToken>,
}

/// What a [`Client::force_release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forced {
    /// The holders whose holds it ended (none when nobody held it).
    pub evicted: Vec<Holder>,
    /// Who holds it now: the waiters it was handed on to, each with a
    /// fencing token above every evicted holder's.
    pub holders: Vec<Holder>,
    /// The newest fencing token drawn for it, after the release: every
    /// later holder's is greater, so a fenced write of an evicted holder
    /// is refused once a later holder has written.
    pub latest_fence: Option<FencingToken>,
}

impl Client {
    /// Every lock, semaphore, read-write lock, election and scheduled job
    /// under this client's prefix that is held or awaited now, whatever
    /// client holds it, with its holders and its waiters in order: what
    /// `lockguard locks URL [PATTERN]` prints. `pattern` matches the names
    /// (`*` any run of characters, `?` one character; `*` for all).
    ///
    /// The store reads each lock on its own, so the list is not one
    /// snapshot of every lock at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) on a store
    /// that cannot list its locks (see the store table in `docs/stores.md`),
    /// and the store's errors.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// let lg = lockguard_core::Client::memory();
    /// let _guard = lg.lock("order:42").try_acquire().await?;
    /// let held = lg.locks("order:*").await?;
    /// assert_eq!(held.len(), 1);
    /// assert_eq!(held[0].name, "order:42");
    /// assert_eq!(held[0].holders.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockState>> {
        let prefix = self.prefix();
        let found = self.engine().store.survey(prefix).await?;
        let mut out: Vec<LockState> = found
            .into_iter()
            .filter_map(|h| state(prefix, h))
            .filter(|s| matches(pattern, &s.name))
            .collect();
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        Ok(out)
    }

    /// How much longer no lock can be taken anew on this client's store
    /// after a crash, a restart or a failover that lost its records of the
    /// leases running then: the store waits out the longest a lease could
    /// have lasted, since a holder of the server that went down may still
    /// count on its lease. `None` when there is no such wait, and on the
    /// stores whose records outlive a crash (all but PostgreSQL, whose
    /// leases are kept in unlogged tables, and MySQL/MariaDB, in MEMORY
    /// tables: see `docs/postgres.md` and `docs/mysql.md`). What
    /// `lockguard locks` shows beside the locks.
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// let lg = lockguard_core::Client::memory();
    /// assert_eq!(lg.crash_wait().await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn crash_wait(&self) -> Result<Option<std::time::Duration>> {
        self.engine().store.crash_wait().await
    }

    /// Frees the lock `name` of `kind` whoever holds it: ends every
    /// holder's hold in the store (as an operator would for a holder that
    /// is stuck) and hands the lock on to the next waiter, as the holder's
    /// own release would. What `lockguard release URL KEY --force` runs.
    ///
    /// The evicted holder's guard learns it lost the lock at its next
    /// renewal (its [`LockGuard::lost`](crate::LockGuard::lost) fires); until
    /// then it may still believe it holds. Its fencing token is below every
    /// later holder's: a fenced write it makes is refused once a later
    /// holder has written (see [`Forced::latest_fence`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// bad name and for a semaphore (its permits end with their leases);
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) on a store
    /// that cannot list its locks; the store's errors. A holder whose
    /// eviction failed is an error: nothing is reported freed that was not.
    ///
    /// # Examples
    ///
    /// ```
    /// use lockguard_core::LockKind;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// let lg = lockguard_core::Client::memory();
    /// let stuck = lg.lock("report").try_acquire().await?;
    /// let forced = lg.force_release(LockKind::Lock, "report").await?;
    /// assert_eq!(forced.evicted.len(), 1);
    /// assert!(!stuck.release().await?, "the stuck holder no longer holds it");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_release(&self, kind: LockKind, name: &str) -> Result<Forced> {
        crate::key::validate_key(kind.as_str(), name)?;
        let prefix = self.prefix();
        kind.keys(prefix, name, None)?;
        let before = self.one(kind, name).await?;
        let Some(before) = before else {
            return Ok(Forced {
                evicted: Vec::new(),
                holders: Vec::new(),
                latest_fence: None,
            });
        };
        let mut evicted = Vec::new();
        for holder in before.holders {
            let keys = Arc::new(kind.keys(prefix, name, holder.mode)?);
            if self.engine().store.evict(&keys, &holder.token).await? {
                tracing::warn!(lock = %keys.id(), token = holder.token.as_str(), "forced release: a holder's hold ended");
                evicted.push(holder);
            }
        }
        let after = self.one(kind, name).await?;
        Ok(Forced {
            evicted,
            holders: after
                .as_ref()
                .map(|s| s.holders.clone())
                .unwrap_or_default(),
            latest_fence: after.and_then(|s| s.latest_fence).or(before.latest_fence),
        })
    }

    /// The lock `name` of `kind`, if held or awaited.
    async fn one(&self, kind: LockKind, name: &str) -> Result<Option<LockState>> {
        let prefix = self.prefix();
        let found = self.engine().store.survey(prefix).await?;
        Ok(found
            .into_iter()
            .filter_map(|h| state(prefix, h))
            .find(|s| s.kind == kind && s.name == name))
    }
}

/// The lock a store's holding names, if it is one of a kind a client
/// takes under `prefix`.
fn state(prefix: &str, holding: Holding) -> Option<LockState> {
    let rest = holding.id.strip_prefix(prefix)?;
    let (kind, tagged) = rest.split_once(':')?;
    if !tagged.starts_with('{') {
        return None;
    }
    let kind = LockKind::of_id_kind(kind)?;
    let name = untag(tagged).into_owned();
    Some(LockState {
        kind,
        name,
        holders: holding.holders,
        waiters: holding.waiters,
        latest_fence: holding.latest_fence,
    })
}

/// Whether `name` matches the glob `pattern`: `*` any run of characters,
/// `?` one character, anything else itself.
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match, backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        assert!(matches("*", ""));
        assert!(matches("*", "order:42"));
        assert!(matches("order:*", "order:42"));
        assert!(!matches("order:*", "orders"));
        assert!(matches("order:?2", "order:42"));
        assert!(!matches("order:?", "order:42"));
        assert!(matches("*:4*", "order:42"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
    }

    #[test]
    fn identities_name_their_kind_and_name() {
        let keys = LockKeys::new("app:", "order:{42}\\x", Resource::Lock);
        let st = state(
            "app:",
            Holding::new(keys.id().to_owned(), vec![], vec![], None),
        )
        .unwrap();
        assert_eq!(
            (st.kind, st.name.as_str()),
            (LockKind::Lock, "order:{42}\\x")
        );
        let rw = LockKeys::rw("app:", "doc", RwMode::Read);
        let st = state(
            "app:",
            Holding::new(rw.id().to_owned(), vec![], vec![], None),
        )
        .unwrap();
        assert_eq!((st.kind, st.name.as_str()), (LockKind::ReadWrite, "doc"));
        let job = LockKeys::of_kind("app:", SCHEDULE_KIND, "nightly");
        let st = state(
            "app:",
            Holding::new(job.id().to_owned(), vec![], vec![], None),
        )
        .unwrap();
        assert_eq!((st.kind, st.name.as_str()), (LockKind::Schedule, "nightly"));
        // Another prefix's locks, and keys of other kinds, are not listed.
        assert!(
            state(
                "other:",
                Holding::new(keys.id().to_owned(), vec![], vec![], None)
            )
            .is_none()
        );
        assert!(
            state(
                "app:",
                Holding::new("app:counter:{c}".into(), vec![], vec![], None)
            )
            .is_none()
        );
        for kind in [
            "lock",
            "semaphore",
            "rw",
            "leader",
            "schedule",
            "urw",
            "urw-gate",
        ] {
            assert_eq!(LockKind::parse(kind).map(LockKind::as_str), Some(kind));
        }
    }
}
