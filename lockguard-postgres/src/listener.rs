//! The one listening connection of a client: `LISTEN` on the channel its
//! queued waiters are told on, notifications routed to its waiters.
//!
//! A pooled connection cannot be used: its notifications are dropped by
//! the pool's connection task. This one is opened (at the first wait) from
//! the connection settings, and driven by a task of its own, which reads
//! the notifications as they come and routes them to the waiters. When the
//! connection is lost, every waiter is woken (a handoff announced meanwhile
//! would otherwise be missed: they claim it with their next attempt), and
//! the task connects again with backoff and listens again.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::store::{PgOptions, pg_channel, pg_error};
use crate::tls::Connector;
use lockguard_core::store::{Inbox, Listener, StoreFuture};
use lockguard_core::{Error, ErrorKind, Result};

/// A request to bring one channel's subscription in line with the inbox.
struct Sync {
    channel: String,
    inbox: Weak<dyn Inbox>,
    done: oneshot::Sender<Result<()>>,
}

/// The listening connection's handle; its task ends when this is dropped.
#[derive(Debug)]
pub(crate) struct PgListener {
    tx: mpsc::UnboundedSender<Sync>,
}

impl PgListener {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        opts: PgOptions,
        connector: Connector,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(config, opts, connector, rx));
        Self { tx }
    }
}

impl Listener for PgListener {
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        let (done, answer) = oneshot::channel();
        let request = Sync {
            channel: channel.to_owned(),
            inbox: Arc::downgrade(&inbox),
            done,
        };
        StoreFuture::boxed(async move {
            self.tx.send(request).map_err(|_| stopped())?;
            answer.await.map_err(|_| stopped())?
        })
    }
}

fn stopped() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the postgres listening connection has stopped",
    )
}

/// Quotes a channel name as an SQL identifier.
fn quoted(channel: &str) -> String {
    format!("\"{}\"", channel.replace('"', "\"\""))
}

/// What the task knows: the channels listened to (PostgreSQL's name to the
/// client's name) and where their messages go.
#[derive(Default)]
struct State {
    channels: HashMap<String, String>,
    inbox: Option<Weak<dyn Inbox>>,
}

impl State {
    fn wake_all(&self) {
        if let Some(inbox) = self.inbox.as_ref().and_then(Weak::upgrade) {
            inbox.wake_all();
        }
    }
}

async fn run(
    config: tokio_postgres::Config,
    opts: PgOptions,
    connector: Connector,
    mut requests: mpsc::UnboundedReceiver<Sync>,
) {
    let mut state = State::default();
    let mut backoff = Duration::from_millis(20);
    // Connect at the first request: a client that never waits opens no
    // listening connection.
    let Some(first) = requests.recv().await else {
        return;
    };
    let mut pending = Some(first);
    loop {
        let connected =
            match tokio::time::timeout(opts.connect_timeout, connector.connect_listening(&config))
                .await
            {
                Ok(Ok(c)) => Some(c),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "postgres listening connection failed");
                    None
                }
                Err(_) => None,
            };
        let Some((client, mut notes, driver)) = connected else {
            // Requests meanwhile are remembered and refused; waiters fall
            // back to their timed attempts.
            if let Some(r) = pending.take() {
                refuse(&mut state, r);
            }
            let retry_at = tokio::time::sleep(backoff);
            tokio::pin!(retry_at);
            loop {
                tokio::select! {
                    () = &mut retry_at => break,
                    r = requests.recv() => {
                        let Some(r) = r else { return };
                        refuse(&mut state, r);
                    }
                }
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
            continue;
        };
        let resumed = if state.channels.is_empty() {
            Ok(())
        } else {
            let all: String = state
                .channels
                .keys()
                .map(|c| format!("LISTEN {};", quoted(c)))
                .collect();
            client.batch_execute(&all).await
        };
        if resumed.is_ok() {
            backoff = Duration::from_millis(20);
            // Handoffs announced while nobody listened: every waiter checks.
            state.wake_all();
            if let Some(r) = pending.take() {
                let answer = apply(&client, &mut state, &r, opts).await;
                let _ = r.done.send(answer);
            }
            loop {
                tokio::select! {
                    r = requests.recv() => {
                        let Some(r) = r else {
                            driver.abort();
                            return;
                        };
                        let answer = apply(&client, &mut state, &r, opts).await;
                        let failed = answer.is_err();
                        let _ = r.done.send(answer);
                        if failed && client.is_closed() {
                            break;
                        }
                    }
                    n = notes.recv() => {
                        let Some((channel, payload)) = n else { break };
                        let inbox = state.inbox.as_ref().and_then(Weak::upgrade);
                        if let (Some(name), Some(inbox)) = (state.channels.get(&channel), inbox) {
                            inbox.deliver(name, payload.as_bytes());
                        }
                    }
                }
            }
        }
        driver.abort();
        state.wake_all();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Answers a request while there is no connection: remembered (and
/// listened to once connected), refused for now.
fn refuse(state: &mut State, r: Sync) {
    remember(state, &r);
    let _ = r.done.send(Err(Error::new(
        ErrorKind::Unavailable,
        "no postgres listening connection",
    )));
}

/// Records what a request wants, without telling the server.
fn remember(state: &mut State, r: &Sync) {
    state.inbox = Some(r.inbox.clone());
    let wanted = r.inbox.upgrade().is_some_and(|i| i.is_wanted(&r.channel));
    let name = pg_channel(&r.channel).to_owned();
    if wanted {
        state.channels.insert(name, r.channel.clone());
    } else {
        state.channels.remove(&name);
    }
}

/// Listens to (or stops listening to) a channel as the inbox wants now.
async fn apply(
    client: &tokio_postgres::Client,
    state: &mut State,
    r: &Sync,
    opts: PgOptions,
) -> Result<()> {
    let name = pg_channel(&r.channel).to_owned();
    let was = state.channels.contains_key(&name);
    remember(state, r);
    let now = state.channels.contains_key(&name);
    let sql = match (was, now) {
        (false, true) => format!("LISTEN {}", quoted(&name)),
        (true, false) => format!("UNLISTEN {}", quoted(&name)),
        _ => return Ok(()),
    };
    let what = || format!("listening on {name:?}");
    match tokio::time::timeout(opts.response_timeout, client.batch_execute(&sql)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(pg_error(e, &what())),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("{}: no answer from postgres", what()),
        )),
    }
}
