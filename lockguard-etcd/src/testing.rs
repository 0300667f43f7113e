//! Real etcd servers for tests: one member ([`EtcdServer::start`]) or a
//! cluster of them ([`EtcdCluster::start`]), each an `etcd` process in a
//! temporary directory on free loopback ports.
//!
//! Tests see whether a member serves, and who leads, through the HTTP
//! gateway etcd 3.4 serves on its client port beside gRPC: `GET /health`
//! answers `{"health":"true"}` once the member has a leader and a quorum
//! read goes through ([`EtcdServer::is_healthy`]), and
//! `POST /v3/maintenance/status` says the member's id and its leader's
//! ([`EtcdServer::status`]). Plain HTTP/1.0 over a
//! [`TcpStream`](std::net::TcpStream) with short timeouts, no client crate.
//!
//! Every member runs with `--heartbeat-interval 50 --election-timeout 500`
//! (etcd's defaults are 100 and 1000): elections take about half a second,
//! and etcd's smallest lease TTL, `ceil(1.5 × election timeout)`, is 1 s
//! instead of 2 s, so a lease granted with a TTL of 1 s keeps it (etcd
//! raises a smaller TTL to its minimum without an error).
//!
//! Like the servers of `lockguard-testing`, each member runs under a small
//! shell that holds the read end of a pipe whose write end only this
//! process has: when the test process exits, for whatever reason, the pipe
//! closes and the shell kills the member and removes its directory. A
//! member logs (zap, JSON lines) to `<dir>/log`, which failed starts show.
//!
//! A missing `etcd` binary fails the test with a message saying how to
//! install it (`bash scripts/setup.sh`, or `apt-get install etcd-server`);
//! it is never a silent skip.
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use lockguard_etcd::testing::EtcdCluster;
//!
//! let mut cluster = EtcdCluster::start(3);
//! let leader = cluster.wait_for_leader(Duration::from_secs(5));
//! cluster.member_mut(leader).kill();
//! let next = cluster.wait_for_leader(Duration::from_secs(5));
//! assert_ne!(next, leader);
//! cluster.member_mut(leader).restart();
//! ```

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

mod cluster;
mod http;
mod server;

pub use cluster::EtcdCluster;
pub use http::{HttpResponse, MemberStatus};
pub use server::EtcdServer;

/// How long a member may take to serve after it was started (a cluster
/// member: to serve in a quorum).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a probe of a member ([`EtcdServer::is_healthy`],
/// [`EtcdServer::status`]) waits for a whole answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a probe waits inside a loop that waits for a member: a member
/// that serves answers in milliseconds, while one that has not been in a
/// quorum since it started accepts the connection and never answers.
const POLL_TIMEOUT: Duration = Duration::from_millis(250);

/// How many lines of a member's log a panic message shows.
const LOG_TAIL_LINES: usize = 60;

/// etcd's raft heartbeat, in milliseconds (its default is 100).
const HEARTBEAT_MS: u32 = 50;

/// etcd's election timeout, in milliseconds (its default is 1000): with it
/// the smallest lease TTL is 1 s.
const ELECTION_TIMEOUT_MS: u32 = 500;

/// The shell each member runs under: starts etcd, says its pid, and kills
/// it once its stdin closes. A line on stdin first (the harness's own kill)
/// keeps the directory for a restart; a bare end of file (the test process
/// is gone) removes `$LOCKGUARD_ETCD_DIR` too.
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
  rm -rf "$LOCKGUARD_ETCD_DIR"
fi
"#;

/// The `etcd` binary: `$LOCKGUARD_ETCD_BINARY` when set (and not empty),
/// else the one on `PATH` (Debian's `etcd-server` puts it in `/usr/bin`).
///
/// # Panics
///
/// When there is none, with a message saying how to get one.
pub fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("LOCKGUARD_ETCD_BINARY").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "etcd not found on PATH: the etcd tests need a real server (etcd 3.4 or later). \
             Run `bash scripts/setup.sh` (it installs etcd-server with apt-get), or install it \
             yourself (`apt-get install etcd-server`), or point LOCKGUARD_ETCD_BINARY at the \
             binary"
        )
    })
}

/// The value etcd wants in `ETCD_UNSUPPORTED_ARCH` to run on this machine:
/// its Go name for the architecture, for any but amd64 (etcd 3.4 refuses to
/// start elsewhere, arm64 included, unless the variable names it).
fn unsupported_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => None,
        "aarch64" => Some("arm64"),
        "powerpc64" => Some("ppc64le"),
        "x86" => Some("386"),
        other => Some(other),
    }
}

/// A loopback port that nobody listens on, handed out once per process (a
/// port probed twice could go to two members started side by side).
fn free_port() -> u16 {
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

/// A token for `--initial-cluster-token` that no other cluster started by
/// any process shares, so that members of different clusters never talk.
fn cluster_token() -> String {
    static STARTED: Mutex<u64> = Mutex::new(0);
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    *started += 1;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("lockguard-{}-{}-{nanos}", std::process::id(), *started)
}

/// Sends `signal` (`STOP`, `CONT`) to a process with the shell's `kill`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("sh")
        .args(["-c", r#"kill -s "$1" "$2""#, "sh", signal, &pid.to_string()])
        .status();
    if let Err(e) = status {
        panic!("cannot run `kill -s {signal} {pid}`: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_handed_out_once() {
        let ports: BTreeSet<u16> = (0..50).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn cluster_tokens_differ() {
        assert_ne!(cluster_token(), cluster_token());
    }

    /// A member whose client port is taken exits, and the harness says
    /// why from its log.
    #[test]
    fn etcd_exit_cause_names_a_taken_port() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let peer_port = free_port();
        let mut member = EtcdServer::create(server::MemberSpec {
            name: "taken".to_owned(),
            port,
            peer_port,
            initial_cluster: format!("taken=http://127.0.0.1:{peer_port}"),
            token: cluster_token(),
            peers: Vec::new(),
            tls: None,
            flags: Vec::new(),
        });
        member.spawn().unwrap();
        let started = std::time::Instant::now();
        while member.is_running() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "etcd went on running on a taken port"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let cause = member.exit_cause();
        assert!(cause.contains("address already in use"), "{cause}");
    }
}
