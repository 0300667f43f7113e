//! `wait_for_replicas` confirms the very write it was asked about: the
//! `WAIT` runs on the connection that ran the script, so a connection lost
//! (and remade by the connection manager) between the two can never have
//! the new connection's `WAIT`, which counts that connection's writes
//! (none), confirm a lock no replica has.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;

use crate::master_and_replica;

/// A relay to a Redis server that counts the requests its clients write
/// and, when armed, cuts a connection right after it passed the server's
/// reply to a script (`EVALSHA` or `EVAL`): the connection manager then
/// makes a new one, through the relay again.
struct ScriptCutter {
    port: u16,
    shared: Arc<Cutter>,
}

#[derive(Default)]
struct Cutter {
    /// Writes from the clients (one per request: a pipeline is one write).
    requests: AtomicUsize,
    /// Whether the next reply to a script cuts its connection.
    armed: AtomicBool,
    /// Connections cut.
    cuts: AtomicUsize,
    /// `WAIT`s sent on a connection that ran no script.
    strays: AtomicUsize,
    stopped: AtomicBool,
}

/// Whether `chunk` holds `part`.
fn has(chunk: &[u8], part: &[u8]) -> bool {
    chunk.windows(part.len()).any(|w| w == part)
}

impl ScriptCutter {
    fn start(target: u16) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Cutter::default());
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                // Set when this connection carried a script.
                let script = Arc::new(AtomicBool::new(false));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (up, seen) = (accepting.clone(), script.clone());
                std::thread::spawn(move || {
                    let (mut from, mut to) = (client, server);
                    let mut buf = [0u8; 16 * 1024];
                    let mut open = true;
                    // Whether this connection ran a script.
                    let mut wrote = false;
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        up.requests.fetch_add(1, Ordering::SeqCst);
                        let chunk = &buf[..n];
                        if has(chunk, b"$7\r\nEVALSHA\r\n") || has(chunk, b"$4\r\nEVAL\r\n") {
                            wrote = true;
                            seen.store(true, Ordering::SeqCst);
                        }
                        if has(chunk, b"$4\r\nWAIT\r\n") && !wrote {
                            up.strays.fetch_add(1, Ordering::SeqCst);
                        }
                        // Once cut, what the client still sends is read
                        // and dropped: closing its socket with data
                        // unread would reset it, and the reset could take
                        // the script's reply with it.
                        open = open && to.write_all(chunk).is_ok();
                    }
                    let _ = to.shutdown(Shutdown::Both);
                });
                let down = accepting.clone();
                std::thread::spawn(move || {
                    let (mut from, mut to) = (s2, c2);
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        if script.swap(false, Ordering::SeqCst)
                            && down.armed.swap(false, Ordering::SeqCst)
                        {
                            down.cuts.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                    }
                    // The client reads the reply, then the end of the
                    // connection; the server's side is closed.
                    let _ = to.shutdown(Shutdown::Write);
                    let _ = from.shutdown(Shutdown::Both);
                });
            }
        });
        Self { port, shared }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptCutter {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

/// With its replica paused, a lock whose connection is cut right after the
/// script's reply is never confirmed, and its `WAIT` never runs on another
/// connection: it fails with the connection that wrote. (On the manager's
/// new connection, a `WAIT` counts that connection's writes; Redis 7.0
/// makes a new connection's `WAIT` cover what the server wrote before it
/// connected, so to the same server the lock is still refused, but after
/// a Sentinel failover the new master never saw the write.) Twenty rounds,
/// each with a fresh cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_connection_was_lost_is_never_confirmed() {
    let (master, mut replica, _replica_conn) = master_and_replica().await;
    let relay = ScriptCutter::start(master.port());
    let client = || async {
        Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .wait_for_replicas(1, Duration::from_millis(500))
            .connect(&relay.url())
            .await
            .unwrap()
    };
    // The scripts cached first (a NOSCRIPT answer is not the script's).
    let warm = client().await.lock("warm").try_acquire().await.unwrap();
    assert!(warm.release().await.unwrap());
    replica.pause();
    let mut confirmed = Vec::new();
    for round in 0..20 {
        // A client of its own each round: a connection made after the cut
        // has written nothing, as after a reconnect in a quiet client (a
        // WAIT there answers at once that the paused replica has it all).
        let lg = client().await;
        let cuts = relay.shared.cuts.load(Ordering::SeqCst);
        relay.shared.armed.store(true, Ordering::SeqCst);
        let name = format!("unreplicated-{round}");
        // In a task, as an application's request runs: woken on the
        // worker that read the reply.
        let lock = lg.lock(&name).lease(Duration::from_secs(30));
        let answer = tokio::spawn(async move { lock.try_acquire().await.map(drop) })
            .await
            .unwrap();
        assert_eq!(
            relay.shared.cuts.load(Ordering::SeqCst),
            cuts + 1,
            "round {round}: the relay did not cut after the script"
        );
        match answer {
            Ok(_) => confirmed.push(round),
            Err(e) => assert!(e.is_unavailable() || e.is_timeout(), "round {round}: {e}"),
        }
    }
    replica.resume();
    let strays = relay.shared.strays.load(Ordering::SeqCst);
    assert_eq!(
        strays, 0,
        "WAITs sent on a connection that had not run the script, in 20 rounds"
    );
    assert!(
        confirmed.is_empty(),
        "locks confirmed as replicated while the replica was paused, in rounds {confirmed:?} of 20"
    );
}

/// With `wait_for_replicas`, a lock's acquisition and each extension are
/// one request each: the script and its `WAIT` go together, in one write,
/// on one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_write_is_one_round_trip() {
    let (master, _replica, _replica_conn) = master_and_replica().await;
    let relay = ScriptCutter::start(master.port());
    let lg = Client::builder()
        .wait_for_replicas(1, Duration::from_millis(500))
        .connect(&relay.url())
        .await
        .unwrap();
    // The scripts cached first (a NOSCRIPT answer costs one more).
    let warm = lg.lock("warm").try_acquire().await.unwrap();
    warm.extend(Duration::from_secs(30)).await.unwrap();
    assert!(warm.release().await.unwrap());

    let before = relay.requests();
    let guard = lg
        .lock("counted")
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap();
    let acquire = relay.requests() - before;
    let before = relay.requests();
    guard.extend(Duration::from_secs(30)).await.unwrap();
    let extend = relay.requests() - before;
    eprintln!("requests with wait_for_replicas: acquire {acquire}, extend {extend}");
    assert_eq!(
        (acquire, extend),
        (1, 1),
        "requests for an acquisition and an extension"
    );
    assert!(guard.release().await.unwrap());
}
