//! The ZooKeeper harness against real servers, checked with the servers'
//! four-letter-word commands only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lockguard_testing::{ZooKeeperEnsemble, ZooKeeperServer};

/// Tells [`helper`] what to do when this test binary runs it in a process
/// of its own.
const HELPER: &str = "LOCKGUARD_ZK_TEST_HELPER";

/// Whether a process is alive: it exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rfind(')')
            .and_then(|at| stat[at + 1..].split_whitespace().next().map(str::to_owned));
        !matches!(state.as_deref(), None | Some("Z" | "X"))
    })
}

/// The files under `dir`, recursively, relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path.strip_prefix(dir).expect("under dir").to_owned());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_standalone_server_serves_pauses_and_restarts_on_its_port_and_data() {
    let started = Instant::now();
    let mut zk = ZooKeeperServer::start();
    eprintln!("standalone server serving after {:?}", started.elapsed());
    assert_eq!(zk.four_letter("ruok").as_deref(), Some("imok"));
    assert_eq!(zk.mode().as_deref(), Some("standalone"));
    assert_eq!(zk.hosts(), format!("127.0.0.1:{}", zk.port()));
    assert!(zk.is_running());
    let pid = zk.pid().expect("a pid while running");
    assert!(alive(pid));
    assert!(zk.log().contains("starting zookeeper #1"), "{}", zk.log());

    // Paused: the kernel still accepts the connection, nobody answers.
    zk.pause();
    let asked = Instant::now();
    assert_eq!(zk.four_letter("ruok"), None);
    assert!(asked.elapsed() >= Duration::from_millis(1900));
    assert!(zk.is_running(), "a paused server is still running");
    zk.resume();
    assert_eq!(zk.four_letter("ruok").as_deref(), Some("imok"));
    assert_eq!(zk.mode().as_deref(), Some("standalone"));

    // Killed: nothing listens; the data directory stays.
    let port = zk.port();
    let data = zk.dir().join("data");
    let before = files_under(&data);
    assert!(
        !before.is_empty(),
        "the server wrote nothing to {}",
        data.display()
    );
    zk.kill();
    assert!(!zk.is_running());
    assert_eq!(zk.pid(), None);
    assert!(
        !alive(pid),
        "the killed server's process {pid} is still alive"
    );
    assert_eq!(zk.four_letter("ruok"), None);

    // Restarted: the same port, the same data (and more).
    let started = Instant::now();
    zk.restart();
    eprintln!(
        "standalone server serving again after {:?}",
        started.elapsed()
    );
    assert_eq!(zk.port(), port);
    assert_ne!(zk.pid(), Some(pid));
    assert_eq!(zk.four_letter("ruok").as_deref(), Some("imok"));
    assert_eq!(zk.mode().as_deref(), Some("standalone"));
    let after = files_under(&data);
    for file in &before {
        assert!(
            after.contains(file),
            "{} is gone after the restart",
            file.display()
        );
    }
    assert!(zk.log().contains("starting zookeeper #2"), "{}", zk.log());

    let dir = zk.dir().to_owned();
    let pid = zk.pid().expect("running");
    drop(zk);
    assert!(
        !alive(pid),
        "a dropped server's process {pid} is still alive"
    );
    assert!(!dir.exists(), "a dropped server's directory is still there");
}

#[test]
fn an_ensemble_elects_one_leader_and_another_when_it_dies() {
    let started = Instant::now();
    let mut zk = ZooKeeperEnsemble::start(3);
    eprintln!("3-member ensemble serving after {:?}", started.elapsed());
    assert_eq!(zk.len(), 3);
    let hosts: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", zk.member(i).port()))
        .collect();
    assert_eq!(zk.hosts(), hosts.join(","));

    let modes: Vec<Option<String>> = (0..3).map(|i| zk.member(i).mode()).collect();
    let leaders: Vec<usize> = (0..3)
        .filter(|&i| modes[i].as_deref() == Some("leader"))
        .collect();
    assert_eq!(leaders.len(), 1, "modes: {modes:?}");
    let old = leaders[0];
    for (i, mode) in modes.iter().enumerate() {
        if i != old {
            assert_eq!(mode.as_deref(), Some("follower"), "member {i}");
        }
    }
    assert_eq!(zk.leader(), Some(old));
    assert_eq!(zk.wait_for_leader(Duration::from_secs(1)), old);

    // The leader dies: the other two elect one of themselves.
    let killed = Instant::now();
    zk.member_mut(old).kill();
    assert!(!zk.member(old).is_running());
    let new = zk.wait_for_leader(Duration::from_secs(30));
    eprintln!(
        "a new leader (member {new}, was {old}) after {:?}",
        killed.elapsed()
    );
    assert_ne!(new, old);
    let other = (0..3)
        .find(|&i| i != old && i != new)
        .expect("three members");
    let waited = Instant::now();
    while zk.member(other).mode().as_deref() != Some("follower") {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "member {other} does not follow {new}: {:?}",
            zk.member(other).mode()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The old leader comes back as a follower of the new one.
    let started = Instant::now();
    zk.member_mut(old).restart();
    eprintln!("the old leader following after {:?}", started.elapsed());
    assert_eq!(zk.member(old).mode().as_deref(), Some("follower"));
    assert_eq!(zk.leader(), Some(new));
    zk.wait_until_serving();

    // Two of three die: the last one runs, answers `imok`, but serves
    // nothing without a quorum; both back together restore it.
    let survivor = new;
    let gone: Vec<usize> = (0..3).filter(|&i| i != survivor).collect();
    for &i in &gone {
        zk.member_mut(i).kill();
    }
    let waited = Instant::now();
    while zk.member(survivor).mode().is_some() {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "member {survivor} still serves without a quorum: {:?}",
            zk.member(survivor).mode()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("quorum lost after {:?}", waited.elapsed());
    assert_eq!(
        zk.member(survivor).four_letter("ruok").as_deref(),
        Some("imok")
    );
    assert_eq!(zk.leader(), None);
    let started = Instant::now();
    zk.restart_members(&gone);
    eprintln!("quorum back after {:?}", started.elapsed());
    let leader = zk.wait_for_leader(Duration::from_secs(1));
    for i in (0..3).filter(|&i| i != leader) {
        assert_eq!(
            zk.member(i).mode().as_deref(),
            Some("follower"),
            "member {i}"
        );
    }

    let pids: Vec<u32> = (0..3).filter_map(|i| zk.member(i).pid()).collect();
    assert_eq!(pids.len(), 3);
    drop(zk);
    for pid in pids {
        assert!(
            !alive(pid),
            "a dropped member's process {pid} is still alive"
        );
    }
}

/// Runs [`helper`] in a child process of this test binary, with `what` to
/// do and `env` set; its status and its stdout and stderr.
fn run_helper(what: &str, env: &[(&str, &str)], remove: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args(["helper", "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(HELPER, what);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in remove {
        cmd.env_remove(k);
    }
    let out = cmd.output().expect("cannot run the test binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_server_dies_with_the_test_process_and_takes_its_directory() {
    let (ok, stdout, stderr) = run_helper("exit", &[], &[]);
    assert!(ok, "the helper failed:\n{stdout}\n{stderr}");
    let field = |name: &str| {
        stdout
            .lines()
            // The harness's `test helper ... ` may start the line.
            .find_map(|l| l.split_once(name).map(|(_, value)| value))
            .unwrap_or_else(|| panic!("no {name} from the helper:\n{stdout}\n{stderr}"))
            .to_owned()
    };
    let pid: u32 = field("pid=").parse().expect("a pid");
    let dir = PathBuf::from(field("dir="));
    let waited = Instant::now();
    while alive(pid) || dir.exists() {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the server of an exited test process lives on (alive: {}, dir {} exists: {})",
            alive(pid),
            dir.display(),
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bad_class_path_is_a_panic_with_the_servers_log() {
    let (ok, stdout, stderr) = run_helper(
        "start",
        &[("ZOOKEEPER_CLASSPATH", "/nonexistent/zookeeper.jar")],
        &[],
    );
    assert!(
        !ok,
        "the server started without its jar:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("did not serve") && stderr.contains("QuorumPeerMain"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn a_missing_java_is_a_panic_saying_how_to_get_one() {
    let (ok, stdout, stderr) = run_helper("start", &[("PATH", "/nonexistent")], &["JAVA_HOME"]);
    assert!(!ok, "the server started without java:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("java not found") && stderr.contains("apt-get install zookeeper"),
        "{stdout}\n{stderr}"
    );
}

/// Not a test of its own: the tests above run it in a child process.
#[test]
#[ignore = "a helper the other tests run in a process of their own"]
fn helper() {
    match std::env::var(HELPER).as_deref() {
        // Starts a server and exits without dropping it.
        Ok("exit") => {
            let zk = ZooKeeperServer::start();
            println!("pid={}", zk.pid().expect("running"));
            println!("dir={}", zk.dir().display());
            std::io::stdout().flush().expect("flush");
            std::process::exit(0);
        }
        Ok("start") => {
            ZooKeeperServer::start();
        }
        _ => {}
    }
}
