//! One etcd member owned by a test: alone ([`EtcdServer::start`]) or in an
//! [`EtcdCluster`](super::EtcdCluster).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use lockguard_testing::ServerProcess;

use super::http::{self, HttpResponse, MemberStatus};
use super::{
    ELECTION_TIMEOUT_MS, HEARTBEAT_MS, LOG_TAIL_LINES, POLL_TIMEOUT, PROBE_TIMEOUT, START_TIMEOUT,
    WATCHER,
};

/// What a member is told to be: its name, ports and cluster.
#[derive(Debug, Clone)]
pub(super) struct MemberSpec {
    /// `--name`, unique in its cluster.
    pub(super) name: String,
    /// The port for clients, on 127.0.0.1.
    pub(super) port: u16,
    /// The port for the other members, on 127.0.0.1.
    pub(super) peer_port: u16,
    /// `--initial-cluster`: every member's `name=http://127.0.0.1:PEERPORT`.
    pub(super) initial_cluster: String,
    /// `--initial-cluster-token`, unique to the cluster.
    pub(super) token: String,
    /// The other members' peer ports (none for a member alone).
    pub(super) peers: Vec<u16>,
    /// A client port for TLS, beside the plain one (which the harness's
    /// probes use).
    pub(super) tls: Option<TlsSpec>,
    /// More of etcd's flags, last on its command line.
    pub(super) flags: Vec<String>,
}

/// A member's TLS client port: what it serves there, and with what.
#[derive(Debug, Clone)]
pub(super) struct TlsSpec {
    /// The port, on 127.0.0.1.
    pub(super) port: u16,
    /// The directory of `server.crt`, `server.key` and `ca.crt`
    /// ([`lockguard_testing::make_test_certificates`]).
    pub(super) certs: PathBuf,
    /// Whether clients there must show a certificate `ca.crt` signed.
    pub(super) client_cert_auth: bool,
}

/// Why a member did not come to serve.
#[derive(Debug)]
pub(super) struct NotServing {
    /// What happened, with the end of the log.
    pub(super) why: String,
    /// Whether the process ended on its own (as when its port was taken),
    /// which a new start on other ports may cure.
    pub(super) exited: bool,
}

/// An etcd member owned by a test: a single-member cluster
/// ([`EtcdServer::start`]) or a member of an
/// [`EtcdCluster`](super::EtcdCluster). Killed, and its directory removed,
/// when dropped.
#[derive(Debug)]
pub struct EtcdServer {
    /// The watcher shell.
    child: Option<Child>,
    /// The write end of the watcher's pipe: closing it stops the member.
    stdin: Option<ChildStdin>,
    /// The etcd process's id (the watcher's child).
    pid: u32,
    spec: MemberSpec,
    dir: tempfile::TempDir,
    paused: bool,
    /// How many times the member was started, to tell this start's log
    /// lines from an earlier one's.
    starts: u32,
}

impl EtcdServer {
    /// Starts a single-member cluster in a new temporary directory on free
    /// ports; returns once it serves (`/health` says `true`), usually
    /// within half a second.
    ///
    /// # Panics
    ///
    /// When `etcd` is missing, or the member does not serve within 30 s;
    /// the message holds the tail of its log.
    pub fn start() -> Self {
        Self::start_with(None, &[])
    }

    /// Starts a single-member cluster, as [`EtcdServer::start`], with more
    /// of etcd's flags (`--auth-token-ttl=1`, say), after the harness's
    /// own.
    ///
    /// # Panics
    ///
    /// As [`EtcdServer::start`].
    pub fn start_with_flags(flags: &[&str]) -> Self {
        Self::start_with(None, flags)
    }

    /// Starts a single-member cluster, as [`EtcdServer::start`], that also
    /// serves clients over TLS on a port of its own
    /// ([`EtcdServer::tls_endpoint`]), with the certificate and key
    /// `certs/server.crt` and `certs/server.key` (for 127.0.0.1), as
    /// [`make_test_certificates`](lockguard_testing::make_test_certificates)
    /// makes them. With `client_cert_auth`, a client there must show a
    /// certificate `certs/ca.crt` signed. The plain port stays, for the
    /// harness's probes.
    ///
    /// # Panics
    ///
    /// As [`EtcdServer::start`].
    pub fn start_tls(certs: &Path, client_cert_auth: bool) -> Self {
        Self::start_with(Some((certs.to_path_buf(), client_cert_auth)), &[])
    }

    fn start_with(tls: Option<(PathBuf, bool)>, flags: &[&str]) -> Self {
        let mut causes = Vec::new();
        // A probed port may be taken between the probe and the bind.
        for attempt in 1..=5 {
            let (port, peer_port) = (super::free_port(), super::free_port());
            let name = "lockguard".to_owned();
            let mut server = Self::create(MemberSpec {
                initial_cluster: format!("{name}=http://127.0.0.1:{peer_port}"),
                name,
                port,
                peer_port,
                token: super::cluster_token(),
                peers: Vec::new(),
                tls: tls.clone().map(|(certs, client_cert_auth)| TlsSpec {
                    port: super::free_port(),
                    certs,
                    client_cert_auth,
                }),
                flags: flags.iter().map(|f| (*f).to_owned()).collect(),
            });
            match server.spawn().and_then(|()| server.wait_until_serving()) {
                Ok(()) => return server,
                Err(e) if e.exited => {
                    causes.push(format!("attempt {attempt}: {}", server.exit_cause()));
                    if attempt == 5 {
                        panic!(
                            "etcd exited in each of 5 starts:\n{}\nthe last start: {}",
                            causes.join("\n"),
                            e.why
                        );
                    }
                }
                Err(e) => panic!("{}", e.why),
            }
        }
        unreachable!("the last attempt panics")
    }

    /// One single-member cluster for the whole test process, started on
    /// first use: tests keep apart by working under key prefixes of their
    /// own, and save a start each. It stops when the process exits (its
    /// watcher sees the pipe close).
    ///
    /// # Panics
    ///
    /// As [`EtcdServer::start`].
    pub fn shared() -> &'static EtcdServer {
        static SHARED: std::sync::OnceLock<EtcdServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(Self::start)
    }

    /// A member not yet started, in a new temporary directory.
    pub(super) fn create(spec: MemberSpec) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-etcd-")
            .tempdir()
            .expect("cannot create a temporary directory for etcd");
        Self {
            child: None,
            stdin: None,
            pid: 0,
            spec,
            dir,
            paused: false,
            starts: 0,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Starts the etcd process under its watcher, without waiting for it to
    /// serve.
    pub(super) fn spawn(&mut self) -> Result<(), NotServing> {
        let failed = |why: String| NotServing { why, exited: false };
        let etcd = super::etcd_binary();
        self.starts += 1;
        let mut log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| failed(format!("cannot open the etcd log: {e}")))?;
        writeln!(
            log,
            "lockguard-etcd: starting etcd #{} on port {} (peers on {})",
            self.starts, self.spec.port, self.spec.peer_port
        )
        .map_err(|e| failed(format!("cannot write the etcd log: {e}")))?;
        let client_url = format!("http://127.0.0.1:{}", self.spec.port);
        let peer_url = format!("http://127.0.0.1:{}", self.spec.peer_port);
        let (listen, advertise) = match &self.spec.tls {
            Some(tls) => {
                let tls_url = format!("https://127.0.0.1:{}", tls.port);
                (format!("{tls_url},{client_url}"), tls_url)
            }
            None => (client_url.clone(), client_url),
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHER)
            .arg("sh")
            .arg(&etcd)
            .args(["--name", &self.spec.name])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &advertise])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            // Ignored once the data directory holds the member (a restart).
            .args(["--initial-cluster", &self.spec.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.spec.token])
            // Quick elections, and a smallest lease TTL of 1 s.
            .arg(format!("--heartbeat-interval={HEARTBEAT_MS}"))
            .arg(format!("--election-timeout={ELECTION_TIMEOUT_MS}"))
            .arg("--enable-v2=false")
            // Structured lines on stderr, which goes to the log file with
            // whatever else etcd writes there (a Go panic).
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .env("LOCKGUARD_ETCD_DIR", self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            // Apart from the test's process group (a ^C reaches the
            // watcher through its closed stdin instead).
            .process_group(0);
        if let Some(tls) = &self.spec.tls {
            cmd.arg("--cert-file")
                .arg(tls.certs.join("server.crt"))
                .arg("--key-file")
                .arg(tls.certs.join("server.key"));
            if tls.client_cert_auth {
                cmd.arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(tls.certs.join("ca.crt"));
            }
        }
        cmd.args(&self.spec.flags);
        // etcd takes any flag from an `ETCD_<FLAG>` variable too: none of
        // the test environment's may change the member.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        if let Some(arch) = super::unsupported_arch() {
            cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(format!("cannot start {}: {e}", etcd.display())))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = BufReader::new(stdout).read_line(&mut line);
        let Ok(pid) = line.trim().parse() else {
            // Stop whatever started, keeping the directory (a line first).
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"kill\n");
            }
            let _ = child.wait();
            return Err(failed(format!("no pid from the etcd watcher: {line:?}")));
        };
        self.pid = pid;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Waits until the member serves: `/health` says `true`. A cluster
    /// member when too few of the other members answer on their peer ports
    /// for a quorum: until it has started (its own peer port answers), as
    /// it cannot serve before enough of them are back. Kills the member
    /// (keeping its directory) and says why when it exits or times out.
    fn wait_until_serving(&mut self) -> Result<(), NotServing> {
        let started = Instant::now();
        loop {
            let exited = !self.is_running();
            if !exited
                && !self.spec.peers.is_empty()
                && peer_answers(self.spec.peer_port, POLL_TIMEOUT)
                && !self.quorum_reachable()
            {
                return Ok(());
            }
            if self.healthy_within(POLL_TIMEOUT) {
                return Ok(());
            }
            if exited || started.elapsed() > START_TIMEOUT {
                let why = if exited {
                    "it exited".to_owned()
                } else {
                    format!("not after {START_TIMEOUT:?} (status: {:?})", self.status())
                };
                self.kill();
                return Err(NotServing {
                    why: format!(
                        "etcd on port {} did not serve: {why}; the end of its log ({}):\n{}",
                        self.spec.port,
                        self.log_path().display(),
                        self.log_tail(),
                    ),
                    exited,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether this member and the other members whose peer ports answer
    /// make a quorum of the cluster.
    fn quorum_reachable(&self) -> bool {
        let members = self.spec.peers.len() + 1;
        let up = 1 + self
            .spec
            .peers
            .iter()
            .filter(|&&peer| peer_answers(peer, POLL_TIMEOUT))
            .count();
        up > members / 2
    }

    /// The member's port for clients, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.spec.port
    }

    /// The member's port for the other members of its cluster, on
    /// 127.0.0.1.
    pub fn peer_port(&self) -> u16 {
        self.spec.peer_port
    }

    /// `127.0.0.1:PORT`, the member's endpoint for clients.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.spec.port)
    }

    /// `127.0.0.1:PORT`, the member's TLS endpoint for clients, when it was
    /// started with one ([`EtcdServer::start_tls`]).
    pub fn tls_endpoint(&self) -> Option<String> {
        self.spec
            .tls
            .as_ref()
            .map(|tls| format!("127.0.0.1:{}", tls.port))
    }

    /// `etcd://127.0.0.1:PORT`, the member as a store URL.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }

    /// The directory the member runs in: `data/` and `log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The member's log so far (every start's, each after a
    /// `lockguard-etcd: starting etcd #N` line).
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

    /// Why the member's last start ended, from its log: the lines of that
    /// start at level error or worse and any etcd wrote outside its JSON
    /// lines (a Go panic), the last few of them; else its last lines.
    pub(super) fn exit_cause(&self) -> String {
        let log = self.log();
        let start = log.rfind("lockguard-etcd: starting etcd #").unwrap_or(0);
        let lines: Vec<&str> = log[start..].lines().skip(1).collect();
        let telling: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| {
                !l.starts_with('{')
                    || ["\"error\"", "\"fatal\"", "\"panic\"", "\"dpanic\""]
                        .iter()
                        .any(|level| l.contains(&format!("\"level\":{level}")))
            })
            .collect();
        let chosen = if telling.is_empty() { &lines } else { &telling };
        let from = chosen.len().saturating_sub(5);
        // A fatal line carries a whole stack trace.
        let cut = |l: &&str| match l.char_indices().nth(400) {
            Some((at, _)) => format!("{}…", &l[..at]),
            None => (*l).to_owned(),
        };
        chosen[from..]
            .iter()
            .map(cut)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The etcd process's id, while started (and not killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|_| self.pid)
    }

    /// Whether the etcd process is alive: started, not killed, and not
    /// exited on its own. A paused member is running.
    pub fn is_running(&self) -> bool {
        self.pid().is_some_and(lockguard_testing::process_alive)
    }

    /// Whether the member is paused ([`EtcdServer::pause`]).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Freezes the member with SIGSTOP: connections stay open (and new ones
    /// are accepted by the kernel), nothing is answered, the other members
    /// and clients see it go silent. Returns once every thread of the
    /// process has stopped ([`freeze`](lockguard_testing::freeze)).
    ///
    /// # Panics
    ///
    /// When the threads have not all stopped within 5 s.
    pub fn pause(&mut self) {
        let Some(pid) = self.pid() else {
            return;
        };
        lockguard_testing::freeze(pid);
        self.paused = true;
    }

    /// Resumes a paused member with SIGCONT.
    pub fn resume(&mut self) {
        if let Some(pid) = self.pid() {
            super::signal(pid, "CONT");
        }
        self.paused = false;
    }

    /// Kills the member with SIGKILL, as a crash would, and waits for it to
    /// exit. Its directory (and data) stays for [`EtcdServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // A line, not just the end of the pipe: keep the directory.
            let _ = stdin.write_all(b"kill\n");
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Kills the member (when running) and starts it again on the same
    /// ports and data directory, so its data survives; returns once it
    /// serves again. A cluster member serves once it is back in a quorum,
    /// which needs enough of the other members running: when too few of
    /// them answer, this returns once the member has started, and it serves
    /// when enough of them are back (to restart several killed members at
    /// once, see [`EtcdCluster::restart_members`](super::EtcdCluster::restart_members)).
    ///
    /// # Panics
    ///
    /// When it does not serve within 30 s; the message holds the tail of
    /// its log.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_again();
        if let Err(e) = self.wait_until_serving() {
            panic!("restart failed: {}", e.why);
        }
    }

    /// Starts the killed member again, without waiting for it to serve.
    pub(super) fn spawn_again(&mut self) {
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e.why,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("restart failed: {last}");
    }

    /// Sends `method path` to the member's client port over HTTP/1.0, with
    /// `body` as JSON when given (etcd's gateway takes its v3 API as
    /// `POST /v3/…` with a JSON body), and returns the whole answer.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::TimedOut`] when the exchange takes longer than
    /// `timeout`: a paused member, or a cluster member without a quorum,
    /// accepts the connection and never answers. Another error when the
    /// connection is refused (a killed member) or the answer is not HTTP.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        timeout: Duration,
    ) -> io::Result<HttpResponse> {
        http::request(self.spec.port, method, path, body, timeout)
    }

    /// Whether the member serves: `GET /health` answers
    /// `{"health":"true"}` within 1 s (it has a leader, and a read through
    /// the quorum succeeded).
    pub fn is_healthy(&self) -> bool {
        self.healthy_within(PROBE_TIMEOUT)
    }

    /// Whether `GET /health` answers `{"health":"true"}` within `timeout`.
    pub(super) fn healthy_within(&self, timeout: Duration) -> bool {
        self.request("GET", "/health", None, timeout)
            .is_ok_and(|r| r.status == 200 && http::json_string(&r.body, "health") == Some("true"))
    }

    /// What `POST /v3/maintenance/status` says: the member's id and its
    /// leader's. `None` when the member does not answer within 1 s (killed,
    /// paused, or a cluster member that has not yet been in a quorum since
    /// it started).
    pub fn status(&self) -> Option<MemberStatus> {
        self.status_within(PROBE_TIMEOUT)
    }

    /// What `POST /v3/maintenance/status` says within `timeout`.
    pub(super) fn status_within(&self, timeout: Duration) -> Option<MemberStatus> {
        let response = self
            .request("POST", "/v3/maintenance/status", Some("{}"), timeout)
            .ok()?;
        MemberStatus::parse(&response.body)
    }

    /// Whether the member says it leads its cluster (its status's leader is
    /// itself). A member alone leads once it serves.
    pub fn is_leader(&self) -> bool {
        self.status().is_some_and(|s| s.is_leader())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether the member with this peer port answers `GET /version` there
/// within `timeout`: it has started (a member serves its peers before it
/// has a quorum).
fn peer_answers(peer_port: u16, timeout: Duration) -> bool {
    http::request(peer_port, "GET", "/version", None, timeout).is_ok_and(|r| r.status == 200)
}

impl ServerProcess for EtcdServer {
    fn pause(&mut self) {
        EtcdServer::pause(self);
    }

    fn resume(&mut self) {
        EtcdServer::resume(self);
    }

    fn kill(&mut self) {
        EtcdServer::kill(self);
    }

    fn restart(&mut self) {
        EtcdServer::restart(self);
    }

    fn name(&self) -> String {
        format!("etcd:{}", self.port())
    }
}
