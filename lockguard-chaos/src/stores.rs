//! lockguard's own stores, each started with lockguard-testing's harnesses
//! (etcd with lockguard-etcd's own): Redis, Redlock on three masters, a
//! Redis Cluster, Redis under Sentinel, PostgreSQL, MySQL on MariaDB,
//! ZooKeeper and etcd. Each is plugged in through the library's public
//! [`Store`] and [`Deployment`] traits, as a store crate outside lockguard
//! plugs in its own. The `lockguard-chaos` binary and the `lockguard chaos`
//! command run the checker on them.

use std::time::Duration;

use crate::{
    BoxFuture, Deployment, NOT_ACROSS_ASYNC_FAILOVER, RESPONSE_TIMEOUT, ServerFault, Servers,
    Store, server_fault,
};
use lockguard_core::{Builder, Client, Result};
use lockguard_etcd::BuilderExt as _;
use lockguard_etcd::testing::EtcdCluster;
use lockguard_mysql::MySqlOptions;
use lockguard_postgres::{BuilderExt as _, LockLeases};
use lockguard_redis::BuilderExt as _;
use lockguard_testing::{
    MariaDbServer, PostgresServer, RedisCluster, RedisServer, Relay, SENTINEL_SERVICE,
    SentinelGroup, ZooKeeperEnsemble,
};
use lockguard_zookeeper::BuilderExt as _;

/// Every store, in the order a full run goes through them.
pub const ALL: [&dyn Store; 10] = [
    &Redis,
    &Redlock,
    &Postgres(LockLeases::Recorded),
    &Postgres(LockLeases::Session),
    &MySql(LockLeases::Recorded),
    &MySql(LockLeases::Session),
    &ZooKeeper,
    &Sentinel,
    &Cluster,
    &Etcd,
];

/// Redis persistence that loses no acknowledged write: a restarted server
/// comes back on its data, so its locks and fences survive, as the safety
/// page requires of a Redis that may restart. (Restarting an empty server
/// forgets its locks: two holders by design, not a finding.)
const REDIS_PERSIST: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

/// The ZooKeeper session timeout of the workers: a lease may be at most two
/// thirds of it, and the longest the workers take is 1 s; a worker paused
/// for 1.3 s keeps its session (its lease is lost all the same).
const ZK_SESSION: Duration = Duration::from_secs(3);

/// How a worker's client starts: short timeouts, keys under `namespace`.
/// PostgreSQL keeps a run apart by schema and MySQL by table prefix (they
/// ignore the key prefix); the others by key prefix.
fn builder(namespace: &str) -> Builder {
    Client::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect_timeout(RESPONSE_TIMEOUT)
        .prefix(format!("{namespace}:"))
}

fn urls(addr: &str) -> Vec<&str> {
    addr.split(',').collect()
}

/// One Redis server.
#[derive(Debug)]
struct Redis;

impl Store for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn start(&self) -> Box<dyn Deployment> {
        let server = RedisServer::start_with_args(&REDIS_PERSIST);
        let url = server.url();
        Box::new(Servers::one(server, url))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(builder(namespace).connect_redis(addr))
    }

    fn address_of(&self, url: &str) -> Option<String> {
        (url.starts_with("redis://") || url.starts_with("rediss://")).then(|| url.to_owned())
    }
}

/// Redlock on three independent masters, one disturbed at a time (a
/// minority).
#[derive(Debug)]
struct Redlock;

impl Store for Redlock {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn offers_counters(&self) -> bool {
        false
    }

    fn offers_limiter(&self) -> bool {
        false
    }

    fn start(&self) -> Box<dyn Deployment> {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with_args(&REDIS_PERSIST))
            .collect();
        let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
        Box::new(Servers::new(nodes, urls.join(",")))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        // Room for a loaded two-core machine (the default, 50 ms, is for
        // production); far below every lease used.
        Box::pin(
            builder(namespace)
                .node_timeout(Duration::from_millis(250))
                .redlock(urls(addr)),
        )
    }
}

/// A Redis Cluster of three masters, one disturbed at a time.
#[derive(Debug)]
struct Cluster;

impl Store for Cluster {
    fn name(&self) -> &'static str {
        "cluster"
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn start(&self) -> Box<dyn Deployment> {
        let cluster = RedisCluster::start_with_args(3, &REDIS_PERSIST);
        let urls = cluster.urls().join(",");
        Box::new(Servers::new(cluster.nodes, urls))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(builder(namespace).connect_cluster(urls(addr)))
    }
}

/// A master, its replica and three sentinels.
#[derive(Debug)]
struct Sentinel;

#[derive(Debug)]
struct SentinelDeployment(SentinelGroup);

impl Store for Sentinel {
    fn name(&self) -> &'static str {
        "sentinel"
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    /// One replica: the one a failover would promote. A master restarted
    /// without replication state resyncs its replica in full, and Redis
    /// waits 5 s for more replicas before it starts
    /// (`repl-diskless-sync-delay`): the replica would confirm no write
    /// for that long.
    fn start(&self) -> Box<dyn Deployment> {
        let mut args = REDIS_PERSIST.to_vec();
        args.extend(["--repl-diskless-sync-delay", "0"]);
        Box::new(SentinelDeployment(SentinelGroup::start_with_args(
            1, 3, &args,
        )))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        // Every acquisition and renewal confirmed by the one replica, the
        // one a failover promotes: locks survive a failover. (Counters and
        // limits are not waited for; see NOT_ACROSS_ASYNC_FAILOVER.)
        Box::pin(
            builder(namespace)
                .wait_for_replicas(1, Duration::from_millis(250))
                .connect_sentinel(urls(addr), SENTINEL_SERVICE),
        )
    }
}

impl Deployment for SentinelDeployment {
    fn address(&self) -> String {
        self.0.sentinel_urls().join(",")
    }

    fn faults(&self) -> Vec<ServerFault> {
        vec![
            ServerFault::Pause,
            ServerFault::Restart,
            ServerFault::Failover,
            ServerFault::KillConnections,
        ]
    }

    /// The master is restarted only while it is the server started as
    /// master: a promoted replica restarted with its command line
    /// (`--replicaof` the old master) would come back as a replica,
    /// leaving no master at all, which no real deployment does.
    fn offers(&self, fault: ServerFault) -> bool {
        fault != ServerFault::Restart || self.0.master_port() == Some(self.0.servers[0].port())
    }

    /// Faults go to the master. Healed when the group is whole again: the
    /// old master a replica of the new one, every replica in sync. Until
    /// then lock writes that need a replica's confirmation fail.
    fn apply(
        &mut self,
        fault: ServerFault,
        _pick: usize,
        pause: Duration,
        down: Duration,
    ) -> std::result::Result<String, String> {
        let g = &mut self.0;
        let master = g.master_port().ok_or("no sentinel names a master")?;
        if fault == ServerFault::Failover {
            let new = g.failover();
            g.reunite();
            return Ok(format!("redis:{master} to redis:{new}"));
        }
        let i = g
            .servers
            .iter()
            .position(|s| s.port() == master)
            .ok_or("the master is none of the group's servers")?;
        let done = server_fault(&mut g.servers[i], fault, pause, down);
        g.reunite();
        done
    }

    /// Well below the sentinels' 1 s before they fail the master over (a
    /// busy machine adds to it; a failover they start on their own is
    /// noticed through `leader`).
    fn pause_length(&self, _lease: Duration) -> Duration {
        Duration::from_millis(500)
    }

    /// A master down for a second is failed over.
    fn longest_downtime(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn longest(&self, fault: ServerFault) -> Duration {
        match fault {
            ServerFault::Failover => Duration::from_secs(5),
            _ => fault.usually_heals_in(),
        }
    }

    fn leader(&self) -> Option<u16> {
        self.0.master_port()
    }

    fn reunite(&self) {
        self.0.reunite();
    }

    fn not_checked_across_failover(&self) -> &'static [&'static str] {
        NOT_ACROSS_ASYNC_FAILOVER
    }
}

/// PostgreSQL, its locks of `leases` (`LockLeases::Recorded`, the
/// default, as `postgres`; `LockLeases::Session` as `postgres-session`).
#[derive(Debug)]
struct Postgres(LockLeases);

impl Store for Postgres {
    fn name(&self) -> &'static str {
        match self.0 {
            LockLeases::Session => "postgres-session",
            _ => "postgres",
        }
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn start(&self) -> Box<dyn Deployment> {
        let server = PostgresServer::start();
        let url = server.url();
        // Crash recovery before it serves again.
        Box::new(Servers::one(server, url).restart_heals_in(Duration::from_secs(3)))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(
            builder(namespace)
                .postgres_schema(namespace)
                .lock_leases(self.0)
                .connect_postgres(addr),
        )
    }

    /// Locks of session leases: a session's end frees them at once.
    fn session_end_frees_locks(&self) -> bool {
        self.0 == LockLeases::Session
    }

    /// `--target` runs the default's workers.
    fn address_of(&self, url: &str) -> Option<String> {
        (self.0 == LockLeases::Recorded
            && (url.starts_with("postgres://") || url.starts_with("postgresql://")))
        .then(|| url.to_owned())
    }
}

/// MySQL, on MariaDB, its locks of `leases` (`LockLeases::Recorded`, the
/// default, as `mysql`; `LockLeases::Session` as `mysql-session`).
#[derive(Debug)]
struct MySql(LockLeases);

impl Store for MySql {
    fn name(&self) -> &'static str {
        match self.0 {
            LockLeases::Session => "mysql-session",
            _ => "mysql",
        }
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn start(&self) -> Box<dyn Deployment> {
        let server = MariaDbServer::start();
        let url = server.url();
        Box::new(Servers::one(server, url).restart_heals_in(Duration::from_secs(3)))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(async move {
            let store = MySqlOptions::new()
                .table_prefix(format!("{namespace}_"))
                .connect_timeout(RESPONSE_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .lock_leases(self.0)
                .connect(addr)
                .await?;
            builder(namespace).build(store)
        })
    }

    /// Locks of session leases: a session's end frees them at once.
    fn session_end_frees_locks(&self) -> bool {
        self.0 == LockLeases::Session
    }

    /// `--target` runs the default's workers.
    fn address_of(&self, url: &str) -> Option<String> {
        (self.0 == LockLeases::Recorded && url.starts_with("mysql://")).then(|| url.to_owned())
    }
}

/// A ZooKeeper ensemble of three members: a quorum that survives one down.
#[derive(Debug)]
struct ZooKeeper;

#[derive(Debug)]
struct Ensemble(ZooKeeperEnsemble);

impl Store for ZooKeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn offers_limiter(&self) -> bool {
        false
    }

    fn start(&self) -> Box<dyn Deployment> {
        Box::new(Ensemble(ZooKeeperEnsemble::start(3)))
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(
            builder(namespace)
                .zookeeper_session_timeout(ZK_SESSION)
                .connect_zookeeper(addr),
        )
    }

    /// `zookeeper://host:port,...`
    fn address_of(&self, url: &str) -> Option<String> {
        url.strip_prefix("zookeeper://")
            .map(|hosts| hosts.trim_end_matches('/').to_owned())
    }
}

impl Deployment for Ensemble {
    fn address(&self) -> String {
        self.0.hosts()
    }

    fn faults(&self) -> Vec<ServerFault> {
        vec![
            ServerFault::Pause,
            ServerFault::Restart,
            ServerFault::Failover,
        ]
    }

    /// A failover kills the leader, waits for the others to elect a new
    /// one, and starts the old one again.
    fn apply(
        &mut self,
        fault: ServerFault,
        pick: usize,
        pause: Duration,
        down: Duration,
    ) -> std::result::Result<String, String> {
        let ens = &mut self.0;
        if fault != ServerFault::Failover {
            let i = pick % ens.len();
            return server_fault(ens.member_mut(i), fault, pause, down);
        }
        let i = ens
            .leader()
            .ok_or("no member of the ensemble says it leads")?;
        ens.member_mut(i).kill();
        ens.wait_for_leader(Duration::from_secs(30));
        std::thread::sleep(down);
        ens.member_mut(i).restart();
        Ok(format!("zookeeper:{}", ens.member(i).port()))
    }

    /// Elections, and a member's return to the quorum.
    fn longest(&self, fault: ServerFault) -> Duration {
        match fault {
            ServerFault::Restart | ServerFault::Failover => Duration::from_secs(5),
            _ => fault.usually_heals_in(),
        }
    }
}

/// The etcd lease TTL of the workers: a lease may be at most two thirds of
/// it, and the longest the workers take is 1 s.
const ETCD_LEASE_TTL: Duration = Duration::from_secs(3);

/// An etcd cluster of three members: a quorum that survives one down.
#[derive(Debug)]
struct Etcd;

/// The members, each behind a relay the workers connect through: cutting
/// a relay's connections is how the clients' connections are killed (etcd
/// has no command for it).
#[derive(Debug)]
struct EtcdMembers {
    cluster: EtcdCluster,
    relays: Vec<Relay>,
}

impl Store for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn offers_rw_locks(&self) -> bool {
        true
    }

    fn start(&self) -> Box<dyn Deployment> {
        let cluster = EtcdCluster::start(3);
        let relays = (0..cluster.len())
            .map(|i| Relay::start(cluster.member(i).port()))
            .collect();
        Box::new(EtcdMembers { cluster, relays })
    }

    fn connect<'a>(&'a self, addr: &'a str, namespace: &'a str) -> BoxFuture<'a, Result<Client>> {
        Box::pin(
            builder(namespace)
                .etcd_lease_ttl(ETCD_LEASE_TTL)
                .connect_etcd(addr),
        )
    }

    /// `etcd://host:port,...`
    fn address_of(&self, url: &str) -> Option<String> {
        url.strip_prefix("etcd://")
            .map(|hosts| hosts.split('/').next().unwrap_or(hosts).to_owned())
    }
}

impl Deployment for EtcdMembers {
    fn address(&self) -> String {
        self.relays
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn faults(&self) -> Vec<ServerFault> {
        vec![
            ServerFault::Pause,
            ServerFault::Restart,
            ServerFault::Failover,
            ServerFault::KillConnections,
        ]
    }

    /// A failover kills the leader, waits for the others to elect a new
    /// one, and starts the old one again.
    fn apply(
        &mut self,
        fault: ServerFault,
        pick: usize,
        pause: Duration,
        down: Duration,
    ) -> std::result::Result<String, String> {
        let cluster = &mut self.cluster;
        if fault == ServerFault::KillConnections {
            let i = pick % self.relays.len();
            self.relays[i].reset();
            return Ok(format!(
                "etcd:{} (its clients' connections)",
                cluster.member(i).port()
            ));
        }
        if fault != ServerFault::Failover {
            let i = pick % cluster.len();
            return server_fault(cluster.member_mut(i), fault, pause, down);
        }
        let i = cluster
            .leader()
            .ok_or("no member of the cluster says it leads")?;
        lockguard_testing::ServerProcess::kill(cluster.member_mut(i));
        cluster.wait_for_leader(Duration::from_secs(30));
        std::thread::sleep(down);
        lockguard_testing::ServerProcess::restart(cluster.member_mut(i));
        Ok(format!("etcd:{}", cluster.member(i).port()))
    }

    /// Elections, and a member's return to the quorum.
    fn longest(&self, fault: ServerFault) -> Duration {
        match fault {
            ServerFault::Restart | ServerFault::Failover => Duration::from_secs(5),
            _ => fault.usually_heals_in(),
        }
    }
}
