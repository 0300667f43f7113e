//! An acquisition sent on a connection of the pool, and its
//! [`Flight`](lockguard_core::store::Flight) (core's `store::Flights`: a
//! release waits for the acquisitions of its token still running): the
//! flight ends when the statement answered, or, for one whose caller
//! stopped waiting, once the connection has run it.

use std::time::Duration;

use lockguard_core::store::Flight;

use crate::pool::Conn;

/// An acquisition sent on `conn`: ends its flights (one per token it
/// takes with) when it has answered, or (dropped before that) once the
/// connection has run it.
pub(crate) struct InFlight {
    conn: Option<Conn>,
    flights: Vec<Flight>,
}

impl InFlight {
    pub(crate) fn new(conn: Conn, flights: Vec<Flight>) -> Self {
        Self {
            conn: Some(conn),
            flights,
        }
    }

    /// The connection the statement goes out on.
    pub(crate) fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("present until landed or dropped")
    }

    /// The statement answered: the flight is over.
    pub(crate) fn landed(mut self) {
        self.flights.clear();
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let flights = std::mem::take(&mut self.flights);
        let Some(mut conn) = self.conn.take().filter(|_| !flights.is_empty()) else {
            return;
        };
        // Outside a runtime nothing can be sent; the release then goes
        // without waiting (the lease bounds what a late acquisition holds).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Queued behind the acquisition on the same connection.
                let _ = tokio::time::timeout(Duration::from_secs(30), conn.batch("SELECT 1")).await;
                drop(flights);
            });
        }
    }
}
