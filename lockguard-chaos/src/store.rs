//! What the checker needs of a store: how to start it for a run, and how a
//! worker process connects to it. The built-in stores implement it in the
//! binary; a store crate outside lockguard implements it for its own.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lockguard_core::{Client, Result};

use crate::deploy::Deployment;

/// How long one store request may take in the workers: short, so a paused
/// server costs a bounded wait, far above a healthy round trip. A
/// [`Store::connect`] gives its clients this as their response and connect
/// timeouts; the checks allow for it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A future a [`Store`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store the checker runs: its name, what it offers, how to start its
/// servers and how a worker connects.
///
/// The run and its workers are separate processes of one binary (the one
/// that calls [`main`](crate::main)), so a worker finds its store again by
/// [`name`](Store::name) among the stores that binary passes.
pub trait Store: Send + Sync {
    /// The name `--store` takes, unique among the stores of a binary.
    fn name(&self) -> &'static str;

    /// Whether the store offers counters and fenced values; without them,
    /// the workers only lock.
    fn offers_counters(&self) -> bool {
        true
    }

    /// Whether the store offers rate limiters.
    fn offers_limiter(&self) -> bool {
        true
    }

    /// Whether the store offers read-write locks (`Client::rw_lock`); the
    /// workers then also read and write one under a read-write lock.
    fn offers_rw_locks(&self) -> bool {
        false
    }

    /// Starts the store's servers for one run (with the harnesses of
    /// lockguard-testing, or the store crate's own), killed when the
    /// deployment is dropped.
    ///
    /// # Panics
    ///
    /// When a server does not start: that store's run fails, with the
    /// message, and the next store still runs.
    fn start(&self) -> Box<dyn Deployment>;

    /// A worker's client of the store at `addr` (what
    /// [`Deployment::address`] gave, or `--target`'s address), made
    /// through the public API as an application would, with
    /// [`RESPONSE_TIMEOUT`] as its timeouts and its keys (or tables,
    /// or schema) under `namespace`, which keeps one run apart from another.
    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>>;

    /// Whether a server fault that ends the clients' sessions (a restart,
    /// closed connections) hands a lock to its next waiter at once, while
    /// its holder may believe it holds until its next renewal: locks whose
    /// lease is their session's (`LockLeases::Session`, on PostgreSQL and
    /// MySQL). Two holds of a key that overlap only after such a fault
    /// began in the first are then not a finding of the `mutual-exclusion`
    /// check (the store promises exclusion only while sessions live);
    /// their fences must still grow, and the older holder's fenced writes
    /// be refused.
    fn session_end_frees_locks(&self) -> bool {
        false
    }

    /// For `--target URL`: the address [`connect`](Store::connect) takes
    /// for a user's deployment at `url`, when this store serves that URL.
    fn address_of(&self, url: &str) -> Option<String> {
        let _ = url;
        None
    }
}

/// Where a worker connects: the store, its address (URLs joined by commas
/// for several nodes), and the namespace of the run.
#[derive(Clone, Copy)]
pub(crate) struct Target<'s> {
    pub(crate) store: &'s dyn Store,
    pub(crate) addr: &'s str,
    pub(crate) namespace: &'s str,
}

impl std::fmt::Debug for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("store", &self.store.name())
            .field("addr", &self.addr)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Target<'_> {
    /// A client of this store.
    pub(crate) async fn connect(&self) -> Result<Client> {
        self.store.connect(self.addr, self.namespace).await
    }

    /// The arguments that hand this target to a worker process.
    pub(crate) fn to_args(self) -> Vec<String> {
        vec![
            "--store".into(),
            self.store.name().into(),
            "--addr".into(),
            self.addr.to_owned(),
            "--namespace".into(),
            self.namespace.to_owned(),
        ]
    }
}
