//! Acquisitions in flight, for a store that sends its requests over a pool
//! of connections: a release of a token waits for the acquisitions of the
//! same token still running, so that the two, sent on different
//! connections, run in the order they were made. (One connection, as the
//! Redis store uses, keeps that order by itself.)
//!
//! An acquisition whose caller stops waiting (a dropped future, a timeout)
//! may still run in the database. The store then keeps its [`Flight`]
//! until the connection it was sent on has answered a request sent after
//! it: a connection answers in order, so by then the acquisition has run.
//! The PostgreSQL and MySQL stores do this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The acquisitions running now, by token: how many, and a wake-up for
/// whoever waits for the last to end. One per store, shared (`Arc`).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use lockguard_core::store::Flights;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let flights = Arc::new(Flights::default());
/// let flight = flights.depart("token-1");
/// // ... the acquisition is sent; it answers:
/// drop(flight);
/// // A release of token-1 goes at once.
/// flights.landed("token-1", Duration::from_secs(5)).await;
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Flights(Mutex<HashMap<Arc<str>, Running>>);

/// The acquisitions of one token running now.
#[derive(Debug)]
struct Running {
    count: usize,
    /// The wake-up of the releases waiting for them, made by the first
    /// that waits: an acquisition no release overlaps makes none.
    ended: Option<Arc<Notify>>,
}

/// One running acquisition; ends when dropped: once it answered, or, for
/// one whose caller stopped waiting, once its connection has run it.
#[derive(Debug)]
pub struct Flight {
    flights: Arc<Flights>,
    /// The token, shared with its entry in the map.
    token: Arc<str>,
}

impl Flights {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Running>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An acquisition of `token` starts; it runs until the returned
    /// flight is dropped.
    pub fn depart(self: &Arc<Self>, token: &str) -> Flight {
        let token: Arc<str> = Arc::from(token);
        self.map()
            .entry(token.clone())
            .or_insert(Running {
                count: 0,
                ended: None,
            })
            .count += 1;
        Flight {
            flights: self.clone(),
            token,
        }
    }

    /// Waits (at most `within`) until no acquisition of `token` runs: what
    /// a release of `token` does first.
    pub async fn landed(&self, token: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let Some(notify) = self
                .map()
                .get_mut(token)
                .map(|r| r.ended.get_or_insert_with(Default::default).clone())
            else {
                return;
            };
            let ended = notify.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.map().contains_key(token) {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        // Taken out, and put back only while another acquisition of the
        // token runs: one lookup in the common case.
        let mut map = self.flights.map();
        let Some((key, mut running)) = map.remove_entry(&self.token) else {
            return;
        };
        running.count -= 1;
        if running.count > 0 {
            map.insert(key, running);
        } else if let Some(ended) = running.ended {
            ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_the_acquisitions_of_its_token_only() {
        let flights = Arc::new(Flights::default());
        let a = flights.depart("a");
        let a2 = flights.depart("a");
        let _b = flights.depart("b");
        // Nothing runs for "c": no wait.
        flights.landed("c", Duration::from_secs(60)).await;
        let waiting = tokio::spawn({
            let flights = flights.clone();
            async move { flights.landed("a", Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "one acquisition of a still runs");
        drop(a2);
        tokio::time::timeout(Duration::from_millis(10), waiting)
            .await
            .expect("released when the last acquisition ended")
            .unwrap();
        // A bounded wait for one that never ends.
        let started = tokio::time::Instant::now();
        flights.landed("b", Duration::from_secs(2)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
