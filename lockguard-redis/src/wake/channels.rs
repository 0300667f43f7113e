//! The channels a subscriber connection is subscribed to, as far as its
//! client knows.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

/// What this client knows of a channel's subscription on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// The server confirmed it.
    Subscribed,
    /// A change was asked for and its outcome is unknown.
    Maybe,
}

/// Channels subscribed on the server; the lock also orders every
/// SUBSCRIBE and UNSUBSCRIBE this client sends.
pub(crate) type Channels = Arc<Mutex<HashMap<String, Known>>>;
