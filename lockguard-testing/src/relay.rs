//! A TCP relay on loopback that a test can make lag or cut: the network
//! faults a process signal cannot make.
//!
//! A [`Relay`] listens on a free loopback port and joins each connection
//! it accepts to a target port. [`Relay::hold`] stops what the target sends
//! from reaching the connecting side (the relay keeps it, in order, and
//! the kernel's buffers the rest) while the other direction flows on: a
//! ZooKeeper follower whose link to its leader is held still serves its
//! clients, from a past that no longer holds, and still forwards their
//! writes. [`Relay::release`] lets the kept data through. [`Relay::lag`]
//! makes everything the target sends arrive late: a store far away on the
//! network. [`Relay::cut`]
//! closes every connection and refuses new ones. A relay started closed
//! ([`Relay::start_closed`]) refuses connections until [`Relay::open`].

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often an idle accept loop looks whether the relay was cut.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// A TCP relay from a loopback port to a target port. Cut when dropped.
#[derive(Debug)]
pub struct Relay {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Whether the target's data is held back.
    held: Mutex<bool>,
    released: Condvar,
    /// How long each chunk the target sends is kept before it is passed
    /// on, in µs.
    lag_us: AtomicU64,
    /// Whether new connections are joined (else closed at once).
    open: AtomicBool,
    cut: AtomicBool,
    /// Every connection's two sockets, to close them on a cut.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Relay {
    /// Starts a relay to `127.0.0.1:target`, passing data both ways.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub fn start(target: u16) -> Self {
        let relay = Self::start_closed(target);
        relay.open();
        relay
    }

    /// Starts a relay to `127.0.0.1:target` that closes each connection it
    /// accepts until [`Relay::open`]: to a client, a server it cannot use.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub fn start_closed(target: u16) -> Self {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("no free loopback port for a relay");
        let port = listener.local_addr().expect("bound").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        std::thread::spawn(move || accept(&listener, target, &accepting));
        Self { port, shared }
    }

    /// The port the relay listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Joins the connections accepted from now on to the target.
    pub fn open(&self) {
        self.shared.open.store(true, Ordering::SeqCst);
    }

    /// Holds back what the target sends, on every connection, until
    /// [`Relay::release`]; what the connecting side sends still passes.
    pub fn hold(&self) {
        *self.shared.held.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// Lets what the target sent, and sends, through again.
    pub fn release(&self) {
        *self.shared.held.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.shared.released.notify_all();
    }

    /// Keeps each chunk the target sends for `lag` before passing it on,
    /// on every connection (zero: none): the answers of a server that many
    /// milliseconds away, the requests still passing at once.
    pub fn lag(&self, lag: Duration) {
        let us = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        self.shared.lag_us.store(us, Ordering::SeqCst);
    }

    /// Closes every connection, both ways, and refuses new ones for good.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.reset();
    }

    /// Closes every connection, both ways, and goes on accepting new ones:
    /// what a proxy or a load balancer that drops its connections does.
    pub fn reset(&self) {
        self.release();
        let sockets = std::mem::take(
            &mut *self
                .shared
                .sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for socket in sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Accepts connections until the relay is cut, joining each to `target`.
fn accept(listener: &TcpListener, target: u16, shared: &Arc<Shared>) {
    while !shared.cut.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(_) => return,
        };
        if !shared.open.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
            continue;
        };
        let _ = client.set_nonblocking(false);
        // Each chunk passes on as it comes: without this, Nagle's
        // algorithm holds a small write back until the previous one is
        // acknowledged (up to the peer's 40 ms delayed ACK), which a
        // direct loopback connection would not.
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut sockets = shared.sockets.lock().unwrap_or_else(|p| p.into_inner());
            if shared.cut.load(Ordering::SeqCst) {
                return;
            }
            for s in [&client, &server] {
                if let Ok(s) = s.try_clone() {
                    sockets.push(s);
                }
            }
        }
        let to_target = shared.clone();
        std::thread::spawn(move || pipe(client, server2, &to_target, false));
        let from_target = shared.clone();
        std::thread::spawn(move || pipe(server, client2, &from_target, true));
    }
}

/// Copies `from` to `to` until either closes; with `holdable` (what the
/// target sends), waits while the relay holds, and for its lag, before
/// passing each chunk on.
fn pipe(mut from: TcpStream, mut to: TcpStream, shared: &Shared, holdable: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if holdable {
            let mut held = shared.held.lock().unwrap_or_else(|p| p.into_inner());
            while *held {
                held = shared
                    .released
                    .wait(held)
                    .unwrap_or_else(|p| p.into_inner());
            }
            drop(held);
            let lag = shared.lag_us.load(Ordering::SeqCst);
            if lag > 0 {
                std::thread::sleep(Duration::from_micros(lag));
            }
        }
        if shared.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
