//! Redis Sentinel for tests: a master, its replicas and sentinels, all real
//! `redis-server` processes (`redis-server sentinel.conf --sentinel` runs a
//! sentinel), on free loopback ports.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
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
    /// The port it serves TLS on, in a group started with TLS.
    tls_port: Option<u16>,
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
    /// In a group started with TLS, each server's TLS port, in the order
    /// of `servers`: the port the sentinels name (the harness itself talks
    /// to every process on its plain port).
    tls_ports: Vec<u16>,
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
        Self::start_inner(replicas, sentinels, extra, None)
    }

    /// Like [`SentinelGroup::start`], with every process serving TLS too,
    /// with the certificates that
    /// [`make_test_certificates`](crate::make_test_certificates) made in
    /// `certs`: replication and the sentinels' own connections go over TLS,
    /// the sentinels name the servers' TLS ports, and
    /// [`SentinelGroup::sentinel_urls`] are `rediss://` URLs. Clients need
    /// not present a certificate.
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::start`].
    pub fn start_tls(replicas: usize, sentinels: usize, certs: &Path) -> Self {
        Self::start_inner(replicas, sentinels, &[], Some(certs))
    }

    fn start_inner(
        replicas: usize,
        sentinels: usize,
        extra: &[&str],
        certs: Option<&Path>,
    ) -> Self {
        let tls_ports: Vec<u16> = match certs {
            Some(_) => (0..=replicas).map(|_| free_port()).collect(),
            None => Vec::new(),
        };
        let tls_args = |i: usize| -> Vec<String> {
            let Some(certs) = certs else {
                return Vec::new();
            };
            let mut args = vec!["--tls-port".to_owned(), tls_ports[i].to_string()];
            for (option, value) in tls_settings(certs) {
                args.push(format!("--{option}"));
                args.push(value);
            }
            args
        };
        let with = |mut args: Vec<String>| -> RedisServer {
            args.extend(extra.iter().map(|a| (*a).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            RedisServer::start_with_args(&args)
        };
        let master = with(tls_args(0));
        // The port the others replicate from and the sentinels watch.
        let mport = tls_ports
            .first()
            .copied()
            .unwrap_or(master.port())
            .to_string();
        let mut servers = vec![master];
        for i in 1..=replicas {
            let mut args = vec!["--replicaof".to_owned(), "127.0.0.1".into(), mport.clone()];
            args.extend(tls_args(i));
            servers.push(with(args));
        }
        let sentinels = (0..sentinels)
            .map(|_| Self::start_sentinel(&mport, certs))
            .collect();
        let group = Self {
            servers,
            sentinels,
            tls_ports,
        };
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

    /// The port the sentinels name for the server on `port`.
    fn announced(&self, port: u16) -> u16 {
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .and_then(|i| self.tls_ports.get(i).copied())
            .unwrap_or(port)
    }

    /// The plain port of the server the sentinels name as `announced`.
    fn plain(&self, announced: u16) -> u16 {
        self.tls_ports
            .iter()
            .position(|p| *p == announced)
            .map_or(announced, |i| self.servers[i].port())
    }

    fn start_sentinel(master_port: &str, certs: Option<&Path>) -> Sentinel {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-sentinel-")
            .tempdir()
            .expect("temporary directory");
        let port = free_port();
        let tls_port = certs.map(|_| free_port());
        let mut tls = String::new();
        if let (Some(certs), Some(tls_port)) = (certs, tls_port) {
            tls = format!("tls-port {tls_port}\n");
            for (option, value) in tls_settings(certs) {
                tls.push_str(&format!("{option} {value}\n"));
            }
        }
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n{tls}\
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
            tls_port,
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

    /// The addresses of the sentinels: `redis://127.0.0.1:PORT`, or
    /// `rediss://127.0.0.1:TLS_PORT` in a group started with TLS.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| match s.tls_port {
                Some(tls) => format!("rediss://127.0.0.1:{tls}"),
                None => format!("redis://127.0.0.1:{}", s.port),
            })
            .collect()
    }

    /// The (plain) port of the server the sentinels name as the master
    /// now.
    pub fn master_port(&self) -> Option<u16> {
        named_master(self.sentinels[0].port).map(|p| self.plain(p))
    }

    /// Asks a sentinel to fail over now (`SENTINEL FAILOVER`), and waits
    /// until every sentinel names the new master and it accepts writes.
    ///
    /// A failover the sentinels are making already (one they began on
    /// their own after a fault: a sentinel answers `-INPROG` until it has
    /// reconfigured the replicas, within its 10 s failover timeout) is
    /// waited out, and the group made whole again, before it asks; so is
    /// a failover it asked for that did not happen within 10 s (a sentinel
    /// aborts one that finds no replica in sync). The master failed over is
    /// the one named when the sentinel accepted.
    ///
    /// # Panics
    ///
    /// When no failover completes within 30 s.
    pub fn failover(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let old = self.master_port().expect("a master");
            let reply = ask(self.sentinels[0].port, &["SENTINEL", "FAILOVER", SERVICE]);
            match reply.as_deref() {
                Some(r) if r.starts_with("+OK") => {
                    let bound = deadline.min(Instant::now() + Duration::from_secs(10));
                    if let Some(new) = self.new_master(old, bound) {
                        return new;
                    }
                }
                Some(r) if r.starts_with("-INPROG") => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => panic!("SENTINEL FAILOVER: {reply:?}"),
            }
            assert!(
                Instant::now() < deadline,
                "no failover completed within 30 s: the sentinels name {:?}; \
                 each server's replication:\n{}",
                self.named_masters(),
                self.replication()
            );
            self.reunite();
        }
    }

    /// Waits until every sentinel names one master other than `old`, which
    /// says it is a master, and returns its port; `None` at `until`.
    fn new_master(&self, old: u16, until: Instant) -> Option<u16> {
        loop {
            let ports = self.named_masters();
            if let Some(Some(new)) = ports.first().copied()
                && new != old
                && ports.iter().all(|p| *p == Some(new))
                && ask(new, &["ROLE"]).is_some_and(|r| r.contains("master"))
            {
                return Some(new);
            }
            if Instant::now() >= until {
                return None;
            }
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
                "the sentinel group was not whole again within 30 s: {missing}; \
                 the sentinels name {:?}; each server's replication:\n{}",
                self.named_masters(),
                self.replication()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Each server's `INFO replication`, for a failure's message.
    fn replication(&self) -> String {
        self.servers
            .iter()
            .map(|s| {
                let info = ask(s.port(), &["INFO", "replication"])
                    .unwrap_or_else(|| "(no answer)".to_owned());
                format!("redis:{}:\n{}", s.port(), info.replace("\r\n", "\n  "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The master each sentinel names (`None` where one does not answer).
    fn named_masters(&self) -> Vec<Option<u16>> {
        self.sentinels
            .iter()
            .map(|s| named_master(s.port).map(|p| self.plain(p)))
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
        let port = self.announced(master).to_string();
        for server in self.servers.iter().filter(|s| s.port() != master) {
            let info = ask(server.port(), &["INFO", "replication"])
                .ok_or_else(|| format!("redis:{} does not answer", server.port()))?;
            if info.contains("role:master") {
                ask(server.port(), &["REPLICAOF", "127.0.0.1", &port]);
                return Err(format!("redis:{} was still a master", server.port()));
            }
            if !info.contains(&format!("master_port:{port}\r"))
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

/// The TLS settings of a server or sentinel in a group started with TLS:
/// the certificates of [`make_test_certificates`](crate::make_test_certificates),
/// TLS for replication and between sentinels, no client certificate asked.
fn tls_settings(certs: &Path) -> Vec<(&'static str, String)> {
    let file = |f: &str| certs.join(f).display().to_string();
    vec![
        ("tls-cert-file", file("server.crt")),
        ("tls-key-file", file("server.key")),
        ("tls-ca-cert-file", file("ca.crt")),
        ("tls-auth-clients", "no".to_owned()),
        ("tls-replication", "yes".to_owned()),
    ]
}
