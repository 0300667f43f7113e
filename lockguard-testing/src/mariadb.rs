//! Real MariaDB servers for tests: `mariadb-install-db` and `mariadbd` in a
//! temporary directory on a free loopback port.
//!
//! Each server gets a user `lockguard` (password `lockguard`) with every
//! privilege, so [`MariaDbServer::url`] is a realistic
//! `mysql://user:password@host:port/database` URL, and a database
//! `lockguard` to connect to. The superuser `root` is reached over the
//! server's unix socket only ([`MariaDbServer::sql`]).
//!
//! As [`PostgresServer`](crate::PostgresServer), each server runs under a
//! small shell that holds the read end of a pipe whose write end only this
//! process has: when the test process exits, for whatever reason, the pipe
//! closes and the shell stops the server and removes its directory. So even
//! the server shared by a whole test binary ([`MariaDbServer::shared`]),
//! which is never dropped, does not outlive it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `mariadb-install-db` may take to bootstrap a data directory
/// (a few seconds on a loaded two-core machine).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The user tests connect as, and its password.
const USER: &str = "lockguard";
const PASSWORD: &str = "lockguard";
/// The database tests connect to.
const DATABASE: &str = "lockguard";

/// The shell each server runs under: starts the server, says its pid, and
/// kills it (and removes `$LOCKGUARD_MARIADB_REMOVE`, when set) once its
/// stdin closes.
const WATCHER: &str = r#"
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
read -r _ || true
kill -CONT "$pid" 2>/dev/null
kill -KILL "$pid" 2>/dev/null
wait "$pid"
if [ -n "$LOCKGUARD_MARIADB_REMOVE" ]; then rm -rf "$LOCKGUARD_MARIADB_REMOVE"; fi
"#;

/// A MariaDB server owned by a test.
#[derive(Debug)]
pub struct MariaDbServer {
    child: Option<Child>,
    /// The write end of the watcher's pipe: closing it stops the server.
    stdin: Option<ChildStdin>,
    pid: u32,
    port: u16,
    dir: PathBuf,
    /// Removed on drop (the shared server's directory is removed by its
    /// watcher instead).
    _owned_dir: Option<tempfile::TempDir>,
    paused: bool,
    /// Options given to `mariadbd` after the harness's own (which they
    /// override).
    args: Vec<String>,
}

/// Finds a MariaDB program: `$MARIADB_BIN/NAME` when `MARIADB_BIN` is set,
/// else on `PATH`, else in `/usr/sbin` or `/usr/bin`.
///
/// # Panics
///
/// When it is not found, with a message saying how to get it.
pub fn mariadb_program(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("MARIADB_BIN") {
        return PathBuf::from(dir).join(name);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found (PATH, /usr/sbin, /usr/bin): the MySQL/MariaDB tests need a \
                 real server. Run `bash scripts/test.sh` (it installs mariadb-server with \
                 apt-get), or install it yourself (`apt-get install mariadb-server`), or point \
                 MARIADB_BIN at the directory holding mariadbd and mariadb-install-db"
            )
        })
}

/// The user the server runs as (`mariadbd --user`): the current one.
fn current_user() -> String {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return "root".to_owned();
    }
    std::env::var("USER").unwrap_or_else(|_| {
        let out = Command::new("id")
            .arg("-un")
            .output()
            .expect("cannot run id");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    })
}

/// Servers are created one at a time: `mariadb-install-db` is the slow
/// part, and two at once on two cores only make both slower.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl MariaDbServer {
    /// Creates a data directory in a new temporary directory and starts a
    /// server on a free port; returns once it accepts connections.
    ///
    /// # Panics
    ///
    /// When MariaDB is missing or does not come up; the message holds the
    /// server's log.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with `args` given to `mariadbd` after
    /// the harness's own options, which they override (for example
    /// `["--log-bin", "--binlog-format=STATEMENT"]` for a server that
    /// writes a binary log; the harness's default is `--skip-log-bin`).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockguard-mariadb-")
            .tempdir()
            .expect("cannot create a temporary directory for mariadb");
        let path = dir.path().to_owned();
        Self::create(path, Some(dir), args)
    }

    /// One server for the whole test process, started on first use, with
    /// tests kept apart by table prefix or database. It stops when the
    /// process exits.
    pub fn shared() -> &'static MariaDbServer {
        static SHARED: OnceLock<MariaDbServer> = OnceLock::new();
        SHARED.get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("lockguard-mariadb-shared-")
                .tempdir()
                .expect("cannot create a temporary directory for mariadb")
                .keep();
            Self::create(dir, None, &[])
        })
    }

    fn create(dir: PathBuf, owned_dir: Option<tempfile::TempDir>, args: &[&str]) -> Self {
        let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        let install = mariadb_program("mariadb-install-db");
        // Temporary tables of its own: in a shared /tmp, another server
        // (one of an earlier test binary, shutting down as this one
        // bootstraps) was seen to take the bootstrap's temporary table.
        std::fs::create_dir_all(dir.join("tmp")).expect("cannot create mariadb's tmpdir");
        let mut cmd = Command::new(&install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--user={}", current_user()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdin(Stdio::null());
        // Into a file, and bounded: on a full disk MariaDB waits for space
        // forever, and the test would hang instead of failing.
        let install_log = dir.join("install.log");
        let log = std::fs::File::create(&install_log).expect("cannot create mariadb's install log");
        cmd.stdout(log.try_clone().expect("a second handle on the install log"))
            .stderr(log);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", install.display()));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() < INSTALL_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let said = std::fs::read_to_string(&install_log).unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => panic!("{} failed ({s}): {said}", install.display()),
            None => panic!(
                "{} did not finish within {INSTALL_TIMEOUT:?} (a full disk makes MariaDB wait for space): {said}",
                install.display()
            ),
        }
        let mut server = Self {
            child: None,
            stdin: None,
            pid: 0,
            port: 0,
            dir,
            _owned_dir: owned_dir,
            paused: false,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        let mut last_error = String::new();
        // The probed port may be taken between the probe and the bind.
        for _ in 0..5 {
            server.port = crate::free_port();
            match server.spawn() {
                Ok(()) => {
                    server.sql(&format!(
                        "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; \
                         GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%'; \
                         CREATE DATABASE {DATABASE};"
                    ));
                    return server;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("mariadb.log")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("mariadb.sock")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mariadbd = mariadb_program("mariadbd");
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open the mariadb log: {e}"))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHER)
            .arg("sh")
            .arg(&mariadbd)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mariadb.pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--user={}", current_user()))
            .arg("--skip-name-resolve")
            .arg("--skip-log-bin")
            .arg("--max-connections=500")
            // A test server: speed over durability. Commits reach the OS at
            // once (flush_log_at_trx_commit=2), so a killed server keeps
            // every transaction it confirmed; only a machine failure loses
            // them.
            .arg("--innodb-flush-log-at-trx-commit=2")
            .arg("--innodb-doublewrite=0")
            .arg("--innodb-buffer-pool-size=32M")
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            // Apart from the test's process group (a ^C reaches the
            // watcher through its closed stdin instead).
            .process_group(0);
        if self._owned_dir.is_none() {
            cmd.env("LOCKGUARD_MARIADB_REMOVE", &self.dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", mariadbd.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("no pid from the mariadb watcher: {e}"))?;
        self.pid = line
            .trim()
            .parse()
            .map_err(|_| format!("no pid from the mariadb watcher: {line:?}"))?;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        self.paused = false;
        let started = Instant::now();
        loop {
            if self.answers() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > START_TIMEOUT {
                self.kill();
                return Err(format!(
                    "mariadbd on port {} did not come up (exit: {exited:?}); its log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server answers a query on its socket.
    fn answers(&self) -> bool {
        Command::new(mariadb_program("mariadb"))
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-e", "SELECT 1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://lockguard:lockguard@127.0.0.1:PORT/lockguard`.
    pub fn url(&self) -> String {
        self.url_for(DATABASE)
    }

    /// Like [`url`](Self::url), for another database (create it first
    /// with [`sql`](Self::sql)).
    pub fn url_for(&self, database: &str) -> String {
        format!(
            "mysql://{USER}:{PASSWORD}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// `mysql://USER:PASSWORD@127.0.0.1:PORT/DATABASE`: the URL of a user a
    /// test made itself (with [`sql`](Self::sql)), a least-privileged one
    /// say.
    pub fn url_as(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "mysql://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The server's error log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The directory holding the server's data, socket and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the server is running (and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|_| self.pid)
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid() {
            // One that already exited is not an error.
            crate::process::signal(pid, sig);
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is
    /// answered, its clock keeps running.
    /// Returns once every thread has stopped ([`freeze`](crate::freeze)).
    pub fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            // One that already exited is not an error.
            crate::process::freeze(pid);
        }
        self.paused = true;
    }

    /// Resumes a paused server with SIGCONT.
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for its
    /// watcher to exit.
    pub fn kill(&mut self) {
        if self.child.is_some() {
            self.signal(libc::SIGCONT);
            self.signal(libc::SIGKILL);
        }
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.paused = false;
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
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("restart failed: {last}");
    }

    /// Closes every connection of the test user from the server side, as a
    /// DBA or a proxy might (`KILL CONNECTION USER`).
    pub fn kill_connections(&self) {
        self.sql(&format!("KILL CONNECTION USER '{USER}'"));
    }

    /// Runs SQL as `root` over the server's socket with the `mariadb`
    /// client, returning its output (tab-separated, no column names); for
    /// tests that inspect or disturb the server from outside the client
    /// under test.
    ///
    /// # Panics
    ///
    /// When the statement fails.
    pub fn sql(&self, sql: &str) -> String {
        let mut child = Command::new(mariadb_program("mariadb"))
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "--batch", "--skip-column-names", "--comments"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run mariadb");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(sql.as_bytes())
            .expect("write to mariadb");
        let out = child.wait_with_output().expect("mariadb");
        assert!(
            out.status.success(),
            "mariadb failed on {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.kill();
    }
}
