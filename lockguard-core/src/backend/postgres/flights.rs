//! Acquisitions in flight: a release of a token waits for the acquisition
//! statements of the same token still running, so that the two, sent on
//! different connections of a pool, run in the order they were made.
//! (One Redis connection keeps that order by itself.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The acquisitions running now, by token: how many, and a wake-up for
/// whoever waits for the last to end.
#[derive(Debug, Default)]
pub(crate) struct Flights(Mutex<HashMap<String, (usize, Arc<Notify>)>>);

/// One running acquisition; ends when dropped.
#[derive(Debug)]
pub(crate) struct Flight {
    flights: Arc<Flights>,
    token: String,
}

impl Flights {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Arc<Notify>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An acquisition of `token` starts.
    pub(crate) fn depart(self: &Arc<Self>, token: &str) -> Flight {
        self.map()
            .entry(token.to_owned())
            .or_insert_with(|| (0, Arc::new(Notify::new())))
            .0 += 1;
        Flight {
            flights: self.clone(),
            token: token.to_owned(),
        }
    }

    /// Waits (at most `within`) until no acquisition of `token` runs.
    pub(crate) async fn landed(&self, token: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let Some(notify) = self.map().get(token).map(|(_, n)| n.clone()) else {
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
        let mut map = self.flights.map();
        if let Some((n, notify)) = map.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                notify.notify_waiters();
                map.remove(&self.token);
            }
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
