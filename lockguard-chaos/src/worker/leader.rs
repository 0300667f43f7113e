//! A worker's election operations: campaign, lead a moment (a fenced write
//! with the term), resign; and reads of who leads.

use std::time::Duration;

use lockguard_core::{Error, ErrorKind, Leadership};

use super::{LEASE, WAIT, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The election the workers campaign in.
pub(crate) const ELECTION: &str = "leader";

impl Worker {
    /// A campaign, a short lead and a resignation; or, one time in three on
    /// a store with announcements, a read of who leads.
    pub(super) async fn leader_op(&mut self) {
        if self.counters && self.rng.u32(0..3) == 0 {
            return self.who_leads().await;
        }
        let op = self.rec.invoke(Call::Campaign {
            key: ELECTION.into(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: LEASE.as_millis() as u64,
        });
        let campaign = self
            .client
            .leader(ELECTION)
            .lease(LEASE)
            .wait(WAIT)
            .campaign()
            .await;
        let lead = match campaign {
            Ok(lead) => {
                let term = lead.term().get();
                self.rec.complete(op, Outcome::Elected { term });
                lead
            }
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let term = lead.term().get();
        if self.leads(&lead) && self.counters {
            self.fenced_write(ELECTION, term).await;
            self.who_leads().await;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        self.leads(&lead);
        let op = self.rec.invoke(Call::Resign {
            key: ELECTION.into(),
            term,
        });
        match lead.resign().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }

    /// `is_held()` of the leadership, recorded with the time taken before
    /// the call: when it says true, this worker led at least until then.
    fn leads(&mut self, lead: &Leadership) -> bool {
        let t = now_ns();
        let yes = lead.is_held();
        let t2 = now_ns();
        let call = Call::Leads {
            key: ELECTION.into(),
            term: lead.term().get(),
        };
        self.rec.record(call, t, t2, Outcome::Held { yes });
        yes
    }

    /// Who leads: a read of `current()`, or, one time in two, the next
    /// change this worker's observer gives (waiting at most [`WAIT`]).
    async fn who_leads(&mut self) {
        let observer = self.rng.bool();
        let op = self.rec.invoke(Call::WhoLeads {
            key: ELECTION.into(),
            observer,
        });
        let now = if observer {
            let client = &self.client;
            let observing = self
                .observer
                .get_or_insert_with(|| client.leader(ELECTION).observe());
            match tokio::time::timeout(WAIT, observing.next()).await {
                Ok(now) => now,
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no change of the election within {WAIT:?}"),
                )),
            }
        } else {
            self.client.leader(ELECTION).current().await
        };
        let out = match now {
            Ok(now) => Outcome::Leader {
                term: now.map(|i| i.term.get()),
            },
            Err(e) => Outcome::error(&e),
        };
        self.rec.complete(op, out);
    }
}
