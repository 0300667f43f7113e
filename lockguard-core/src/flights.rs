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

use crate::token::{Token, TokenHashing};

/// The acquisitions running now, by token: how many, and a wake-up for
/// whoever waits for the last to end. One per store, shared (`Arc`).
///
/// Keyed by [`Token`]s, which lockguard draws at random and no caller
/// chooses: the map hashes them with a multiply per word rather than
/// SipHash, and copies them inline.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use lockguard_core::store::{Flights, Token};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let flights = Arc::new(Flights::default());
/// let token = Token::random();
/// let flight = flights.depart(&token);
/// // ... the acquisition is sent; it answers:
/// drop(flight);
/// // A release of the token goes at once.
/// flights.landed(&token, Duration::from_secs(5)).await;
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Flights(Mutex<HashMap<Token, Running, TokenHashing>>);

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
    token: Token,
}

impl Flights {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Running, TokenHashing>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An acquisition of `token` starts; it runs until the returned
    /// flight is dropped.
    pub fn depart(self: &Arc<Self>, token: &Token) -> Flight {
        let token = *token;
        self.map()
            .entry(token)
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
    pub async fn landed(&self, token: &Token, within: Duration) {
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
        let Some(mut running) = map.remove(&self.token) else {
            return;
        };
        running.count -= 1;
        if running.count > 0 {
            map.insert(self.token, running);
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
        let [ta, tb, tc] = [Token::random(), Token::random(), Token::random()];
        let a = flights.depart(&ta);
        let a2 = flights.depart(&ta);
        let _b = flights.depart(&tb);
        // Nothing runs for tc: no wait.
        flights.landed(&tc, Duration::from_secs(60)).await;
        let waiting = tokio::spawn({
            let flights = flights.clone();
            async move { flights.landed(&ta, Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "one acquisition of ta still runs");
        drop(a2);
        tokio::time::timeout(Duration::from_millis(10), waiting)
            .await
            .expect("released when the last acquisition ended")
            .unwrap();
        // A bounded wait for one that never ends.
        let started = tokio::time::Instant::now();
        flights.landed(&tb, Duration::from_secs(2)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
