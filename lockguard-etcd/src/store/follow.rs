//! Following an election for its observers: one watch stream with two
//! watches, the election lock's prefix (a holder or waiter came or went,
//! also when a lease ended) and its announcement's key, each from the
//! revision etcd is at; every event rings the observer's bell.

use std::sync::Arc;

use etcd_client::{WatchOptions, WatchResponse, WatchStream};
use lockguard_core::store::{ChangeBell, LockKeys, net};
use lockguard_core::{Error, ErrorKind, Result};

use super::EtcdStore;
use crate::error::etcd_error;

impl EtcdStore {
    /// See [`DataStore::follow`](lockguard_core::store::DataStore::follow).
    pub(super) async fn follow_election(
        &self,
        lock: &Arc<LockKeys>,
        value: &str,
        bell: ChangeBell,
    ) -> Result<()> {
        let timeout = self.session.timeout();
        let what = || "following an election".to_owned();
        let answer = tokio::time::timeout(timeout, self.open_follow(lock, value)).await;
        let stream = net::within(timeout, "etcd", what, answer)?;
        tokio::spawn(ring_on_events(stream, bell));
        Ok(())
    }

    /// The two watches, standing: each answered that it was created.
    async fn open_follow(&self, lock: &LockKeys, value: &str) -> Result<WatchStream> {
        const WHAT: &str = "following an election";
        let mut client = self.session.client();
        let mut stream = client
            .watch(self.dir(lock), Some(WatchOptions::new().with_prefix()))
            .await
            .map_err(|e| etcd_error(e, WHAT))?;
        created(&mut stream).await?;
        stream
            .watch(self.data_key("fenced", value), None)
            .await
            .map_err(|e| etcd_error(e, WHAT))?;
        created(&mut stream).await?;
        Ok(stream)
    }
}

/// Waits for the answer that says a watch was created.
async fn created(stream: &mut WatchStream) -> Result<()> {
    let ended = |why: String| {
        Error::new(
            ErrorKind::Unavailable,
            format!("following an election: etcd {why}"),
        )
    };
    match stream.message().await {
        Ok(Some(r)) if r.created() && !r.canceled() => Ok(()),
        Ok(Some(r)) => Err(ended(format!("refused the watch: {}", r.cancel_reason()))),
        Ok(None) => Err(ended("ended the watch stream".to_owned())),
        Err(e) => Err(etcd_error(e, "following an election")),
    }
}

/// Rings `bell` on every event, until the observer goes away (the watches
/// are cancelled with the stream) or the stream ends (the bell is
/// dropped: the observer follows again).
async fn ring_on_events(mut stream: WatchStream, bell: ChangeBell) {
    loop {
        tokio::select! {
            () = bell.closed() => return,
            message = stream.message() => match message {
                Ok(Some(r)) if rings(&r) => bell.ring(),
                Ok(Some(r)) if r.canceled() => {
                    tracing::debug!(reason = r.cancel_reason(), "etcd cancelled an election's watch");
                    return;
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "an election's watch ended");
                    return;
                }
            },
        }
    }
}

/// Whether an answer tells of a change.
fn rings(r: &WatchResponse) -> bool {
    !r.events().is_empty() || r.compact_revision() > 0
}
