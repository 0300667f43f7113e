//! An etcd cluster of several members on loopback.

use std::time::{Duration, Instant};

use super::server::{EtcdServer, MemberSpec, NotServing};
use super::{POLL_TIMEOUT, START_TIMEOUT};

/// An etcd cluster: `n` members on free loopback ports, each in its own
/// directory, that elect a leader among themselves. Killed when dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `n` members (3 for a quorum that survives one failure), all
    /// at once, as a new cluster with a token of its own; returns once each
    /// serves (`/health` says `true`) and exactly one leads. Takes about
    /// 2 s: a new member first asks the others for the cluster, and waits
    /// for that until they listen.
    ///
    /// # Panics
    ///
    /// When `n` is 0, when `etcd` is missing, or when the cluster does not
    /// form within 30 s; the message holds every member's status and the
    /// tail of its log.
    pub fn start(n: usize) -> Self {
        assert!(n > 0, "a cluster needs at least one member");
        // A probed port may be taken between the probe and the bind, and
        // the member that cannot bind it exits: a new cluster on new ports.
        let mut causes = Vec::new();
        for attempt in 1..=5 {
            let cluster = Self::spawn(n);
            match cluster.serving_within(START_TIMEOUT) {
                Ok(()) => return cluster,
                Err(e) if e.exited => {
                    causes.push(format!("attempt {attempt}: {}", cluster.exit_causes()));
                    if attempt == 5 {
                        panic!(
                            "an etcd cluster of {n} did not form in 5 attempts, a member exiting \
                             each time:\n{}\nthe last attempt: {}",
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

    /// Creates and starts `n` members on new ports, without waiting.
    fn spawn(n: usize) -> Self {
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| (super::free_port(), super::free_port()))
            .collect();
        let token = super::cluster_token();
        let name = |i: usize| format!("member{i}");
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("{}=http://127.0.0.1:{peer}", name(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut members: Vec<EtcdServer> = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, peer_port))| {
                EtcdServer::create(MemberSpec {
                    name: name(i),
                    port,
                    peer_port,
                    initial_cluster: initial_cluster.clone(),
                    token: token.clone(),
                    peers: ports
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| j != i)
                        .map(|(_, &(_, peer))| peer)
                        .collect(),
                    tls: None,
                    flags: Vec::new(),
                })
            })
            .collect();
        for member in &mut members {
            if let Err(e) = member.spawn() {
                panic!("{}", e.why);
            }
        }
        Self { members }
    }

    /// The members' `127.0.0.1:PORT`s joined with commas.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(EtcdServer::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,…`, the cluster as a store URL.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// How many members the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never: see
    /// [`EtcdCluster::start`]).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i` (from 0).
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn member(&self, i: usize) -> &EtcdServer {
        &self.members[i]
    }

    /// Member `i`, to pause, kill or restart it. Its
    /// [`restart`](EtcdServer::restart) waits until it serves in a quorum
    /// again, when enough of the other members run for one.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn member_mut(&mut self, i: usize) -> &mut EtcdServer {
        &mut self.members[i]
    }

    /// Whether member `i` can be asked: started, not killed, not paused
    /// (a paused member would not answer).
    fn askable(&self, i: usize) -> bool {
        let m = &self.members[i];
        m.is_running() && !m.is_paused()
    }

    /// The members that say they lead, each asked once.
    fn leaders(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.askable(i) && self.members[i].is_leader())
            .collect()
    }

    /// The member that says it leads now (its status's leader is itself),
    /// if any; paused and killed members are not asked. The first, should
    /// two say so: a paused leader, resumed after the others elected
    /// another, may go on saying so for a moment.
    pub fn leader(&self) -> Option<usize> {
        (0..self.len()).find(|&i| self.askable(i) && self.members[i].is_leader())
    }

    /// Waits until exactly one member (running, not paused) says it leads,
    /// and returns it.
    ///
    /// # Panics
    ///
    /// When that takes longer than `timeout`; the message holds every
    /// member's status and the tail of its log.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let started = Instant::now();
        loop {
            let leaders = self.leaders();
            if let [leader] = leaders[..] {
                return leader;
            }
            if started.elapsed() > timeout {
                panic!(
                    "no single etcd leader after {timeout:?} (leaders: {leaders:?}); {}",
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until every member that was started (and not killed since)
    /// and is not paused serves (`/health` says `true`), with exactly one
    /// leader among them.
    ///
    /// # Panics
    ///
    /// When a member exited on its own, or when that takes longer than
    /// 30 s (as when too few members run for a quorum); the message holds
    /// every member's status and the tail of its log.
    pub fn wait_until_serving(&self) {
        if let Err(e) = self.serving_within(START_TIMEOUT) {
            panic!("{}", e.why);
        }
    }

    fn serving_within(&self, timeout: Duration) -> Result<(), NotServing> {
        let started = Instant::now();
        loop {
            let mut leaders = 0;
            let mut all_serve = true;
            for (i, m) in self.members.iter().enumerate() {
                if m.pid().is_none() || m.is_paused() {
                    continue;
                }
                if !m.is_running() {
                    return Err(NotServing {
                        why: format!("etcd cluster member {i} exited; {}", self.report()),
                        exited: true,
                    });
                }
                if !m.healthy_within(POLL_TIMEOUT) {
                    all_serve = false;
                    continue;
                }
                match m.status_within(POLL_TIMEOUT) {
                    Some(status) if status.is_leader() => leaders += 1,
                    Some(_) => {}
                    None => all_serve = false,
                }
            }
            if all_serve && leaders == 1 {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(NotServing {
                    why: format!(
                        "the etcd cluster did not serve within {timeout:?}; {}",
                        self.report()
                    ),
                    exited: false,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the given members (those still running) and starts them again
    /// together, on their ports and data; returns once every running member
    /// serves again. For when the quorum needs more than one of them.
    ///
    /// # Panics
    ///
    /// When an index is out of range, or the cluster does not serve again
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

    /// Each member's ports, pid, status and log tail, for panic messages.
    /// Which started members have exited, each with the lines of its
    /// last start's log that say why (errors and worse).
    fn exit_causes(&self) -> String {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.pid().is_some() && !m.is_running())
            .map(|(i, m)| format!("member {i} exited: {}", m.exit_cause()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Every member's state and the end of its log, the members that
    /// exited first.
    fn report(&self) -> String {
        let mut out = String::new();
        let mut order: Vec<usize> = (0..self.len()).collect();
        // Exited (started, not killed, not running) first.
        order.sort_by_key(|&i| {
            let m = &self.members[i];
            m.pid().is_none() || m.is_running()
        });
        for i in order {
            let m = &self.members[i];
            let state = if m.pid().is_some() && !m.is_running() {
                format!("exited, its log says:\n{}\n", m.exit_cause())
            } else if !m.is_running() {
                "not running".to_owned()
            } else if m.is_paused() {
                "paused".to_owned()
            } else {
                format!("healthy {}, status {:?}", m.is_healthy(), m.status())
            };
            out.push_str(&format!(
                "\n--- member {i} (port {}, peer port {}, pid {:?}): {state}; the end of its \
                 log ({}):\n{}\n",
                m.port(),
                m.peer_port(),
                m.pid(),
                m.dir().join("log").display(),
                m.log_tail()
            ));
        }
        out
    }
}
