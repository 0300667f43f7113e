//! The bell: how a release wakes a waiter of another client by signalling
//! one backend, the waiter's client's own.
//!
//! `NOTIFY` is not used: at each commit that notifies, PostgreSQL signals
//! every backend of the database that listens, on any channel
//! (`SignalBackends` in `async.c`), and each reads the notification queue
//! in a transaction of its own; so with a listening connection per client,
//! every handoff cost the server a transaction in every client. The bell
//! costs the server the same few transactions per handoff however many
//! clients there are.
//!
//! Each client opens, at its first wait, two connections of its own (not
//! pooled ones). One, the *holder*, creates a temporary table and keeps it
//! locked (`EXCLUSIVE`) in a transaction left open. The other, the *bell*,
//! records its backend (pid, start, role) in the `bells` table under the
//! client's channel, then waits for a lock on that table in one simple
//! query:
//!
//! ```sql
//! SELECT lockguard.bell_check('<channel>');
//! SET LOCAL lock_timeout = '30000ms'; SET LOCAL statement_timeout = 0;
//! LOCK TABLE pg_temp_<n>.lockguard_bell IN SHARE MODE
//! ```
//!
//! The client's waiters queue once the bell waits: its `sync` answers
//! every caller then, also those that came while it connected
//! ([`ChannelTasks`]); a first wait whose bell is slow to start queues
//! without it after one refresh period. A release that hands the lock to a
//! waiter of a client with no bell row still writes the handoff to the
//! mail (and rings nobody): the bell reads its mail first thing once it
//! has registered, so that waiter hears of it then, not at its refresh.
//!
//! A release that hands a lock to one of the client's waiters writes the
//! handoff to the `mail` table and cancels the bell's wait
//! (`pg_cancel_backend`, after checking that the pid is still the bell's
//! backend, by its start), in its own statement. The interrupted bell reads
//! and removes its mail (`bell_drain`) and hands each handoff to its waiter
//! through the client's inbox; then it waits again.
//!
//! The ring is sent before the release commits. The release holds the
//! channel's advisory lock (shared) until it commits; the drain takes it
//! (exclusive) before it reads, so it reads the letter once it is
//! committed. And a ring that reaches the bell between two statements,
//! where PostgreSQL ignores a cancel, is not lost: `bell_check`, at the
//! start of the next wait, waits for the channel's lock too and raises
//! (`LG001`) when mail is there, and a ring during the query interrupts
//! it wherever it is.
//!
//! Why a lock on a table and not `pg_sleep` or an advisory lock, the
//! obvious waits: those are function calls, in a statement that holds a
//! snapshot for the whole wait, which holds back the removal of dead rows
//! (vacuum, and the pruning of the queue's own tables) in the whole
//! database. `LOCK TABLE` takes no snapshot: a waiting bell holds no
//! `backend_xmin` (once its first lookup of the table's name is cached,
//! which the bell does before it first waits), and the holder's open
//! transaction has neither an xid nor a snapshot. (`EXCLUSIVE`, not
//! `ACCESS EXCLUSIVE`, which would take an xid to log the lock.)
//!
//! Whatever still goes wrong (a connection lost, a bell another role's
//! backend may not signal) is covered by the waiter's timed refresh, which
//! claims a lock handed to it as well; when the bell's connections are
//! lost, every waiter of the client is woken to check at once, and the
//! mail kept meanwhile is read as soon as the bell is back.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;

use crate::error::pg_error;
use crate::options::PgOptions;
use crate::tls::{Connector, Note};
use lockguard_core::store::net::{self, Stopped};
use lockguard_core::store::{ChannelTasks, Handoff, Inbox, Listener, StoreFuture, Token};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

/// How long a bell waits when nobody rings it: one short transaction per
/// period for an idle client.
const PERIOD: Duration = Duration::from_secs(30);

/// How often a bell renews its row (rows of bells gone are swept after
/// five minutes).
const RENEW_EVERY: Duration = Duration::from_secs(60);

/// The SQLSTATE `bell_check` raises when mail waits.
const MAIL_WAITS: &str = "LG001";

/// A channel name PostgreSQL accepts (at most 63 bytes): the channel
/// itself, or its end, which holds the client's random token.
pub(crate) fn pg_channel(channel: &str) -> &str {
    const MAX: usize = 63;
    if channel.len() <= MAX {
        return channel;
    }
    let mut start = channel.len() - MAX;
    while !channel.is_char_boundary(start) {
        start += 1;
    }
    &channel[start..]
}

/// The bells of one store: one per channel (a client has one channel),
/// started at the first wait for a semaphore's permit or a read-write
/// lock's hold (the store keeps it in an `OnDemand`, whose `needed` the
/// wait calls): a lock's waiter waits in the server, and needs none.
pub(crate) struct PgBell {
    config: tokio_postgres::Config,
    opts: PgOptions,
    connector: Connector,
    schema: String,
    bells: ChannelTasks,
}

impl fmt::Debug for PgBell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBell")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgBell {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        opts: PgOptions,
        connector: Connector,
        schema: String,
    ) -> Self {
        Self {
            config,
            opts,
            connector,
            schema,
            bells: ChannelTasks::new(),
        }
    }
}

impl Listener for PgBell {
    /// Starts the bell of `channel` (once; it rings until the store is
    /// dropped or the client is gone); the future answers once it waits.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        self.bells.sync(channel, &*inbox, |started| {
            let bell = Ringer {
                config: self.config.clone(),
                opts: self.opts,
                connector: self.connector.clone(),
                schema: self.schema.clone(),
                channel: pg_channel(channel).to_owned(),
            };
            tokio::spawn(net::keep_listening(
                "postgres",
                bell,
                Arc::downgrade(&inbox),
                started,
            ))
        })
    }
}

/// What one bell's task needs.
struct Ringer {
    config: tokio_postgres::Config,
    opts: PgOptions,
    connector: Connector,
    schema: String,
    /// The channel as the waiters' rows name it.
    channel: String,
}

/// One connection and what keeps it going.
struct Conn {
    client: tokio_postgres::Client,
    /// Kept so that the driving task does not end (nothing is listened to).
    _notes: mpsc::UnboundedReceiver<Note>,
    driver: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A bell's two connections: the holder of the table's lock, and the bell.
struct Pair {
    _holder: Conn,
    bell: Conn,
    /// The statement the bell waits in.
    wait: String,
    /// The read of the mail, prepared once: an unprepared statement costs
    /// a round trip and a transaction more.
    drain: tokio_postgres::Statement,
}

/// A string as an SQL expression whatever it holds: hex, decoded.
fn text_literal(s: &str) -> String {
    let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
    format!("convert_from(decode('{hex}', 'hex'), 'UTF8')")
}

/// The statement a bell waits in, for at most `period`.
fn wait_sql(schema: &str, channel: &str, table: &str, period: Duration) -> String {
    format!(
        "SELECT {schema}.bell_check({}); \
         SET LOCAL lock_timeout = '{}ms'; SET LOCAL statement_timeout = 0; \
         LOCK TABLE {table} IN SHARE MODE",
        text_literal(channel),
        period.as_millis().max(1)
    )
}

impl Ringer {
    async fn connect(&self, what: &str) -> Result<Conn> {
        let (client, notes, driver) = self
            .connector
            .connect_listening(&self.config)
            .await
            .map_err(|e| pg_error(e, what))?;
        Ok(Conn {
            client,
            _notes: notes,
            driver,
        })
    }

    /// Opens the bell's connections, locks the holder's table and records
    /// the bell under its channel.
    async fn open(&self) -> Result<Pair> {
        let what = "opening the postgres bell connections";
        let opening = async {
            let holder = self.connect(what).await?;
            holder
                .client
                .batch_execute(
                    "SET idle_in_transaction_session_timeout = 0; \
                     CREATE TEMPORARY TABLE IF NOT EXISTS lockguard_bell ()",
                )
                .await
                .map_err(|e| pg_error(e, what))?;
            let row = holder
                .client
                .query_one("SELECT pg_my_temp_schema()::regnamespace::text", &[])
                .await
                .map_err(|e| pg_error(e, what))?;
            let table = format!("{}.lockguard_bell", row.get::<_, String>(0));
            holder
                .client
                .batch_execute("BEGIN; LOCK TABLE pg_temp.lockguard_bell IN EXCLUSIVE MODE")
                .await
                .map_err(|e| pg_error(e, what))?;
            let bell = self.connect(what).await?;
            // Looked up once: later waits find the name cached and take
            // no catalog snapshot while they wait. No statement timeout of
            // the role's on this session: a cancelled read of the mail
            // means a ring here, and is read again at once (every request
            // of the bell is bounded by the client).
            bell.client
                .batch_execute(&format!(
                    "SET statement_timeout = 0; SELECT '{table}'::regclass"
                ))
                .await
                .map_err(|e| pg_error(e, what))?;
            register(&bell.client, &self.schema, &self.channel)
                .await
                .map_err(|e| pg_error(e, "registering the postgres bell"))?;
            let drain = bell
                .client
                .prepare(&format!(
                    "SELECT token, fence, attempt FROM {}.bell_drain($1)",
                    self.schema
                ))
                .await
                .map_err(|e| pg_error(e, what))?;
            Ok(Pair {
                drain,
                _holder: holder,
                wait: wait_sql(&self.schema, &self.channel, &table, PERIOD),
                bell,
            })
        };
        match tokio::time::timeout(self.opts.connect_timeout, opening).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("{what}: no answer from postgres"),
            )),
        }
    }
}

/// Records (or renews) the bell's backend under `channel`.
async fn register(
    bell: &tokio_postgres::Client,
    schema: &str,
    channel: &str,
) -> std::result::Result<(), tokio_postgres::Error> {
    bell.execute(&format!("SELECT {schema}.bell_register($1)"), &[&channel])
        .await
        .map(drop)
}

/// Reads and removes the handoffs addressed to `channel`.
async fn drain(
    bell: &tokio_postgres::Client,
    statement: &tokio_postgres::Statement,
    channel: &str,
) -> std::result::Result<Vec<Handoff>, tokio_postgres::Error> {
    let rows = bell.query(statement, &[&channel]).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let token: String = row.try_get(0).ok()?;
            let fence: i64 = row.try_get(1).ok()?;
            let attempt: i64 = row.try_get(2).ok()?;
            let token = Token::parse(token.as_bytes())?;
            let attempt = u32::try_from(attempt).ok()?;
            let fence = u64::try_from(fence).ok().filter(|f| *f > 0)?;
            Some(Handoff::new(token, FencingToken::new(fence), attempt))
        })
        .collect())
}

impl net::Listening for Ringer {
    type Conn = Pair;

    async fn open(&self) -> Result<Pair> {
        Ringer::open(self).await
    }

    async fn listen(&self, mut pair: Pair, inbox: &Weak<dyn Inbox>) -> Stopped {
        ring(&mut pair, self, inbox).await
    }
}

/// How a bell's wait ended.
enum Woke {
    /// Rung, or mail was there: read the mail.
    Rung,
    /// The period passed: wait again (the check reads no mail it missed).
    Quiet,
    /// The holder's lock is gone, or the connection failed.
    Lost,
}

fn woke(waited: std::result::Result<(), tokio_postgres::Error>) -> Woke {
    let e = match waited {
        // The lock was granted: the holder's connection is gone.
        Ok(()) => return Woke::Lost,
        Err(e) => e,
    };
    match e.code() {
        Some(c) if *c == SqlState::QUERY_CANCELED || c.code() == MAIL_WAITS => Woke::Rung,
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => Woke::Quiet,
        _ => {
            tracing::debug!(error = %e, "postgres bell connection lost");
            Woke::Lost
        }
    }
}

/// Waits in the bell's query and delivers the handoffs each ring brings,
/// until a connection fails or the client is gone.
async fn ring(pair: &mut Pair, bell: &Ringer, inbox: &Weak<dyn Inbox>) -> Stopped {
    // The wait answers within its period; past that and a request's
    // timeout, the server is gone or frozen.
    let wait_bound = PERIOD + bell.opts.response_timeout;
    let timeout = bell.opts.response_timeout;
    let mut renewed = tokio::time::Instant::now();
    let mut read = true;
    loop {
        if read {
            let handoffs = match tokio::time::timeout(
                timeout,
                drain(&pair.bell.client, &pair.drain, &bell.channel),
            )
            .await
            {
                Ok(Ok(h)) => h,
                // Rung while reading: read again.
                Ok(Err(e)) if e.code() == Some(&SqlState::QUERY_CANCELED) => continue,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "postgres bell connection lost");
                    return Stopped::Lost;
                }
                Err(_) => return Stopped::Lost,
            };
            let Some(i) = inbox.upgrade() else {
                return Stopped::ClientGone;
            };
            for h in handoffs {
                i.handoff(h);
            }
        } else if inbox.strong_count() == 0 {
            return Stopped::ClientGone;
        }
        if renewed.elapsed() >= RENEW_EVERY {
            let renewal = register(&pair.bell.client, &bell.schema, &bell.channel);
            match tokio::time::timeout(timeout, renewal).await {
                Ok(Ok(())) => renewed = tokio::time::Instant::now(),
                // Rung while renewing: renewed at the next turn.
                Ok(Err(e)) if e.code() == Some(&SqlState::QUERY_CANCELED) => {}
                _ => return Stopped::Lost,
            }
        }
        let waited = match tokio::time::timeout(
            wait_bound,
            pair.bell.client.batch_execute(&pair.wait),
        )
        .await
        {
            Ok(w) => w,
            Err(_) => return Stopped::Lost,
        };
        read = match woke(waited) {
            Woke::Rung => true,
            Woke::Quiet => false,
            Woke::Lost => return Stopped::Lost,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_postgres_and_keep_their_token() {
        let short = "lockguard:waiters:0123456789abcdef0123456789abcdef";
        assert_eq!(pg_channel(short), short);
        let long = format!("{}waiters:0123456789abcdef0123456789abcdef", "é".repeat(40));
        let c = pg_channel(&long);
        assert!(c.len() <= 63 && long.ends_with(c), "{c}");
        assert!(c.ends_with("0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn the_wait_names_its_channel_in_hex() {
        let sql = wait_sql(
            "lockguard",
            "a'b",
            "pg_temp_3.lockguard_bell",
            Duration::from_millis(1500),
        );
        assert!(
            sql.starts_with(
                "SELECT lockguard.bell_check(convert_from(decode('612762', 'hex'), 'UTF8'));"
            ),
            "{sql}"
        );
        assert!(sql.contains("lock_timeout = '1500ms'"), "{sql}");
        assert!(
            sql.ends_with("LOCK TABLE pg_temp_3.lockguard_bell IN SHARE MODE"),
            "{sql}"
        );
    }
}
