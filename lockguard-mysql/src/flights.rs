//! Acquisitions in flight: a release of a token waits for the acquisition
//! statements of the same token still running, so that the two, sent on
//! different connections of the pool, run in the order they were made.
//! (As the PostgreSQL store does.)
//!
//! An acquisition whose caller stops waiting (a dropped future, a timeout)
//! may still run in the database. Its flight then ends when the connection
//! it was sent on has answered a statement sent after it: a connection
//! answers in order, so by then the acquisition has run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
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

/// An acquisition sent on a connection: ends its flight when it has
/// answered, or (dropped before that) once the connection has run it, and
/// then disconnects that connection.
pub(crate) struct InFlight {
    conn: Option<Conn>,
    flight: Option<Flight>,
}

impl InFlight {
    pub(crate) fn new(conn: Conn, flight: Flight) -> Self {
        Self {
            conn: Some(conn),
            flight: Some(flight),
        }
    }

    /// The connection the statement goes out on.
    pub(crate) fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("present until landed or dropped")
    }

    /// The statement answered: the flight is over.
    pub(crate) fn landed(mut self) {
        self.flight = None;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (Some(mut conn), Some(flight)) = (self.conn.take(), self.flight.take()) else {
            return;
        };
        // Outside a runtime nothing can be sent; the release then goes
        // without waiting (the lease bounds what a late acquisition holds).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Answered once the acquisition has run (whatever the driver
                // makes of the cut-off answer). The connection is not
                // reused: the driver may not know an answer was left
                // unread, and would hand it to the next request.
                let _ =
                    tokio::time::timeout(Duration::from_secs(30), conn.query_drop("DO 0")).await;
                drop(flight);
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.disconnect()).await;
            });
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
        let started = tokio::time::Instant::now();
        flights.landed("b", Duration::from_secs(2)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
