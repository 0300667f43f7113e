//! The store under test, started by the run with lockguard-testing's
//! harnesses, and the faults that can be done to it.

use std::time::Duration;

use lockguard_testing::{
    MariaDbServer, PostgresServer, RedisCluster, RedisServer, SentinelGroup, ZooKeeperEnsemble,
};

use crate::store::{Kind, Target};

/// Redis persistence that loses no acknowledged write: a restarted server
/// comes back on its data, so its locks and fences survive, as the safety
/// page requires of a Redis that may restart. (Restarting an empty server
/// forgets its locks: two holders by design, not a finding.)
const REDIS_PERSIST: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

/// A fault done to the store's servers. Faults on worker processes are
/// the runner's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerFault {
    /// SIGSTOP a server for `pause`, then SIGCONT.
    Pause,
    /// Kill a server (SIGKILL), keep it down a while, and start it again
    /// on its port and data.
    Restart,
    /// Close the clients' connections from the server side.
    KillConnections,
    /// Kill the leader of a ZooKeeper ensemble, wait for the others to
    /// elect a new one, and start the old one again.
    Failover,
}

impl ServerFault {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ServerFault::Pause => "pause-server",
            ServerFault::Restart => "restart-server",
            ServerFault::KillConnections => "kill-connections",
            ServerFault::Failover => "failover",
        }
    }
}

/// A running store.
#[derive(Debug)]
pub(crate) enum Deployment {
    Redis(RedisServer),
    /// Three independent masters.
    Redlock(Vec<RedisServer>),
    Cluster(RedisCluster),
    Sentinel(SentinelGroup),
    Postgres(PostgresServer),
    /// MySQL, on MariaDB.
    MySql(MariaDbServer),
    /// Three members: a quorum that survives one down.
    ZooKeeper(ZooKeeperEnsemble),
    /// A user's store (`--target`): only client-side faults.
    External(Target),
}

impl Deployment {
    /// Starts a store of `kind`.
    pub(crate) fn start(kind: Kind) -> Self {
        match kind {
            Kind::Redis => Deployment::Redis(RedisServer::start_with_args(&REDIS_PERSIST)),
            Kind::Redlock => Deployment::Redlock(
                (0..3)
                    .map(|_| RedisServer::start_with_args(&REDIS_PERSIST))
                    .collect(),
            ),
            Kind::Cluster => Deployment::Cluster(RedisCluster::start_with_args(3, &REDIS_PERSIST)),
            // One replica: the one a failover would promote. A master
            // restarted without replication state resyncs its replica in
            // full, and Redis waits 5 s for more replicas before it starts
            // (`repl-diskless-sync-delay`): the replica would confirm no
            // write for that long.
            Kind::Sentinel => {
                let mut args = REDIS_PERSIST.to_vec();
                args.extend(["--repl-diskless-sync-delay", "0"]);
                Deployment::Sentinel(SentinelGroup::start_with_args(1, 3, &args))
            }
            Kind::Postgres => Deployment::Postgres(PostgresServer::start()),
            Kind::MySql => Deployment::MySql(MariaDbServer::start()),
            Kind::ZooKeeper => Deployment::ZooKeeper(ZooKeeperEnsemble::start(3)),
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Deployment::Redis(_) => Kind::Redis,
            Deployment::Redlock(_) => Kind::Redlock,
            Deployment::Cluster(_) => Kind::Cluster,
            Deployment::Sentinel(_) => Kind::Sentinel,
            Deployment::Postgres(_) => Kind::Postgres,
            Deployment::MySql(_) => Kind::MySql,
            Deployment::ZooKeeper(_) => Kind::ZooKeeper,
            Deployment::External(t) => t.kind,
        }
    }

    /// Where workers connect, with keys under `namespace`.
    pub(crate) fn target(&self, namespace: &str) -> Target {
        let addr = match self {
            Deployment::Redis(s) => s.url(),
            Deployment::Redlock(nodes) => join(nodes.iter().map(RedisServer::url)),
            Deployment::Cluster(c) => c.urls().join(","),
            Deployment::Sentinel(g) => g.sentinel_urls().join(","),
            Deployment::Postgres(s) => s.url(),
            Deployment::MySql(s) => s.url(),
            Deployment::ZooKeeper(ens) => ens.hosts(),
            Deployment::External(t) => {
                return Target {
                    namespace: namespace.to_owned(),
                    ..t.clone()
                };
            }
        };
        Target {
            kind: self.kind(),
            addr,
            namespace: namespace.to_owned(),
        }
    }

    /// Waits until a Sentinel group is whole again (see
    /// [`SentinelGroup::reunite`]); nothing to wait for elsewhere.
    pub(crate) fn reunite(&self) {
        if let Deployment::Sentinel(g) = self {
            g.reunite();
        }
    }

    /// Which server is master now, on Sentinel (`None` elsewhere).
    pub(crate) fn master(&self) -> Option<u16> {
        match self {
            Deployment::Sentinel(g) => g.master_port(),
            _ => None,
        }
    }

    /// The server faults this store can be given.
    pub(crate) fn faults(&self) -> Vec<ServerFault> {
        use ServerFault::*;
        match self {
            Deployment::External(_) => vec![],
            Deployment::ZooKeeper(_) => vec![Pause, Restart, Failover],
            Deployment::Sentinel(_) => vec![Pause, Restart, Failover, KillConnections],
            _ => vec![Pause, Restart, KillConnections],
        }
    }

    /// Whether `fault` can be done now.
    ///
    /// On Sentinel, the master is restarted only while it is the server
    /// started as master: a promoted replica restarted with its command
    /// line (`--replicaof` the old master) would come back as a replica,
    /// leaving no master at all, which no real deployment does.
    pub(crate) fn offers(&self, fault: ServerFault) -> bool {
        match (self, fault) {
            (Deployment::ZooKeeper(_), ServerFault::KillConnections) => false,
            (Deployment::Sentinel(g), ServerFault::Restart) => {
                g.master_port() == Some(g.servers[0].port())
            }
            _ => true,
        }
    }

    /// How long a server pause lasts: past the workers' lease, except on
    /// Sentinel, whose sentinels fail the master over after 1 s of silence,
    /// so there it stays well below that (a busy machine adds to it; a
    /// failover the sentinels start on their own is noticed, see
    /// [`Deployment::master`]).
    pub(crate) fn pause_length(&self, lease: Duration) -> Duration {
        match self {
            Deployment::Sentinel(_) => Duration::from_millis(500),
            _ => lease + Duration::from_millis(300),
        }
    }

    /// How long a restarted server stays down: up to `longest`, except on
    /// Sentinel, where a master down for a second is failed over.
    pub(crate) fn longest_downtime(&self) -> Duration {
        match self {
            Deployment::Sentinel(_) => Duration::from_millis(200),
            _ => Duration::from_millis(1500),
        }
    }

    /// About the longest `fault` takes to do and heal: the run starts a
    /// fault only if it has healed before the quiet tail.
    pub(crate) fn longest(&self, fault: ServerFault) -> Duration {
        match (self, fault) {
            (_, ServerFault::KillConnections) => Duration::from_millis(500),
            // Elections and a member's return to the quorum.
            (Deployment::ZooKeeper(_), ServerFault::Restart | ServerFault::Failover) => {
                Duration::from_secs(5)
            }
            (Deployment::Postgres(_) | Deployment::MySql(_), ServerFault::Restart) => {
                Duration::from_secs(3)
            }
            (Deployment::Sentinel(_), ServerFault::Failover) => Duration::from_secs(5),
            _ => Duration::from_millis(2000),
        }
    }

    /// Does `fault` to the server picked by `pick` (a node of several),
    /// healing it before returning; returns which server. A pause lasts
    /// `pause`; a restarted server stays down for `down`.
    pub(crate) fn apply(
        &mut self,
        fault: ServerFault,
        pick: usize,
        pause: Duration,
        down: Duration,
    ) -> Result<String, String> {
        match self {
            Deployment::Redis(s) => redis_fault(s, fault, pause, down),
            Deployment::Redlock(nodes) => {
                // One node at a time: a minority.
                let i = pick % nodes.len();
                redis_fault(&mut nodes[i], fault, pause, down)
            }
            Deployment::Cluster(c) => {
                let i = pick % c.nodes.len();
                redis_fault(&mut c.nodes[i], fault, pause, down)
            }
            // Healed when the group is whole again: the old master a
            // replica of the new one, every replica in sync. Until then
            // lock writes that need a replica's confirmation fail.
            Deployment::Sentinel(g) if fault == ServerFault::Failover => {
                let old = g.master_port().ok_or("no sentinel names a master")?;
                let new = g.failover();
                g.reunite();
                Ok(format!("redis:{old} to redis:{new}"))
            }
            Deployment::Sentinel(g) => {
                let master = g.master_port().ok_or("no sentinel names a master")?;
                let i = g
                    .servers
                    .iter()
                    .position(|s| s.port() == master)
                    .ok_or("the master is none of the group's servers")?;
                let done = redis_fault(&mut g.servers[i], fault, pause, down);
                g.reunite();
                done
            }
            Deployment::Postgres(s) => {
                match fault {
                    ServerFault::Pause => {
                        s.pause();
                        std::thread::sleep(pause);
                        s.resume();
                    }
                    ServerFault::Restart => {
                        s.kill();
                        std::thread::sleep(down);
                        s.restart();
                    }
                    ServerFault::Failover => return Err("not offered".into()),
                    ServerFault::KillConnections => {
                        s.psql(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
                        );
                    }
                }
                Ok(format!("postgres:{}", s.port()))
            }
            Deployment::MySql(s) => {
                match fault {
                    ServerFault::Pause => {
                        s.pause();
                        std::thread::sleep(pause);
                        s.resume();
                    }
                    ServerFault::Restart => {
                        s.kill();
                        std::thread::sleep(down);
                        s.restart();
                    }
                    ServerFault::Failover => return Err("not offered".into()),
                    ServerFault::KillConnections => s.kill_connections(),
                }
                Ok(format!("mysql:{}", s.port()))
            }
            Deployment::ZooKeeper(ens) => {
                let i = match fault {
                    ServerFault::Failover => ens
                        .leader()
                        .ok_or("no member of the ensemble says it leads")?,
                    _ => pick % ens.len(),
                };
                match fault {
                    ServerFault::Pause => {
                        let m = ens.member_mut(i);
                        m.pause();
                        std::thread::sleep(pause);
                        m.resume();
                    }
                    ServerFault::Restart => {
                        ens.member_mut(i).kill();
                        std::thread::sleep(down);
                        ens.member_mut(i).restart();
                    }
                    ServerFault::Failover => {
                        ens.member_mut(i).kill();
                        ens.wait_for_leader(Duration::from_secs(30));
                        std::thread::sleep(down);
                        ens.member_mut(i).restart();
                    }
                    ServerFault::KillConnections => return Err("not offered".into()),
                }
                Ok(format!("zookeeper:{}", ens.member(i).port()))
            }
            Deployment::External(_) => Err("no server faults on a user's store".into()),
        }
    }
}

fn join(urls: impl Iterator<Item = String>) -> String {
    urls.collect::<Vec<_>>().join(",")
}

fn redis_fault(
    s: &mut RedisServer,
    fault: ServerFault,
    pause: Duration,
    down: Duration,
) -> Result<String, String> {
    match fault {
        ServerFault::Pause => {
            s.pause();
            std::thread::sleep(pause);
            s.resume();
        }
        ServerFault::Restart => {
            s.kill();
            std::thread::sleep(down);
            s.restart();
        }
        ServerFault::Failover => return Err("not offered".into()),
        ServerFault::KillConnections => {
            let mut conn = s
                .client()
                .get_connection_with_timeout(Duration::from_secs(2))
                .map_err(|e| e.to_string())?;
            // Commands and pub/sub (the wake-ups) both; never this one.
            for kind in ["normal", "pubsub"] {
                redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg(kind)
                    .query::<i64>(&mut conn)
                    .map_err(|e| format!("CLIENT KILL TYPE {kind}: {e}"))?;
            }
        }
    }
    Ok(format!("redis:{}", s.port()))
}
