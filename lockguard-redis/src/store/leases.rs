//! The leases renewed through a Sentinel connection, renewed again on a
//! new master.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::RedisStore;
use crate::sentinel::OnSwitch;
use lockguard_core::store::{LockKeys, Token};

/// A renewed lease: its keys, its length, and until when it was set to
/// last (entries past it are forgotten).
type Renewed = (LockKeys, Duration, Instant);

/// The leases a client renewed through a Sentinel connection, renewed again
/// on the new master the moment the connection switches to it.
///
/// Redis replicates asynchronously, and a master stays writable after the
/// sentinels promoted its replica until they reconfigure it or it dies: a
/// renewal it accepted in that window never reaches the new master, which
/// keeps the lease of the last renewal that replicated before the
/// promotion. The holder, counting on the later renewal, would renew on the
/// new master only at its next turn (a third of a lease later), perhaps
/// after the new master's lease ran out and the lock went to someone else.
/// Renewing at once on the switch leaves the lease on the new master as
/// long as the holder counts on, unless the switch itself came too late.
///
/// Only renewed leases are kept (a watchdog's, or one a holder extended):
/// a fixed lease never renewed replicated as it was set and is left to end
/// when it was meant to.
#[derive(Default)]
pub(crate) struct Leases {
    /// By holder's token (unique to one acquisition of one key).
    held: Mutex<HashMap<Token, Renewed>>,
    /// The store renewing them (set once it is built).
    store: OnceLock<Weak<RedisStore>>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("held", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl Leases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Renewed>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the store that renews the leases.
    pub(crate) fn renewed_by(&self, store: &Arc<RedisStore>) {
        let _ = self.store.set(Arc::downgrade(store));
    }

    /// Notes that `token`'s lease on `keys` was renewed for `lease`.
    pub(crate) fn renewed(&self, keys: &LockKeys, token: &Token, lease: Duration) {
        let now = Instant::now();
        let mut held = self.lock();
        let entry = (keys.clone(), lease, now + lease);
        if held.insert(*token, entry).is_none() {
            // Leases whose holders stopped renewing without a release (guards
            // leaked) end; so do their entries, looked for once per new
            // lease rather than at every renewal.
            held.retain(|_, (_, _, until)| *until > now);
        }
    }

    /// Forgets `token`'s lease on `keys` (released, or found gone).
    pub(crate) fn forget(&self, token: &Token) {
        self.lock().remove(token);
    }

    /// Renews every lease still running on the master just switched to, in
    /// the background.
    fn renew_all(&self) {
        let Some(store) = self.store.get().and_then(Weak::upgrade) else {
            return;
        };
        let now = Instant::now();
        let due: Vec<(LockKeys, Token, Duration)> = self
            .lock()
            .iter()
            .filter(|(_, (_, _, until))| *until > now)
            .map(|(token, (keys, lease, _))| (keys.clone(), *token, *lease))
            .collect();
        if due.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for (keys, token, lease) in due {
                // `extend` keeps the record: renewed, or forgotten if gone.
                match store.extend(&keys, &token, lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(lock = %keys.id(), "the lease was gone on the new master");
                    }
                    Err(e) => {
                        tracing::warn!(lock = %keys.id(), error = %e, "renewing a lease on the new master failed; its watchdog retries");
                    }
                }
            }
        });
    }

    /// The callback that renews every lease after a switch.
    pub(crate) fn on_switch(self: &Arc<Self>) -> OnSwitch {
        let leases = Arc::downgrade(self);
        Arc::new(move || {
            if let Some(leases) = leases.upgrade() {
                leases.renew_all();
            }
        })
    }
}
