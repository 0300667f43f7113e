//! Real PostgreSQL servers for tests: `initdb` and `postgres` in a
//! temporary directory on a free loopback port.
//!
//! PostgreSQL refuses to run as root, so under root the server runs as the
//! `postgres` user (Debian's package creates it), or as `nobody`.
//!
//! Each server runs under a small shell that holds the read end of a pipe
//! whose write end only this process has: when the test process exits, for
//! whatever reason, the pipe closes and the shell stops the server and
//! removes its directory. So even the server shared by a whole test binary
//! ([`PostgresServer::shared`]), which is never dropped, does not outlive it.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The shell each server runs under: starts the server, says its pid, and
/// stops it (and removes `$LOCKGUARD_PG_REMOVE`, when set) once its stdin
/// closes.
const WATCHER: &str = r#"
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
read -r _ || true
kill -QUIT "$pid" 2>/dev/null
kill -CONT "$pid" 2>/dev/null
wait "$pid"
if [ -n "$LOCKGUARD_PG_REMOVE" ]; then rm -rf "$LOCKGUARD_PG_REMOVE"; fi
"#;

/// How long [`PostgresServer::kill`] waits for the killed processes to be
/// gone.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL server owned by a test.
#[derive(Debug)]
pub struct PostgresServer {
    child: Option<Child>,
    /// The write end of the watcher's pipe: closing it stops the server.
    stdin: Option<ChildStdin>,
    pid: u32,
    port: u16,
    dir: PathBuf,
    /// Removed on drop (the shared server's directory is removed by its
    /// watcher instead).
    owned_dir: Option<tempfile::TempDir>,
    user: Option<(u32, u32)>,
    paused: bool,
    /// Whether it syncs its writes to disk (`fsync`), as a production
    /// server does; test servers do not, for speed.
    durable: bool,
    /// Serving TLS only, with the certificate and key in the data
    /// directory (`server.crt`, `server.key`).
    tls: bool,
    /// How many times the server was started, to tell this start's log
    /// lines from an earlier one's.
    starts: u32,
}

/// The directory holding `initdb` and `postgres`: `$PG_BIN` when set, else
/// the directory of an `initdb` on `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin` (where Debian's package puts them).
///
/// # Panics
///
/// When none is found, with a message saying how to get one.
pub fn postgres_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return PathBuf::from(dir);
    }
    // An initdb on PATH may be a link into the directory holding the rest
    // (pg_ctl, psql): follow it.
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("initdb"))
            .find(|p| p.is_file())
    });
    if let Some(initdb) = on_path {
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent() {
            return dir.to_owned();
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's initdb not found (PATH, /usr/lib/postgresql/*/bin): the PostgreSQL \
             tests need a real server. Run `bash scripts/test.sh` (it installs postgresql \
             with apt-get), or install it yourself (`apt-get install postgresql`), or point \
             PG_BIN at the directory holding initdb and postgres"
        )
    })
}

/// The user and group to run the server as: `None` when not root.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    for name in ["postgres", "nobody"] {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: getpwnam reads a static record; we copy the two ids out
        // before anything else could call it (tests start servers one at a
        // time under the lock below).
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        if !pw.is_null() {
            // SAFETY: pw is a valid record returned by getpwnam.
            let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
            return Some((uid, gid));
        }
    }
    panic!("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

fn chown(path: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot hand {} to uid {uid}: {e}", path.display()));
}

/// Servers are created one at a time: `initdb` is the slow part, and two
/// at once on two cores only make both slower.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl PostgresServer {
    /// Creates a database cluster in a new temporary directory and starts
    /// a server on a free port; returns once it accepts connections.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is missing or does not come up; the message holds
    /// the server's log.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-pg-")
            .tempdir()
            .expect("cannot create a temporary directory for postgres");
        let path = dir.path().to_owned();
        Self::create(path, Some(dir))
    }

    /// As [`start`](Self::start), with `fsync` on as in production (test
    /// servers run without it, for speed): for tests of what a production
    /// server reports about itself.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_durable() -> Self {
        let mut server = Self::start();
        server.durable = true;
        server.restart();
        server
    }

    /// As [`start`](Self::start), serving TLS only, with the server
    /// certificate and key that [`make_test_certificates`](crate::make_test_certificates)
    /// made in `certs` (signed by its `ca.crt`): a connection without TLS
    /// is refused.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), and when the files cannot be copied.
    pub fn start_tls(certs: &Path) -> Self {
        let mut server = Self::start();
        let data = server.dir.join("data");
        for file in ["server.crt", "server.key"] {
            let to = data.join(file);
            std::fs::copy(certs.join(file), &to)
                .unwrap_or_else(|e| panic!("cannot copy {file}: {e}"));
            // PostgreSQL refuses a key others can read.
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap_or_else(|e| panic!("cannot set the mode of {file}: {e}"));
            if let Some(u) = server.user {
                chown(&to, u);
            }
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
        )
        .expect("cannot write pg_hba.conf");
        server.tls = true;
        server.restart();
        server
    }

    /// One server for the whole test process, started on first use, with
    /// tests kept apart by schema (see the crate's test support). It stops
    /// when the process exits.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: OnceLock<PostgresServer> = OnceLock::new();
        SHARED.get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("lockguard-pg-shared-")
                .tempdir()
                .expect("cannot create a temporary directory for postgres")
                .keep();
            Self::create(dir, None)
        })
    }

    fn create(dir: PathBuf, owned_dir: Option<tempfile::TempDir>) -> Self {
        Self::create_with(dir, owned_dir, |bin, data| {
            let mut initdb = Command::new(bin.join("initdb"));
            initdb.arg("-D").arg(data).args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]);
            initdb
        })
    }

    /// A hot standby of this server, streaming its WAL asynchronously (as
    /// PostgreSQL replicates by default): a copy taken with
    /// `pg_basebackup`, started on a port of its own. Stop it, and it
    /// misses what the primary does meanwhile; [`restart`](Self::restart)
    /// it after the primary is gone and [`promote`](Self::promote) it, and
    /// it plays a failover to a standby that had not seen the latest
    /// writes.
    ///
    /// # Panics
    ///
    /// When the copy fails or the standby does not come up.
    pub fn start_standby(&self) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-pg-standby-")
            .tempdir()
            .expect("cannot create a temporary directory for postgres");
        let path = dir.path().to_owned();
        let port = self.port.to_string();
        Self::create_with(path, Some(dir), |bin, data| {
            let mut copy = Command::new(bin.join("pg_basebackup"));
            copy.arg("-D")
                .arg(data)
                .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
                .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
            copy
        })
    }

    /// Makes a standby the primary (`pg_promote()`), returning once it
    /// takes writes.
    ///
    /// # Panics
    ///
    /// When it does not.
    pub fn promote(&self) {
        let promoted = self.psql("SELECT pg_promote(true, 60)");
        assert_eq!(promoted, "t", "the standby was not promoted");
    }

    /// Creates a cluster in `dir` with `make` (given the binaries' directory
    /// and the data directory; run as the server's user) and starts it.
    fn create_with(
        dir: PathBuf,
        owned_dir: Option<tempfile::TempDir>,
        make: impl FnOnce(&Path, &Path) -> Command,
    ) -> Self {
        let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        let user = server_user();
        if let Some(u) = user {
            chown(&dir, u);
        }
        let bin = postgres_bin_dir();
        let mut cmd = make(&bin, &dir.join("data"));
        cmd.stdin(Stdio::null());
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
        assert!(
            out.status.success(),
            "{:?} failed: {}{}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = Self {
            child: None,
            stdin: None,
            pid: 0,
            port: 0,
            dir,
            owned_dir,
            user,
            paused: false,
            durable: false,
            tls: false,
            starts: 0,
        };
        let mut last_error = String::new();
        // The probed port may be taken between the probe and the bind.
        for _ in 0..5 {
            server.port = crate::free_port();
            match server.spawn(START_TIMEOUT) {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// Starts the server, and waits up to `timeout` until it says it is
    /// ready.
    fn spawn(&mut self, timeout: Duration) -> Result<(), String> {
        let postgres = postgres_bin_dir().join("postgres");
        self.starts += 1;
        let mut log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open the postgres log: {e}"))?;
        writeln!(log, "{}", self.start_marker())
            .map_err(|e| format!("cannot write the postgres log: {e}"))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHER)
            .arg("sh")
            .arg(&postgres)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            // A test server: speed over durability.
            // (fsync off loses nothing when processes are killed, only when
            // the machine fails; commits stay synchronous, so a killed
            // server keeps every transaction it confirmed.)
            .args([
                "-c",
                if self.durable {
                    "fsync=on"
                } else {
                    "fsync=off"
                },
            ])
            .args([
                "-c",
                if self.durable {
                    "full_page_writes=on"
                } else {
                    "full_page_writes=off"
                },
            ])
            .args(["-c", "max_connections=500"])
            .args(if self.tls {
                &["-c", "ssl=on"][..]
            } else {
                &[][..]
            })
            .args(["-c", "shared_buffers=32MB"])
            // Dynamic shared memory in the data directory (`pg_dynshmem/`),
            // not in /dev/shm: a server killed by a test cannot remove its
            // segments, and in /dev/shm they would outlive the test.
            .args(["-c", "dynamic_shared_memory_type=mmap"])
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            // Apart from the test's process group (a ^C reaches the
            // watcher through its closed stdin instead).
            .process_group(0);
        if self.owned_dir.is_none() {
            cmd.env("LOCKGUARD_PG_REMOVE", &self.dir);
        }
        if let Some(u) = self.user {
            chown(&self.log_path(), u);
            cmd.uid(u.0).gid(u.1);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", postgres.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("no pid from the postgres watcher: {e}"))?;
        self.pid = line
            .trim()
            .parse()
            .map_err(|_| format!("no pid from the postgres watcher: {line:?}"))?;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        self.paused = false;
        let started = Instant::now();
        loop {
            if self.accepts_connections() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            // A postmaster that refused to start (a FATAL error) stays a
            // zombie until its watcher reaps it: told at once, not at the
            // timeout.
            let died = !crate::process::process_alive(self.pid);
            if exited.is_some() || died || started.elapsed() > timeout {
                // The postmaster's state (`R`, `S`, `D`, `T` stopped, ...)
                // before it is killed, to tell a stuck start from a slow one.
                let state = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                    .ok()
                    .and_then(|stat| {
                        let after = &stat[stat.rfind(')')? + 1..];
                        after.split_whitespace().next().map(str::to_owned)
                    });
                self.kill();
                return Err(format!(
                    "postgres on port {} did not come up within {:?} (exit: {exited:?}, \
                     postmaster state {state:?}); its log:\n{}",
                    self.port,
                    started.elapsed(),
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server said it is ready since it was last started.
    fn accepts_connections(&self) -> bool {
        let log = self.log();
        let this_start = log.rfind(&self.start_marker()).map_or("", |at| &log[at..]);
        // A standby is ready for read-only connections.
        this_start.contains("database system is ready to accept connections")
            || this_start.contains("database system is ready to accept read-only connections")
    }

    fn start_marker(&self) -> String {
        format!("lockguard-testing: starting postgres #{}", self.starts)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` (trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL of the server's unix socket (in its directory):
    /// `postgresql://postgres@/postgres?host=DIR&port=PORT`.
    pub fn socket_url(&self) -> String {
        format!(
            "postgresql://postgres@/postgres?host={}&port={}",
            self.dir.display(),
            self.port
        )
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Whether the server is running (and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The postmaster's process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|_| self.pid)
    }

    /// Sends `sig` to the postmaster and every process it started (each
    /// backend is a process group of its own, so a group signal would
    /// miss them).
    fn signal_all(&self, sig: libc::c_int) {
        for p in self.processes() {
            // One that already exited is not an error.
            crate::process::signal(p, sig);
        }
    }

    /// The postmaster and every process it started, while running.
    fn processes(&self) -> Vec<u32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![pid];
        pids.extend(children_of(pid));
        pids
    }

    /// Freezes the server and every backend with SIGSTOP: connections
    /// stay open, nothing is answered, its clock keeps running.
    /// Returns once every thread has stopped ([`freeze`](crate::freeze)).
    pub fn pause(&mut self) {
        for p in self.processes() {
            // One that already exited is not an error.
            crate::process::freeze(p);
        }
        self.paused = true;
    }

    /// Resumes a paused server with SIGCONT.
    pub fn resume(&mut self) {
        self.signal_all(libc::SIGCONT);
        self.paused = false;
    }

    /// Kills the server and every backend with SIGKILL, as a crash would,
    /// and waits for the watcher to exit and every one of them to be gone.
    pub fn kill(&mut self) {
        if let Some(pid) = self.pid() {
            // Stopped first, so that it starts no backend between the
            // listing of its children and their kill.
            crate::process::freeze(pid);
        }
        let killed = self.processes();
        for &p in &killed {
            // One that already exited is not an error.
            crate::process::signal(p, libc::SIGKILL);
        }
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.paused = false;
        // A backend still exiting keeps the server's shared memory
        // attached, and a server started on the same data refuses to start
        // beside it ("pre-existing shared memory block ... is still in
        // use"): wait for every one to be gone (or dead, not yet reaped).
        let started = Instant::now();
        while killed.iter().any(|&p| crate::process::process_alive(p))
            && started.elapsed() < KILL_TIMEOUT
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the server again on the same port, on the same data (after a
    /// kill: crash recovery).
    ///
    /// # Panics
    ///
    /// When it does not come up.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        for _ in 0..50 {
            // A start that is not ready within 10 s is killed and made
            // again (once, a start after a crash hung for 30 s in CI, and
            // the next came up at once); each failure is told on stderr.
            match self.spawn(Duration::from_secs(10)) {
                Ok(()) => return,
                Err(e) => {
                    eprintln!("lockguard-testing: restarting postgres: {e}");
                    last = e;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("restart failed: {last}");
    }

    /// Runs SQL through `psql` as the superuser, returning its output
    /// (unaligned, tuples only); for tests that inspect or disturb the
    /// server from outside the client under test.
    ///
    /// # Panics
    ///
    /// When `psql` fails.
    pub fn psql(&self, sql: &str) -> String {
        let mut child = Command::new(postgres_bin_dir().join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
            .args(["-p", &self.port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run psql");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(sql.as_bytes())
            .expect("write to psql");
        let out = child.wait_with_output().expect("psql");
        assert!(
            out.status.success(),
            "psql failed on {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// The processes whose parent is `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
    }
}
