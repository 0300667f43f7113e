//! Test harness for lockguard: real `redis-server` processes that tests
//! start, pause, kill and restart themselves.
//!
//! Each [`RedisServer`] runs in its own temporary directory on a free
//! loopback port, with persistence off, and is killed when dropped. A
//! missing `redis-server` binary fails the test with a message saying how to
//! install it; it is never a silent skip.
//!
//! [`PostgresServer`] does the same for PostgreSQL (`initdb` and `postgres`
//! run as an unprivileged user when the tests run as root), and
//! [`MariaDbServer`] for MariaDB (the MySQL store's tests).
//!
//! The [`mod@conformance`] kit is the behaviour every store must show, as tests
//! a store crate runs against its own store through a harness; the
//! [`mod@faults`] scenarios are what every store with a server must show
//! when that server is killed, paused or down, over any [`ServerProcess`].
//!
//! | feature | what it adds |
//! |---|---|
//! | `kits` (default) | the conformance kit, the fault scenarios and the limiter models, with tokio's `test-util` (paused time) they run on; without it, the server harnesses alone, on the tokio a service runs |

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

#[cfg(feature = "kits")]
pub mod conformance;
#[cfg(feature = "kits")]
pub mod faults;
mod log;
mod mariadb;
#[cfg(feature = "kits")]
pub mod models;
mod postgres;
mod process;
mod relay;
mod sentinel;
mod tls;
mod zookeeper;
mod zookeeper_txnlog;
pub use log::CapturedLog;
pub use mariadb::{MariaDbServer, mariadb_program};
pub use postgres::{PostgresServer, postgres_bin_dir};
pub use process::{ChildProcess, ServerProcess, freeze, process_alive};
pub use relay::Relay;
pub use sentinel::{SERVICE as SENTINEL_SERVICE, SentinelGroup};
pub use tls::make_test_certificates;
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperServer, zookeeper_classpath};

/// How long a server may take to answer `PING` after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` process owned by a test.
#[derive(Debug)]
pub struct RedisServer {
    /// The server, or the watcher it runs under (see [`WATCHER`]).
    child: Option<Child>,
    /// The server's process id, while it runs.
    pid: Option<u32>,
    /// Run under a watcher, which kills it when the test process exits
    /// (for a server in a `static`, which is never dropped).
    watched: bool,
    /// The write end of the watcher's stdin: closing it stops the server.
    watch: Option<ChildStdin>,
    port: u16,
    dir: tempfile::TempDir,
    paused: bool,
    args: Vec<String>,
}

/// The shell a watched server runs under: starts the server, says its pid,
/// and once its stdin closes (the test process exited, or the server is
/// killed) kills the server and removes its directory.
const WATCHER: &str = r#"
dir=$PWD
"$@" </dev/null >/dev/null 2>&1 &
pid=$!
echo "$pid"
read -r _ || true
kill -KILL "$pid" 2>/dev/null
wait "$pid"
cd / && rm -rf "$dir"
"#;

/// The `redis-server` binary: `$REDIS_SERVER` when set, else the one on `PATH`.
///
/// # Panics
///
/// When no binary is found, with a message saying how to get one.
pub fn redis_server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("REDIS_SERVER") {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-server"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server not found on PATH: the Redis tests need a real server. \
             Run `bash scripts/test.sh` (it installs redis-server with apt-get), \
             or install it yourself (`apt-get install redis-server`), \
             or point REDIS_SERVER at the binary"
        )
    })
}

/// A loopback port that nobody listens on, handed out once per process.
///
/// The port is only probed: the server started on it binds it later. A
/// probe gets a port one of the ten probes before it got about once in
/// 1,250, so two servers starting at once (tests run side by side) were
/// sometimes handed the same port: the second server then failed to
/// bind, its readiness check reached the first one's, and the second test
/// ran on the first test's server until that test ended and took it away
/// (a check refused in the middle of a conformance test). A port handed out
/// once is never handed out again by this process; only another process
/// could still take it between the probe and the bind (cargo runs test
/// binaries one at a time).
pub(crate) fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("no free loopback port");
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing or does not come up; the panic
    /// message holds the server's log.
    pub fn start() -> Self {
        Self::start_with_args(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments
    /// (`["--maxmemory", "10mb"]`).
    pub fn start_with_args(extra: &[&str]) -> Self {
        Self::start_as(extra, false)
    }

    /// A server that stops when the test process exits even if it is
    /// never dropped (one kept in a `static`).
    fn start_watched(extra: &[&str]) -> Self {
        Self::start_as(extra, true)
    }

    fn start_as(extra: &[&str], watched: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-redis-")
            .tempdir()
            .expect("cannot create a temporary directory for redis-server");
        let mut server = Self {
            child: None,
            pid: None,
            watched,
            watch: None,
            port: 0,
            dir,
            paused: false,
            args: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut last_error = String::new();
        // The probed port may be taken between the probe and the bind.
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let binary = redis_server_binary();
        let log = self.log_path();
        // A watcher removes the directory once its server is gone: a server
        // that did not come up is started again in it.
        std::fs::create_dir_all(self.dir.path())
            .map_err(|e| format!("cannot create {}: {e}", self.dir.path().display()))?;
        let mut cmd = if self.watched {
            let mut sh = Command::new("sh");
            sh.arg("-c").arg(WATCHER).arg("sh").arg(&binary);
            sh
        } else {
            Command::new(&binary)
        };
        cmd.current_dir(self.dir.path())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "yes"])
            .args(["--logfile", &log.display().to_string()])
            .args(&self.args)
            .stderr(Stdio::null());
        if self.watched {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        } else {
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        self.pid = Some(child.id());
        if self.watched {
            self.watch = child.stdin.take();
            let mut line = String::new();
            let said = child
                .stdout
                .take()
                .map(|out| BufReader::new(out).read_line(&mut line));
            self.pid = line.trim().parse().ok();
            if !matches!(said, Some(Ok(_))) || self.pid.is_none() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the watcher of {} said no pid", binary.display()));
            }
        }
        self.child = Some(child);
        self.paused = false;
        let started = Instant::now();
        loop {
            if ping(self.port) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > START_TIMEOUT {
                self.kill();
                return Err(format!(
                    "redis-server on port {} did not come up (exit: {exited:?}); its log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The directory the server runs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A redis-rs client for the server, for tests that inspect or disturb it.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A fresh async connection to the server.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("cannot connect to the test redis-server")
    }

    /// Adds an ACL user `name` (password `password`) who may connect and
    /// read (`HELLO`, `PING`, `INFO`, `GET`) but run nothing else: no
    /// script, no write, the account of a service given too few rights.
    /// `admin` is a connection with the rights to add users. Returns the
    /// user's URL.
    ///
    /// # Panics
    ///
    /// When the server refuses `ACL SETUSER`.
    pub async fn add_read_only_user(
        &self,
        admin: &mut redis::aio::MultiplexedConnection,
        name: &str,
        password: &str,
    ) -> String {
        let pass = format!(">{password}");
        let rules = [
            "SETUSER", name, "on", &pass, "~*", "-@all", "+hello", "+ping", "+info", "+get",
        ];
        let () = redis::cmd("ACL")
            .arg(&rules[..])
            .query_async(admin)
            .await
            .expect("ACL SETUSER");
        format!("redis://{name}:{password}@127.0.0.1:{}", self.port())
    }

    /// Whether the process is running (and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and(self.pid)
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            assert!(
                crate::process::signal(pid, sig),
                "kill({pid}, {sig}) failed"
            );
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is
    /// answered, leases keep running in its clock.
    /// Returns once every thread has stopped ([`freeze`]).
    pub fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            assert!(crate::process::freeze(pid), "kill({pid}, SIGSTOP) failed");
        }
        self.paused = true;
    }

    /// Resumes a paused server with SIGCONT.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.watched {
                // Its stdin closed, the watcher kills the server, removes
                // its directory and exits.
                self.watch = None;
            } else {
                let _ = child.kill();
            }
            let _ = child.wait();
            self.paused = false;
        }
    }

    /// Starts the server again on the same port: empty, unless it was
    /// started with persistence on (`--appendonly yes`), when it comes back
    /// on its data (the same directory, the same arguments).
    ///
    /// # Panics
    ///
    /// When it does not come up.
    pub fn restart(&mut self) {
        assert!(
            !self.watched,
            "a watched server is not restarted: its watcher removed its directory"
        );
        self.kill();
        // The port was ours a moment ago; retry briefly if the kernel has
        // not let go of it yet.
        let mut last = String::new();
        for _ in 0..50 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("restart failed: {last}");
    }
}

/// Asserts that store `S`'s lock futures (its acquire, release and extend)
/// are at most `bound` bytes each, found without calling them. Each is
/// copied whole into the store boundary's box at every call, so a future
/// grown large (a rare path's connect inlined into it) costs every
/// operation.
///
/// # Panics
///
/// When one of them is larger than `bound`, naming it and its size.
#[cfg(feature = "kits")]
pub fn assert_lock_futures_within<S: lockguard_core::store::LockStore>(bound: usize) {
    use lockguard_core::store::{LockKeys, Token};
    type Args<'a, S> = (&'a S, &'a std::sync::Arc<LockKeys>, &'a Token);
    let sizes = [
        (
            "acquire",
            future_size(|(s, k, t): Args<'_, S>| s.acquire(k, t, Duration::ZERO, None)),
        ),
        (
            "release",
            future_size(|(s, k, t): Args<'_, S>| s.release(k, t)),
        ),
        (
            "extend",
            future_size(|(s, k, t): Args<'_, S>| s.extend(k, t, Duration::ZERO)),
        ),
    ];
    for (operation, size) in sizes {
        assert!(
            size <= bound,
            "{}'s {operation} future is {size} bytes, over {bound}",
            std::any::type_name::<S>()
        );
    }
}

/// The size in bytes of the future `call` returns, found without calling
/// it.
#[cfg(feature = "kits")]
fn future_size<A, F: std::future::Future>(_call: impl FnOnce(A) -> F) -> usize {
    std::mem::size_of::<F>()
}

/// The `redis+redlock://` URL of `nodes`, as `lockguard::connect` reads it.
pub fn redlock_url(nodes: &[RedisServer]) -> String {
    let hosts: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    format!("redis+redlock://{}", hosts.join(","))
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a Redis on `port` answers `PING`: with `+PONG`, or with
/// `-NOAUTH` when it was started with a password.
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    matches!(stream.read_exact(&mut buf), Ok(()) if &buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
}

/// A Redis Cluster of `masters` real `redis-server` processes (no
/// replicas) on free loopback ports, created with `redis-cli --cluster
/// create`, ready (`cluster_state:ok` on every node) when returned.
///
/// Nodes run with `cluster-require-full-coverage no` and a short node
/// timeout, so a killed master takes down only its own slots.
#[derive(Debug)]
pub struct RedisCluster {
    /// The masters, in the order their slots were assigned.
    pub nodes: Vec<RedisServer>,
}

/// The `redis-cli` binary beside the server, or on `PATH`.
fn redis_cli_binary() -> PathBuf {
    let server = redis_server_binary();
    let beside = server.with_file_name("redis-cli");
    if beside.is_file() {
        return beside;
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-cli"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("redis-cli not found: the cluster tests need it (apt-get install redis-tools)")
        })
}

impl RedisCluster {
    /// Starts `masters` nodes and joins them into a cluster.
    ///
    /// # Panics
    ///
    /// When a node does not start or the cluster does not form within 20 s;
    /// the message says what `redis-cli` printed.
    pub fn start(masters: usize) -> Self {
        Self::start_with_args(masters, &[])
    }

    /// Like [`RedisCluster::start`], with extra `redis-server` arguments
    /// for every node (`["--appendonly", "yes"]`, so that a node restarted
    /// with [`RedisServer::restart`] comes back on its data).
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start`].
    pub fn start_with_args(masters: usize, extra: &[&str]) -> Self {
        let nodes = (0..masters).map(|_| Self::start_node(extra)).collect();
        Self::create(nodes)
    }

    /// One three-master cluster for the whole test process, started on
    /// first use, with tests kept apart by key prefix (as the shared
    /// PostgreSQL server keeps them apart by schema). Its nodes stop when
    /// the process exits. Creating a cluster costs about 2 s (a new master
    /// reports `cluster_state:ok` only 2 s after it started), which a test
    /// of its own pays every time.
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start`].
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            let nodes = (0..3)
                .map(|_| RedisServer::start_watched(&Self::node_args(&[])))
                .collect();
            Self::create(nodes)
        })
    }

    /// Joins `nodes`, new nodes of no cluster, into one.
    fn create(nodes: Vec<RedisServer>) -> Self {
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(redis_cli_binary())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("cannot run redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        let started = Instant::now();
        while !cluster.nodes.iter().all(|n| n.cluster_ok()) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// A cluster node not yet in a cluster, with `extra` arguments.
    fn start_node(extra: &[&str]) -> RedisServer {
        RedisServer::start_with_args(&Self::node_args(extra))
    }

    /// A cluster node's arguments, with `extra` ones.
    fn node_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--cluster-require-full-coverage",
            "no",
        ];
        args.extend_from_slice(extra);
        args
    }

    /// Starts a node (with `extra` arguments) and makes it a replica of the
    /// master `nodes[master]`; returns it once the master counts it as a
    /// connected replica. The caller keeps it (dropping it kills it).
    ///
    /// # Panics
    ///
    /// When the node does not start or does not join within 20 s.
    pub fn add_replica(&self, master: usize, extra: &[&str]) -> RedisServer {
        let master = &self.nodes[master];
        let replica = Self::start_node(extra);
        let mut to_master = master.client().get_connection().expect("connect");
        let mut conn = replica.client().get_connection().expect("connect");
        let id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut to_master)
            .expect("CLUSTER MYID");
        let _: () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(master.port())
            .query(&mut conn)
            .expect("CLUSTER MEET");
        let started = Instant::now();
        // The new node learns the master's id by gossip: until then
        // REPLICATE answers that the node is unknown.
        while redis::cmd("CLUSTER")
            .arg("REPLICATE")
            .arg(&id)
            .query::<()>(&mut conn)
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the new node never learned of master {id}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut to_master)
                .expect("INFO");
            if info.contains(&format!("port={},state=online", replica.port())) {
                return replica;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the master never counted its new replica: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nodes' URLs, to seed a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The cluster's URL for `Client::connect`:
    /// `redis+cluster://127.0.0.1:PORT,...`, every node a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

impl RedisServer {
    /// Whether this cluster node reports `cluster_state:ok`.
    pub fn cluster_ok(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"CLUSTER INFO\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 4096];
        let mut text = String::new();
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            if text.contains("cluster_state:") && text.ends_with("\r\n") && text.len() > 40 {
                break;
            }
        }
        text.contains("cluster_state:ok")
    }

    /// The cluster slot a key hashes to (the server's own answer).
    pub fn key_slot(&self, key: &str) -> u16 {
        let mut conn = self.client().get_connection().expect("connect");
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .expect("CLUSTER KEYSLOT")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::free_port;

    /// Probes from threads at once never get a port twice.
    #[test]
    fn free_ports_are_handed_out_once() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..1000).map(|_| free_port()).collect::<Vec<_>>()))
            .collect();
        let mut seen = HashSet::new();
        for t in threads {
            for port in t.join().unwrap() {
                assert!(seen.insert(port), "port {port} handed out twice");
            }
        }
    }
}
