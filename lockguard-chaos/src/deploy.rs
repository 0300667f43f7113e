//! A running store and the faults that can be done to it: the
//! [`Deployment`] trait, [`Servers`] for a store of server processes,
//! and a user's own store (`--target`), which gets no server faults.

use std::time::Duration;

use lockguard_testing::ServerProcess;

/// A fault done to the store's servers. Faults on worker processes are
/// the runner's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerFault {
    /// SIGSTOP a server for a while ([`Deployment::pause_length`]), then
    /// SIGCONT.
    Pause,
    /// Kill a server (SIGKILL), keep it down a while, and start it again
    /// on its port and data.
    Restart,
    /// Close the clients' connections from the server side.
    KillConnections,
    /// Take the leading server away (kill it, or ask for a failover) so
    /// that another takes over, and bring the old one back.
    Failover,
}

impl ServerFault {
    /// About how long the fault takes to do and heal on a server that
    /// takes no longer than most: closed connections half a second, the
    /// others two seconds.
    pub fn usually_heals_in(self) -> Duration {
        match self {
            ServerFault::KillConnections => Duration::from_millis(500),
            _ => Duration::from_millis(2000),
        }
    }

    /// How the history and the report name it.
    pub fn name(self) -> &'static str {
        match self {
            ServerFault::Pause => "pause-server",
            ServerFault::Restart => "restart-server",
            ServerFault::KillConnections => "kill-connections",
            ServerFault::Failover => "failover",
        }
    }
}

/// A running store: where its workers connect, and the faults the run may
/// do to it. Dropping it stops its servers.
pub trait Deployment {
    /// The address the store's [`Store::connect`](crate::Store::connect)
    /// takes.
    fn address(&self) -> String;

    /// The server faults this store can be given; none by default.
    fn faults(&self) -> Vec<ServerFault> {
        Vec::new()
    }

    /// Whether `fault` (one of [`faults`](Deployment::faults)) can be done
    /// now.
    fn offers(&self, fault: ServerFault) -> bool {
        let _ = fault;
        true
    }

    /// Does `fault` to the server `pick` chooses (a number to reduce modulo
    /// the servers), healing it before returning; returns which server
    /// (`redis:6379`). A pause lasts `pause`; a restarted server stays
    /// down for `down`.
    ///
    /// # Errors
    ///
    /// When the fault could not be done; the run records that.
    fn apply(
        &mut self,
        fault: ServerFault,
        pick: usize,
        pause: Duration,
        down: Duration,
    ) -> Result<String, String> {
        let _ = (pick, pause, down);
        Err(format!("{} is not offered", fault.name()))
    }

    /// How long a server pause lasts, given the workers' `lease`: past it
    /// by default, so a paused store costs the holders their leases.
    fn pause_length(&self, lease: Duration) -> Duration {
        lease + Duration::from_millis(300)
    }

    /// The longest a restarted server stays down.
    fn longest_downtime(&self) -> Duration {
        Duration::from_millis(1500)
    }

    /// About the longest `fault` takes to do and heal: the run starts a
    /// fault only if it has healed before the quiet tail.
    fn longest(&self, fault: ServerFault) -> Duration {
        fault.usually_heals_in()
    }

    /// Which server leads now, for a store whose servers may fail over on
    /// their own (Sentinel); `None` for the others. The run watches it and
    /// records a change as a failover.
    fn leader(&self) -> Option<u16> {
        None
    }

    /// Waits until the store is whole again after a failover it started
    /// on its own (every replica following the new leader).
    fn reunite(&self) {}

    /// Checks that a failover of this store voids by design (asynchronous
    /// replication loses acknowledged writes): not made when one happened.
    fn not_checked_across_failover(&self) -> &'static [&'static str] {
        &[]
    }
}

/// A store of server processes (any [`ServerProcess`]), one disturbed at
/// a time (a minority, when there are several): paused, restarted on its
/// data, its connections closed.
#[derive(Debug)]
pub struct Servers<S> {
    /// The servers.
    pub servers: Vec<S>,
    address: String,
    /// How long a restart takes to heal (a database's crash recovery).
    restart_heals_in: Duration,
}

impl<S: ServerProcess> Servers<S> {
    /// `servers`, whose clients connect at `address`.
    ///
    /// # Panics
    ///
    /// When `servers` is empty.
    pub fn new(servers: Vec<S>, address: String) -> Self {
        assert!(!servers.is_empty(), "a store needs a server");
        Self {
            servers,
            address,
            restart_heals_in: Duration::from_millis(2000),
        }
    }

    /// One server, whose clients connect at `address`.
    pub fn one(server: S, address: String) -> Self {
        Self::new(vec![server], address)
    }

    /// Allows `heal` for a restarted server to serve again (2 s by
    /// default).
    #[must_use]
    pub fn restart_heals_in(mut self, heal: Duration) -> Self {
        self.restart_heals_in = heal;
        self
    }
}

impl<S: ServerProcess> Deployment for Servers<S> {
    fn address(&self) -> String {
        self.address.clone()
    }

    fn faults(&self) -> Vec<ServerFault> {
        vec![
            ServerFault::Pause,
            ServerFault::Restart,
            ServerFault::KillConnections,
        ]
    }

    fn apply(
        &mut self,
        fault: ServerFault,
        pick: usize,
        pause: Duration,
        down: Duration,
    ) -> Result<String, String> {
        let i = pick % self.servers.len();
        server_fault(&mut self.servers[i], fault, pause, down)
    }

    fn longest(&self, fault: ServerFault) -> Duration {
        match fault {
            ServerFault::Restart => self.restart_heals_in,
            _ => fault.usually_heals_in(),
        }
    }
}

/// Does `fault` to `server`: a pause for `pause`, a restart after `down`,
/// its connections closed; returns the server's name.
///
/// # Errors
///
/// For a failover (one server has nothing to fail over to), or when the
/// server cannot close its connections.
pub fn server_fault(
    server: &mut dyn ServerProcess,
    fault: ServerFault,
    pause: Duration,
    down: Duration,
) -> Result<String, String> {
    match fault {
        ServerFault::Pause => server.pause_for(pause),
        ServerFault::Restart => server.restart_after(down),
        ServerFault::KillConnections => server.kill_connections()?,
        ServerFault::Failover => return Err("not offered".into()),
    }
    Ok(server.name())
}

/// A user's store (`--target`): only client-side faults.
#[derive(Debug)]
pub(crate) struct External(pub(crate) String);

impl Deployment for External {
    fn address(&self) -> String {
        self.0.clone()
    }
}
