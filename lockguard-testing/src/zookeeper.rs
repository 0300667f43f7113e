//! Real ZooKeeper servers for tests: a standalone server, or an ensemble of
//! them, each `java … QuorumPeerMain` in a temporary directory on free
//! loopback ports.
//!
//! Tests talk to the servers' four-letter-word commands
//! ([`ZooKeeperServer::four_letter`]) to see whether they serve and who
//! leads; `ruok` alone is not enough, since a server answers `imok` before
//! it serves (and while it has no quorum).
//!
//! Like [`PostgresServer`](crate::PostgresServer), each server runs under a
//! small shell that holds the read end of a pipe whose write end only this
//! process has: when the test process exits, for whatever reason, the pipe
//! closes and the shell kills the server and removes its directory.
//!
//! ZooKeeper logs through SLF4J; Debian's `libslf4j-java` (which its
//! `zookeeper` package depends on) has a simple logger, and when it is there
//! the servers log to `<dir>/log`, which failed starts show.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Relay;

/// How long a server may take to serve after it was started (an ensemble
/// member: to join a quorum).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`ZooKeeperServer::four_letter`] waits for a whole answer.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);

/// Where Debian's `zookeeper` package puts the server's jar.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";

/// SLF4J's simple logger from Debian's `libslf4j-java`: added to the class
/// path when present, so the servers' logs say something (without a
/// logger SLF4J drops every line).
const SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";

/// How many lines of a server's log a panic message shows.
const LOG_TAIL_LINES: usize = 60;

/// The shell each server runs under: starts the server, says its pid, and
/// kills it once its stdin closes. A line on stdin first (the harness's own
/// kill) keeps the directory for a restart; a bare end of file (the test
/// process is gone) removes `$LOCKGUARD_ZK_DIR` too.
const WATCHER: &str = r#"
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
if read -r _; then
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
else
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  rm -rf "$LOCKGUARD_ZK_DIR"
fi
"#;

/// The ZooKeeper class path: `$ZOOKEEPER_CLASSPATH` when set (and not
/// empty), else Debian's `/usr/share/java/zookeeper.jar` (its manifest
/// brings the rest).
///
/// # Panics
///
/// When neither is there, with a message saying how to get ZooKeeper.
pub fn zookeeper_classpath() -> String {
    let set = std::env::var_os("ZOOKEEPER_CLASSPATH").filter(|cp| !cp.is_empty());
    if let Some(cp) = set {
        return cp.to_string_lossy().into_owned();
    }
    if Path::new(DEBIAN_JAR).is_file() {
        return DEBIAN_JAR.to_owned();
    }
    panic!(
        "{DEBIAN_JAR} not found and ZOOKEEPER_CLASSPATH not set: the ZooKeeper tests need a \
         real server. Run `bash scripts/test.sh` (it installs zookeeper with apt-get), or \
         install it yourself (`apt-get install zookeeper`), or point ZOOKEEPER_CLASSPATH at \
         the jars of a ZooKeeper 3.5+ server"
    )
}

/// The `java` binary: `$JAVA_HOME/bin/java` when there, else the one on
/// `PATH`.
///
/// # Panics
///
/// When there is none, with a message saying how to get one.
fn java_binary() -> PathBuf {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return java;
        }
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("java"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "java not found ($JAVA_HOME/bin, PATH): the ZooKeeper tests run a real server, \
             which needs a Java runtime. Run `bash scripts/test.sh` (it installs zookeeper, \
             which brings one, with apt-get), or install it yourself (`apt-get install \
             zookeeper`)"
        )
    })
}

/// What a server is, and so what its `srvr` says once it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `Mode: standalone`.
    Standalone,
    /// An ensemble member: `Mode: leader` or `Mode: follower`.
    Member,
}

/// A ZooKeeper server owned by a test: standalone
/// ([`ZooKeeperServer::start`]) or a member of a [`ZooKeeperEnsemble`].
/// Killed, and its directory removed, when dropped.
#[derive(Debug)]
pub struct ZooKeeperServer {
    /// The watcher shell.
    child: Option<Child>,
    /// The write end of the watcher's pipe: closing it stops the server.
    stdin: Option<ChildStdin>,
    /// The java process's id (the watcher's child).
    pid: u32,
    port: u16,
    dir: tempfile::TempDir,
    role: Role,
    paused: bool,
    /// How many times the server was started, to tell this start's log
    /// lines from an earlier one's.
    starts: u32,
}

impl ZooKeeperServer {
    /// Starts a standalone server in a new temporary directory on a free
    /// port; returns once it serves (`ruok` answers `imok` and `srvr` says
    /// `Mode: standalone`).
    ///
    /// # Panics
    ///
    /// When ZooKeeper or Java is missing, or the server does not serve
    /// within 30 s; the message holds the tail of the server's log.
    pub fn start() -> Self {
        Self::start_with("")
    }

    /// One standalone server for the whole test process, started on first
    /// use: tests keep apart by working under roots of their own (as the
    /// PostgreSQL tests do by schema), and save a JVM start each. It stops
    /// when the process exits (its watcher sees the pipe close).
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::start`].
    pub fn shared() -> &'static ZooKeeperServer {
        static SHARED: std::sync::OnceLock<ZooKeeperServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(Self::start)
    }

    /// Like [`ZooKeeperServer::start`], with `config` (lines of `zoo.cfg`,
    /// such as `"forceSync=no\n"`) appended to the configuration.
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::start`].
    pub fn start_with(config: &str) -> Self {
        let mut last_error = String::new();
        // The probed port may be taken between the probe and the bind.
        for _ in 0..5 {
            let port = crate::free_port();
            let mut server = Self::create(port, Role::Standalone, config);
            match server.spawn().and_then(|()| server.wait_until_serving()) {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}");
    }

    /// Starts a standalone server like [`ZooKeeperServer::start`] whose
    /// data tree already holds the persistent node `path` (and its
    /// parents), with its children's version (`cversion`) at `cversion`:
    /// the next sequential child created under `path` is numbered
    /// `cversion`, the one after `cversion + 1` (wrapping from 2147483647
    /// to -2147483648, as ZooKeeper's counter does).
    ///
    /// Requests cannot set a `cversion` and take hours to move one near the
    /// wrap; this writes a transaction log of a few creates, one of them
    /// carrying the `cversion` its parent gets, which the server replays
    /// as it starts (the log format of ZooKeeper 3.5 and later).
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::start`]; and when `path` is not an absolute
    /// node path other than `/`.
    pub fn start_with_cversion(path: &str, cversion: i32) -> Self {
        let (name, log) = crate::zookeeper_txnlog::cversion_log(path, cversion);
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = crate::free_port();
            // A log with no snapshot beside it is refused unless trusted.
            let mut server = Self::create(port, Role::Standalone, "snapshot.trust.empty=true\n");
            let logs = server.dir().join("data").join("version-2");
            std::fs::create_dir(&logs).expect("cannot create zookeeper's log directory");
            std::fs::write(logs.join(&name), &log).expect("cannot write zookeeper's log");
            match server.spawn().and_then(|()| server.wait_until_serving()) {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}");
    }

    /// A server not yet started: its directory, `zoo.cfg` and data
    /// directory, with `extra` appended to the configuration.
    fn create(port: u16, role: Role, extra: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-zk-")
            .tempdir()
            .expect("cannot create a temporary directory for zookeeper");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("cannot create zookeeper's data directory");
        // Short ticks so that sessions, syncs and elections are quick; the
        // admin server (Jetty on port 8080) off; every 4lw command allowed.
        let config = format!(
            "tickTime=200\n\
             initLimit=20\n\
             syncLimit=10\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             minSessionTimeout=400\n\
             maxSessionTimeout=60000\n\
             {extra}",
            data = data.display(),
        );
        std::fs::write(dir.path().join("zoo.cfg"), config).expect("cannot write zoo.cfg");
        Self {
            child: None,
            stdin: None,
            pid: 0,
            port,
            dir,
            role,
            paused: false,
            starts: 0,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Starts the java process under its watcher, without waiting for it
    /// to serve.
    fn spawn(&mut self) -> Result<(), String> {
        let java = java_binary();
        let mut classpath = zookeeper_classpath();
        if Path::new(SLF4J_SIMPLE).is_file() {
            classpath.push(':');
            classpath.push_str(SLF4J_SIMPLE);
        }
        self.starts += 1;
        let mut log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open the zookeeper log: {e}"))?;
        writeln!(
            log,
            "lockguard-testing: starting zookeeper #{} on port {}",
            self.starts, self.port
        )
        .map_err(|e| format!("cannot write the zookeeper log: {e}"))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHER)
            .arg("sh")
            .arg(&java)
            // Small and quick to start: two cores hold a whole ensemble
            // and the tests. No hsperfdata file, which a killed JVM leaves
            // behind in /tmp.
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-XX:-UsePerfData")
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
            .arg("-cp")
            .arg(&classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.dir.path().join("zoo.cfg"))
            .env("LOCKGUARD_ZK_DIR", self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            // Apart from the test's process group (a ^C reaches the
            // watcher through its closed stdin instead).
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", java.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = BufReader::new(stdout).read_line(&mut line);
        let Ok(pid) = line.trim().parse() else {
            // Stop whatever started, keeping the directory (a line first).
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"kill\n");
            }
            let _ = child.wait();
            return Err(format!("no pid from the zookeeper watcher: {line:?}"));
        };
        self.pid = pid;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Waits until the server serves in its role; kills it (keeping its
    /// directory) and says why when it exits or times out.
    fn wait_until_serving(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if self.serves() {
                return Ok(());
            }
            let exited = !self.is_running();
            if exited || started.elapsed() > START_TIMEOUT {
                let why = if exited {
                    "it exited".to_owned()
                } else {
                    format!("not after {START_TIMEOUT:?} (mode: {:?})", self.mode())
                };
                self.kill();
                return Err(format!(
                    "zookeeper on port {} did not {}: {why}; the end of its log ({}):\n{}",
                    self.port,
                    match self.role {
                        Role::Standalone => "serve",
                        Role::Member => "join a quorum",
                    },
                    self.log_path().display(),
                    self.log_tail(),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server answers `imok` and its `srvr` shows the mode its
    /// role serves in.
    fn serves(&self) -> bool {
        if self.four_letter("ruok").as_deref() != Some("imok") {
            return false;
        }
        matches!(
            (self.role, self.mode().as_deref()),
            (Role::Standalone, Some("standalone")) | (Role::Member, Some("leader" | "follower"))
        )
    }

    /// The server's port for clients, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, a ZooKeeper connect string.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The directory the server runs in: `zoo.cfg`, `data/` and `log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far (every start's, each after a
    /// `lockguard-testing: starting zookeeper #N` line).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last lines of the log, for panic messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        lines[from..].join("\n")
    }

    /// The java process's id, while started (and not killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|_| self.pid)
    }

    /// Whether the java process is alive: started, not killed, and not
    /// exited on its own. A paused server is running.
    pub fn is_running(&self) -> bool {
        self.pid().is_some_and(crate::process_alive)
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // One that already exited is not an error (the watcher has not
            // reaped it, so the pid is still ours).
            crate::process::signal(pid, sig);
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open (and new ones
    /// are accepted by the kernel), nothing is answered, its peers and
    /// clients see it go silent. Returns once every thread of the JVM has
    /// stopped ([`freeze`](crate::freeze)).
    ///
    /// # Panics
    ///
    /// When the threads have not all stopped within 5 s.
    pub fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            crate::process::freeze(pid);
        }
        self.paused = true;
    }

    /// Resumes a paused server with SIGCONT.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for it to
    /// exit. Its directory (and data) stays for [`ZooKeeperServer::restart`].
    pub fn kill(&mut self) {
        if self.child.is_some() {
            self.signal(libc::SIGKILL);
        }
        if let Some(mut stdin) = self.stdin.take() {
            // A line, not just the end of the pipe: keep the directory.
            let _ = stdin.write_all(b"kill\n");
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Kills the server (when running) and starts it again on the same
    /// port and data directory, so its data survives; returns once it
    /// serves again: standalone, `Mode: standalone`; an ensemble member,
    /// back in the quorum as leader or follower (which needs a quorum of
    /// the other members up: to restart several killed members at once,
    /// see [`ZooKeeperEnsemble::restart_members`]).
    ///
    /// # Panics
    ///
    /// When it does not serve within 30 s; the message holds the tail of
    /// its log.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_again();
        if let Err(e) = self.wait_until_serving() {
            panic!("restart failed: {e}");
        }
    }

    /// Starts the killed server again, without waiting for it to serve.
    fn spawn_again(&mut self) {
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("restart failed: {last}");
    }

    /// Sends a four-letter-word command (`ruok`, `srvr`, `stat`, `mntr`,
    /// …) and returns the whole answer, read until the server closes the
    /// connection; `None` when the server cannot be reached or does not
    /// answer within 2 s (killed, paused, or not listening yet).
    pub fn four_letter(&self, cmd: &str) -> Option<String> {
        let deadline = Instant::now() + FOUR_LETTER_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut stream = TcpStream::connect_timeout(&addr, FOUR_LETTER_TIMEOUT).ok()?;
        stream.set_write_timeout(Some(FOUR_LETTER_TIMEOUT)).ok()?;
        stream.write_all(cmd.as_bytes()).ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            if left.is_zero() {
                return None;
            }
            stream.set_read_timeout(Some(left)).ok()?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(String::from_utf8_lossy(&answer).into_owned())
    }

    /// The last transaction the server has applied (`Zxid` in `srvr`):
    /// what a client moving to it must not have seen past, or it refuses
    /// the client ("client must try another server"). `None` when the
    /// server does not answer or does not serve.
    pub fn last_zxid(&self) -> Option<i64> {
        let answer = self.four_letter("srvr")?;
        let hex = answer
            .lines()
            .find_map(|line| line.strip_prefix("Zxid: 0x"))?;
        i64::from_str_radix(hex.trim(), 16).ok()
    }

    /// The server's mode from `srvr`: `"standalone"`, `"leader"`,
    /// `"follower"` (or `"observer"`); `None` when it does not answer or
    /// does not serve (an ensemble member without a quorum says "This
    /// ZooKeeper instance is not currently serving requests").
    pub fn mode(&self) -> Option<String> {
        let answer = self.four_letter("srvr")?;
        answer
            .lines()
            .find_map(|line| line.strip_prefix("Mode: "))
            .map(|mode| mode.trim().to_owned())
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A ZooKeeper ensemble: `n` servers on free loopback ports, each in its own
/// directory, that elect a leader among themselves. Killed when dropped.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<ZooKeeperServer>,
}

impl ZooKeeperEnsemble {
    /// Starts `n` members (3 for a quorum that survives one failure), all
    /// at once, and returns once each serves as leader or follower.
    ///
    /// # Panics
    ///
    /// When `n` is 0, when ZooKeeper or Java is missing, or when the
    /// ensemble does not form within 30 s; the message holds the tail of
    /// every member's log.
    pub fn start(n: usize) -> Self {
        Self::start_relayed(n, None).0
    }

    /// Starts `n` members like [`ZooKeeperEnsemble::start`], with member
    /// `relayed`'s links to the others' quorum ports (where a follower
    /// reaches its leader) going through a [`Relay`] each, returned in the
    /// other members' order. Holding them makes that member lag: it stops
    /// hearing proposals, commits and sync answers from the leader, and
    /// goes on serving its clients from what it has, forwarding their
    /// writes and syncs. The members give up on a silent leader or
    /// follower after 20 s here (`syncLimit`), so a hold may last that long.
    ///
    /// Member `relayed` should be 0: with the lowest `myid` it is never
    /// elected while another member runs.
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperEnsemble::start`]; and when `relayed` is out of range.
    pub fn start_with_relayed_member(n: usize, relayed: usize) -> (Self, Vec<Relay>) {
        assert!(relayed < n, "no member {relayed} in an ensemble of {n}");
        Self::start_relayed(n, Some(relayed))
    }

    fn start_relayed(n: usize, relayed: Option<usize>) -> (Self, Vec<Relay>) {
        assert!(n > 0, "an ensemble needs at least one member");
        // Three ports per member (clients, followers to the leader,
        // elections), all bound at once so that they differ.
        let listeners: Vec<TcpListener> = (0..3 * n)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("no free loopback port"))
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().expect("bound").port())
            .collect();
        drop(listeners);
        // The relayed member's way to each other member's quorum port.
        let relays: Vec<(usize, Relay)> = match relayed {
            Some(r) => (0..n)
                .filter(|&i| i != r)
                .map(|i| (i, Relay::start(ports[3 * i + 1])))
                .collect(),
            None => Vec::new(),
        };
        // server.ID=host:quorum port:election port. A one-member ensemble
        // runs as a quorum of one (leader) rather than standalone.
        let servers = |me: usize| {
            let mut servers = String::from("standaloneEnabled=false\n");
            if relayed.is_some() {
                // A held link must not end the followership at once.
                servers.push_str("syncLimit=100\n");
            }
            for i in 0..n {
                let quorum = match relays.iter().find(|(peer, _)| *peer == i) {
                    Some((_, relay)) if Some(me) == relayed => relay.port(),
                    _ => ports[3 * i + 1],
                };
                servers.push_str(&format!(
                    "server.{}=127.0.0.1:{quorum}:{}\n",
                    i + 1,
                    ports[3 * i + 2]
                ));
            }
            servers
        };
        let mut members: Vec<ZooKeeperServer> = (0..n)
            .map(|i| {
                let member = ZooKeeperServer::create(ports[3 * i], Role::Member, &servers(i));
                std::fs::write(
                    member.dir().join("data").join("myid"),
                    format!("{}\n", i + 1),
                )
                .expect("cannot write myid");
                member
            })
            .collect();
        for member in &mut members {
            if let Err(e) = member.spawn() {
                panic!("{e}");
            }
        }
        let ensemble = Self { members };
        ensemble.wait_until_serving();
        (ensemble, relays.into_iter().map(|(_, r)| r).collect())
    }

    /// The members' `127.0.0.1:PORT`s joined with commas, a ZooKeeper
    /// connect string.
    pub fn hosts(&self) -> String {
        self.members
            .iter()
            .map(ZooKeeperServer::hosts)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many members the ensemble has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the ensemble has no members (never: see
    /// [`ZooKeeperEnsemble::start`]).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i` (from 0; its `myid` is `i + 1`).
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn member(&self, i: usize) -> &ZooKeeperServer {
        &self.members[i]
    }

    /// Member `i`, to pause, kill or restart it. Its
    /// [`restart`](ZooKeeperServer::restart) waits until it is back in the
    /// quorum as leader or follower.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn member_mut(&mut self, i: usize) -> &mut ZooKeeperServer {
        &mut self.members[i]
    }

    /// The member whose `srvr` says `Mode: leader`, if any; paused members
    /// are not asked (they would not answer). The first, should two say
    /// so: a paused leader, resumed after the others elected another, goes
    /// on saying `leader` for a moment.
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.is_running() && !m.paused && m.mode().as_deref() == Some("leader"))
    }

    /// Waits until exactly one member (running, not paused) says
    /// `Mode: leader`, and returns it.
    ///
    /// # Panics
    ///
    /// When that takes longer than `timeout`; the message holds every
    /// member's mode and the tail of its log.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let started = Instant::now();
        loop {
            let leaders: Vec<usize> = (0..self.len())
                .filter(|&i| {
                    let m = &self.members[i];
                    m.is_running() && !m.paused && m.mode().as_deref() == Some("leader")
                })
                .collect();
            if let [leader] = leaders[..] {
                return leader;
            }
            if started.elapsed() > timeout {
                panic!(
                    "no single leader after {timeout:?} (leaders: {leaders:?}); {}",
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every member that was started (and not killed since)
    /// and is not paused serves as leader or follower, with exactly one
    /// leader among them.
    ///
    /// # Panics
    ///
    /// When a member exited on its own, or when that takes longer than
    /// 30 s (as when too few members run for a quorum); the message holds
    /// every member's mode and the tail of its log.
    pub fn wait_until_serving(&self) {
        let started = Instant::now();
        loop {
            let mut leaders = 0;
            let mut all_serve = true;
            for (i, m) in self.members.iter().enumerate() {
                if m.child.is_none() || m.paused {
                    continue;
                }
                if !m.is_running() {
                    panic!("ensemble member {i} exited; {}", self.report());
                }
                match m.mode().as_deref() {
                    Some("leader") => leaders += 1,
                    Some("follower") => {}
                    _ => all_serve = false,
                }
            }
            if all_serve && leaders == 1 {
                return;
            }
            if started.elapsed() > START_TIMEOUT {
                panic!(
                    "the ensemble did not serve within {START_TIMEOUT:?}; {}",
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the given members (those still running) and starts them again
    /// together, on their ports and data; returns once every running member
    /// serves again. For when the quorum needs more than one of them, where
    /// restarting them one by one with [`ZooKeeperServer::restart`] would
    /// time out on the first.
    ///
    /// # Panics
    ///
    /// When an index is out of range, or the ensemble does not serve again
    /// within 30 s.
    pub fn restart_members(&mut self, which: &[usize]) {
        for &i in which {
            self.members[i].kill();
        }
        for &i in which {
            self.members[i].spawn_again();
        }
        self.wait_until_serving();
    }

    /// Each member's port, pid, mode and log tail, for panic messages.
    fn report(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let state = if !m.is_running() {
                "not running".to_owned()
            } else if m.paused {
                "paused".to_owned()
            } else {
                format!("mode {:?}", m.mode())
            };
            out.push_str(&format!(
                "\n--- member {i} (port {}, pid {:?}): {state}; the end of its log ({}):\n{}\n",
                m.port,
                m.pid(),
                m.log_path().display(),
                m.log_tail()
            ));
        }
        out
    }
}
