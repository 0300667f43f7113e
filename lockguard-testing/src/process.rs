//! Processes the fault tests disturb: a store's server ([`ServerProcess`],
//! one trait over every harness) and a client process ([`ChildProcess`],
//! the test binary run again).

use std::io::{BufRead as _, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{MariaDbServer, PostgresServer, RedisServer, ZooKeeperServer};

/// A store's server that a fault test freezes and resumes, kills and
/// starts again, whatever the store: what the kit's
/// [`faults`](crate::faults) scenarios and the history checker need of a
/// server.
///
/// A store crate outside lockguard implements it for its own server
/// harness to run the same scenarios.
pub trait ServerProcess: Send {
    /// Freezes the server (SIGSTOP): connections stay open, nothing is
    /// answered, its clock keeps running.
    fn pause(&mut self);

    /// Resumes a paused server (SIGCONT).
    fn resume(&mut self);

    /// Kills the server (SIGKILL), as a crash would.
    fn kill(&mut self);

    /// Starts a killed server again on its port, on whatever its
    /// persistence kept.
    fn restart(&mut self);

    /// Closes every client connection from the server side, as an operator
    /// or a proxy might; an error when the server offers no such command.
    ///
    /// # Errors
    ///
    /// When the server cannot do it, or the command failed.
    fn kill_connections(&mut self) -> Result<(), String> {
        Err(format!(
            "{} cannot close its clients' connections",
            self.name()
        ))
    }

    /// How fault logs name it: the store and the port, `redis:6379`.
    fn name(&self) -> String;

    /// Freezes the server for `length`, then resumes it (blocking the
    /// calling thread meanwhile).
    fn pause_for(&mut self, length: Duration) {
        self.pause();
        std::thread::sleep(length);
        self.resume();
    }

    /// Kills the server, keeps it down for `down`, and starts it again
    /// (blocking the calling thread meanwhile).
    fn restart_after(&mut self, down: Duration) {
        self.kill();
        std::thread::sleep(down);
        self.restart();
    }
}

impl ServerProcess for RedisServer {
    fn pause(&mut self) {
        RedisServer::pause(self);
    }

    fn resume(&mut self) {
        RedisServer::resume(self);
    }

    fn kill(&mut self) {
        RedisServer::kill(self);
    }

    fn restart(&mut self) {
        RedisServer::restart(self);
    }

    /// `CLIENT KILL` of the command and the pub/sub connections, never the
    /// one that asks.
    fn kill_connections(&mut self) -> Result<(), String> {
        let mut conn = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        for kind in ["normal", "pubsub"] {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg(kind)
                .query::<i64>(&mut conn)
                .map_err(|e| format!("CLIENT KILL TYPE {kind}: {e}"))?;
        }
        Ok(())
    }

    fn name(&self) -> String {
        format!("redis:{}", self.port())
    }
}

impl ServerProcess for PostgresServer {
    fn pause(&mut self) {
        PostgresServer::pause(self);
    }

    fn resume(&mut self) {
        PostgresServer::resume(self);
    }

    fn kill(&mut self) {
        PostgresServer::kill(self);
    }

    fn restart(&mut self) {
        PostgresServer::restart(self);
    }

    /// `pg_terminate_backend` of every client backend but the asking one.
    fn kill_connections(&mut self) -> Result<(), String> {
        self.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        );
        Ok(())
    }

    fn name(&self) -> String {
        format!("postgres:{}", self.port())
    }
}

impl ServerProcess for MariaDbServer {
    fn pause(&mut self) {
        MariaDbServer::pause(self);
    }

    fn resume(&mut self) {
        MariaDbServer::resume(self);
    }

    fn kill(&mut self) {
        MariaDbServer::kill(self);
    }

    fn restart(&mut self) {
        MariaDbServer::restart(self);
    }

    /// `KILL CONNECTION USER` of the test user.
    fn kill_connections(&mut self) -> Result<(), String> {
        MariaDbServer::kill_connections(self);
        Ok(())
    }

    fn name(&self) -> String {
        format!("mysql:{}", self.port())
    }
}

impl ServerProcess for ZooKeeperServer {
    fn pause(&mut self) {
        ZooKeeperServer::pause(self);
    }

    fn resume(&mut self) {
        ZooKeeperServer::resume(self);
    }

    fn kill(&mut self) {
        ZooKeeperServer::kill(self);
    }

    fn restart(&mut self) {
        ZooKeeperServer::restart(self);
    }

    fn name(&self) -> String {
        format!("zookeeper:{}", self.port())
    }
}

/// Sends `sig` to the process `pid`, one the harness started: whether it
/// was sent (a process that already exited is not there to signal).
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: sending a signal has no memory-safety requirements.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// How long [`freeze`] waits for every thread of a process to stop.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// Freezes the process `pid` with SIGSTOP and returns once every one of
/// its threads has stopped: `false` when there was no such process to
/// signal (it already exited).
///
/// `kill(2)` returns before the process stops: the signal reaches one
/// thread, which stops the others once it is scheduled, and on a busy
/// machine the rest go on running for milliseconds meanwhile, answering
/// requests and taking grants that a test then counts as slept through.
/// Every pause of the kit's harnesses and of [`ChildProcess`] goes through
/// here; a harness of a store outside lockguard should too.
///
/// # Panics
///
/// When the threads have not all stopped within 5 s.
pub fn freeze(pid: u32) -> bool {
    if !signal(pid, libc::SIGSTOP) {
        return false;
    }
    let started = Instant::now();
    while !all_threads_stopped(pid) {
        assert!(
            started.elapsed() < FREEZE_TIMEOUT,
            "process {pid} did not stop within {FREEZE_TIMEOUT:?} of SIGSTOP"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// Whether the process `pid` is alive: it exists and is not a zombie (a
/// killed or exited server stays a zombie until whoever started it reaps
/// it).
pub fn process_alive(pid: u32) -> bool {
    let state = proc_state(&format!("/proc/{pid}/stat"));
    !matches!(state.as_deref(), None | Some("Z" | "X" | "x"))
}

/// Whether every thread of the process `pid` is stopped (or gone).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let stat = task.path().join("stat");
        matches!(
            proc_state(&stat.to_string_lossy()).as_deref(),
            None | Some("T" | "t" | "Z" | "X" | "x")
        )
    })
}

/// The state letter of a process or thread from its `/proc/…/stat`; `None`
/// when it is gone.
fn proc_state(stat_path: &str) -> Option<String> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // `pid (comm) state ...`; comm may hold spaces.
    let at = stat.rfind(')')?;
    stat[at + 1..].split_whitespace().next().map(str::to_owned)
}

/// The running test binary started again as one of its ignored tests, so
/// that a test has a client in a process of its own to kill. Its standard
/// output is read line by line; it is killed and reaped on drop, whatever
/// way the test ends.
///
/// The child runs `test` (its path inside the test binary, without the
/// crate's name) with `env` set; that test checks the variable, and does
/// nothing without it.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildProcess {
    /// Starts the child.
    ///
    /// # Panics
    ///
    /// When the test binary cannot be started again.
    pub fn spawn(test: &str, env: (&str, &str)) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", test, "--ignored", "--nocapture", "--quiet"])
            .env(env.0, env.1)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the child process");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Self { child, lines }
    }

    /// The child's next line that starts with `word`.
    ///
    /// # Panics
    ///
    /// When the child ends without printing one.
    pub fn expect(&mut self, word: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.expect("the child's output");
            if line.starts_with(word) {
                return line;
            }
        }
        panic!("the child ended without saying {word:?}");
    }

    /// Waits for the child to end by itself: its exit status.
    ///
    /// # Panics
    ///
    /// When it cannot be waited for.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait for the child")
    }

    /// Freezes the child with SIGSTOP: its connections stay open, it reads
    /// and answers nothing, its clock keeps running. Returns once every
    /// thread of it has stopped ([`freeze`]).
    ///
    /// # Panics
    ///
    /// When the signal cannot be sent (the child was reaped), or its
    /// threads do not stop.
    pub fn pause(&mut self) {
        // Not reaped while `self` lives: the pid is still the child's.
        let pid = self.child.id();
        assert!(freeze(pid), "kill({pid}, SIGSTOP) failed");
    }

    /// Resumes a paused child with SIGCONT.
    ///
    /// # Panics
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        // Not reaped while `self` lives: the pid is still the child's.
        let pid = self.child.id();
        assert!(signal(pid, sig), "kill({pid}, {sig}) failed");
    }

    /// SIGKILLs the child and checks it was still running.
    ///
    /// # Panics
    ///
    /// When the child had already ended.
    pub fn kill(&mut self) {
        use std::os::unix::process::ExitStatusExt as _;
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "the child ended before it was killed: {status}"
        );
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_running() {
        assert!(process_alive(std::process::id()));
        assert!(!all_threads_stopped(std::process::id()));
    }

    #[test]
    fn a_frozen_process_has_every_thread_stopped_until_resumed() {
        // `sleep` has one thread; the check is on what `freeze` waits for.
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        assert!(freeze(pid));
        assert!(all_threads_stopped(pid) && process_alive(pid));
        assert!(signal(pid, libc::SIGCONT));
        let started = Instant::now();
        while all_threads_stopped(pid) {
            assert!(started.elapsed() < FREEZE_TIMEOUT, "never resumed");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        assert!(!process_alive(pid));
        assert!(!freeze(pid), "a reaped process cannot be frozen");
    }
}
