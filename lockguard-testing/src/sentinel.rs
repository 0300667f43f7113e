//! Redis Sentinel for tests: a master, its replicas and sentinels, all real
//! `redis-server` processes (`redis-server sentinel.conf --sentinel` runs a
//! sentinel), on free loopback ports.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{RedisServer, free_port, redis_server_binary};

/// The name the sentinels know the master by.
pub const SERVICE: &str = "lockguard";

/// One sentinel process, killed when dropped.
#[derive(Debug)]
struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A master with replicas, watched by sentinels (quorum 2), ready when
/// returned: every replica in sync and every sentinel aware of the master.
#[derive(Debug)]
pub struct SentinelGroup {
    /// The servers: the master first, as started (a failover changes which
    /// one is master; see [`SentinelGroup::master_port`]).
    pub servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

/// The port of the master the sentinel on `port` names.
fn named_master(port: u16) -> Option<u16> {
    let reply = ask(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])?;
    // *2 $9 127.0.0.1 $N PORT
    reply.lines().nth(4)?.trim().parse().ok()
}

/// One command over a plain socket, answered in RESP; the reply's text.
fn ask(port: u16, command: &[&str]) -> Option<String> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut out = format!("*{}\r\n", command.len());
    for part in command {
        out.push_str(&format!("${}\r\n{part}\r\n", part.len()));
    }
    stream.write_all(out.as_bytes()).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut text = String::new();
    let started = Instant::now();
    // Replies here are small: read until the socket is quiet.
    while started.elapsed() < Duration::from_millis(500) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                stream
                    .set_read_timeout(Some(Duration::from_millis(50)))
                    .ok()?;
            }
            Err(_) => break,
        }
    }
    (!text.is_empty()).then_some(text)
}

impl SentinelGroup {
    /// Starts a master, `replicas` replicas of it and `sentinels`
    /// sentinels.
    ///
    /// # Panics
    ///
    /// When a server does not come up or the group does not form within
    /// 20 s.
    pub fn start(replicas: usize, sentinels: usize) -> Self {
        Self::start_with_args(replicas, sentinels, &[])
    }

    /// Like [`SentinelGroup::start`], with extra `redis-server` arguments
    /// for the master and every replica (`["--appendonly", "yes"]`, so
    /// that a server restarted with [`RedisServer::restart`] comes back on
    /// its data).
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::start`].
    pub fn start_with_args(replicas: usize, sentinels: usize, extra: &[&str]) -> Self {
        let master = RedisServer::start_with_args(extra);
        let mport = master.port().to_string();
        let mut servers = vec![master];
        for _ in 0..replicas {
            let mut args = vec!["--replicaof", "127.0.0.1", &mport];
            args.extend_from_slice(extra);
            servers.push(RedisServer::start_with_args(&args));
        }
        let sentinels = (0..sentinels)
            .map(|_| Self::start_sentinel(&mport))
            .collect();
        let group = Self { servers, sentinels };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !group.formed() {
            assert!(
                Instant::now() < deadline,
                "the sentinel group did not form within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        group
    }

    fn start_sentinel(master_port: &str) -> Sentinel {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-sentinel-")
            .tempdir()
            .expect("temporary directory");
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 1000\n\
                 sentinel failover-timeout {SERVICE} 10000\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                dir.path().display()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new(redis_server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a sentinel");
        let started = Instant::now();
        while ask(port, &["PING"]).is_none_or(|r| !r.starts_with("+PONG")) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "a sentinel did not come up on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Sentinel {
            child,
            port,
            _dir: dir,
        }
    }

    /// Whether every replica is in sync and every sentinel knows the master
    /// and its replicas.
    fn formed(&self) -> bool {
        let replicas = self.servers.len() - 1;
        let synced = self.servers[1..].iter().all(|r| {
            ask(r.port(), &["INFO", "replication"])
                .is_some_and(|i| i.contains("master_link_status:up"))
        });
        synced
            && self.sentinels.iter().all(|s| {
                ask(s.port, &["SENTINEL", "REPLICAS", SERVICE]).is_some_and(|r| {
                    r.matches("slave").count() >= replicas
                        && !r.contains("s_down")
                        && !r.contains("disconnected")
                })
            })
    }

    /// `redis+sentinel`-style addresses of the sentinels:
    /// `redis://127.0.0.1:PORT`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The port the sentinels name as the master now.
    pub fn master_port(&self) -> Option<u16> {
        named_master(self.sentinels[0].port)
    }

    /// Asks a sentinel to fail over now (`SENTINEL FAILOVER`), and waits
    /// until every sentinel names the new master and it accepts writes.
    ///
    /// # Panics
    ///
    /// When the failover does not complete within 30 s.
    pub fn failover(&self) -> u16 {
        let old = self.master_port().expect("a master");
        let reply = ask(self.sentinels[0].port, &["SENTINEL", "FAILOVER", SERVICE]);
        assert!(
            reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
            "SENTINEL FAILOVER: {reply:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ports = self.named_masters();
            if let Some(Some(new)) = ports.first().copied()
                && new != old
                && ports.iter().all(|p| *p == Some(new))
                && ask(new, &["ROLE"]).is_some_and(|r| r.contains("master"))
            {
                return new;
            }
            assert!(
                Instant::now() < deadline,
                "the failover did not complete within 30 s: {ports:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the group is whole again after a fault, and returns the
    /// master's port: every sentinel names one master, and every other
    /// server replicates from it with its link up, as the master confirms.
    ///
    /// A server that still takes itself for the master (an old master back
    /// after a failover) is told to replicate the new one, as the sentinels
    /// would: they reconfigure it only after it has reported the old role
    /// for 8 s, at their next look, about 10 s after the failover. Until
    /// then the new master has no replica, and a client that asks for
    /// writes confirmed by one (`WAIT`) has every lock write refused.
    ///
    /// # Panics
    ///
    /// When the group is not whole within 30 s.
    pub fn reunite(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let missing = match self.whole() {
                Ok(master) => return master,
                Err(missing) => missing,
            };
            assert!(
                Instant::now() < deadline,
                "the sentinel group was not whole again within 30 s: {missing}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The master each sentinel names (`None` where one does not answer).
    fn named_masters(&self) -> Vec<Option<u16>> {
        self.sentinels
            .iter()
            .map(|s| named_master(s.port))
            .collect()
    }

    /// The master's port if the group is whole; otherwise what is missing,
    /// after telling an old master to replicate the new one.
    fn whole(&self) -> Result<u16, String> {
        let named = self.named_masters();
        let master = match named.first().copied().flatten() {
            Some(m) if named.iter().all(|p| *p == Some(m)) => m,
            _ => return Err(format!("the sentinels name {named:?}")),
        };
        let port = master.to_string();
        for server in self.servers.iter().filter(|s| s.port() != master) {
            let info = ask(server.port(), &["INFO", "replication"])
                .ok_or_else(|| format!("redis:{} does not answer", server.port()))?;
            if info.contains("role:master") {
                ask(server.port(), &["REPLICAOF", "127.0.0.1", &port]);
                return Err(format!("redis:{} was still a master", server.port()));
            }
            if !info.contains(&format!("master_port:{master}\r"))
                || !info.contains("master_link_status:up")
            {
                return Err(format!(
                    "redis:{} does not replicate redis:{master} yet",
                    server.port()
                ));
            }
        }
        let info = ask(master, &["INFO", "replication"])
            .ok_or_else(|| format!("the master redis:{master} does not answer"))?;
        let online = info.matches("state=online").count();
        if !info.contains("role:master") || online < self.servers.len() - 1 {
            return Err(format!(
                "the master redis:{master} has {online} replicas online"
            ));
        }
        Ok(master)
    }
}
