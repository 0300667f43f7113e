//! The bell: how a release wakes a waiter of another client without
//! polling, on a server that has no `LISTEN`/`NOTIFY`.
//!
//! Each client opens, at its first wait, two connections of its own (not
//! pooled ones). One, the *holder*, takes a user lock named for the
//! client's channel (`GET_LOCK`) and keeps it. The other, the *bell*,
//! records itself in the `bells` table under the channel, takes a user lock
//! of its own (`lockguard ring ` and the channel's last 40 bytes, which end
//! with the client's random token), then waits for the holder's lock in a
//! query naming the channel:
//!
//! ```sql
//! SELECT 'lockguard bell <channel in hex>',
//!        IF(EXISTS(SELECT 1 FROM handoffs WHERE channel = <channel>)
//!           OR EXISTS(SELECT 1 FROM bells WHERE channel = <channel> AND rung = 1), 0,
//!           GET_LOCK('<lock of the channel>', 30))
//! ```
//!
//! A release that hands a lock to one of the client's waiters writes the
//! handoff to the `handoffs` mailbox in its transaction and, once that has
//! committed, runs `KILL QUERY` on the bell's connection, in the same
//! procedure call (no round trip more). It finds the connection with
//! `IS_USED_LOCK` on the bell's own lock: the server names the connection
//! holding it in its current run, so a bell that is gone (or a server
//! restarted since the bell registered) is never mistaken for whatever
//! connection now has its old id, and no ring reads the process list (a
//! scan of every connection, which under load once showed a waiting bell
//! as `Busy` with no query text, so rings took it for awake). The
//! interrupted bell reads its handoffs ([`read_mail`]), hands each to its
//! waiter through the client's inbox, removes them ([`forget`]), and waits
//! again. A bell rung and not yet read is not rung again (a flag in its
//! row, reset as it reads): it reads the handoffs made meanwhile anyway.
//!
//! The client's waiters queue once the bell waits (its `sync` answers every
//! caller then, also those that came while it connected: [`ChannelTasks`]),
//! or after one refresh period when it is not up by then. A handoff made
//! before the bell registered is found by its first read of the mailbox,
//! which comes before its first wait.
//!
//! A ring that finds no row for the bell (the sweep removes rows not
//! renewed within five minutes: a clock step, or a client paused that long
//! with its connections alive) puts the row back, rung, and rings the bell
//! all the same; the bell puts its row back too when it renews it (every
//! minute). Before this, a bell whose row was gone was never rung again,
//! and every handoff to its client's waiters waited for their refreshes.
//!
//! A link that fails without a reset leaves the bell's connections open on
//! the server: the holder idle, alive to the server until its
//! `wait_timeout` (8 h by default), still holding the lock the next bell
//! waits for. A new bell that finds the lock held ends that holder (and the
//! old bell before it, which waits for the lock and would take it): only
//! this client's connections take locks named for its channel.
//!
//! Why a user lock's wait and not `SLEEP()`, the obvious way to sleep in a
//! query: MariaDB's `KILL` of a thread in `SLEEP()` retries a mutex that
//! every sleeping thread shares, and was measured stalling the killer (so
//! the release) for one to two seconds under contention; a user lock's
//! wait is woken through the waiting thread's own mutex. And why not the
//! other way round, each waiter blocking in `GET_LOCK` on a name its
//! releaser holds: the holder of a lock would have to keep a connection
//! (and the lock's name) for the whole hold, and every waiter a connection
//! for its whole wait, where a bell is one connection pair per client.
//!
//! No wake-up is lost between two waits: the query checks the mailbox
//! and the flag before it waits, in the same statement, and returns at
//! once when a handoff waits or the flag is set. A kill that lands while
//! the connection is between statements (and does nothing) has its handoff
//! found by the next check, and one that lands after that check but before
//! the wait interrupts the wait (the statement's kill flag stays set). A
//! ring may come just after the bell read the very handoff it rings for (a
//! ring waits for a read in progress, which holds the bell's row, and then
//! finds the flag reset), so the next check finds the flag set, and the
//! bell reads its mailbox again, which resets the flag, before it sleeps.
//! A bell that slept with the flag set would never be rung again: every
//! handoff to its client's waiters would wait for their timed refresh
//! until the bell's period ended (measured on the conformance suite's
//! contention before this check: in half the runs, a bell stuck so and the
//! contended test ran three to six times as long).
//!
//! A ring's kill lands on whatever statement the bell's connection runs,
//! not only its wait: a ring queued behind the bell's read is let go just
//! as that read commits, and kills at once. So the read removes nothing:
//! an interrupted read (even one interrupted once it had committed, whose
//! rows never reach the bell) is read again, and only rows the bell has
//! are removed, by id, in a statement of their own (interrupted, it is
//! sent again; lost with the connection, the rows are read again by the
//! next bell, and a handoff delivered twice is claimed once).
//!
//! The bell's session reads uncommitted rows (`READ UNCOMMITTED`) so that
//! its long statement opens no InnoDB read view (which would hold back the
//! purge of old row versions for the length of the wait); a handoff seen
//! before its commit only makes the read wait for that commit, as the
//! read locks what it reads and so sees only committed rows.
//!
//! Whatever still goes wrong (a connection lost, a bell the ring may not
//! kill: the ring procedure runs as its definer, and a bell of another user
//! than the definer is killed only with `CONNECTION ADMIN`) is covered by the waiter's timed refresh, which
//! claims a lock handed to it as well; when the bell's connections are
//! lost, every waiter of the client is woken to check at once.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use lockguard_core::store::net::{self, Stopped};
use lockguard_core::store::{ChannelTasks, Handoff, Inbox, Listener, StoreFuture, Token};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

use crate::error::{is_interrupted, mysql_error};
use crate::options::Config;
use crate::schema::{NOW, clock_us};

/// The bells of one store: one per channel (a client has one channel).
pub(crate) struct Bell {
    opts: Opts,
    cfg: Arc<Config>,
    bells: ChannelTasks,
}

impl fmt::Debug for Bell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bell")
            .field("prefix", &self.cfg.prefix)
            .finish_non_exhaustive()
    }
}

impl Bell {
    pub(crate) fn new(opts: Opts, cfg: Arc<Config>) -> Self {
        Self {
            opts,
            cfg,
            bells: ChannelTasks::new(),
        }
    }
}

impl Listener for Bell {
    /// Starts the bell of `channel` (once; it rings until the store is
    /// dropped or the client is gone) and returns once it listens.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        self.bells.sync(channel, &*inbox, |started| {
            let ringer = Ringer {
                opts: self.opts.clone(),
                cfg: self.cfg.clone(),
                channel: channel.to_owned(),
            };
            tokio::spawn(net::keep_listening(
                "mysql",
                ringer,
                Arc::downgrade(&inbox),
                started,
            ))
        })
    }
}

/// The channel as it appears in SQL text: hex, so nothing in it needs
/// quoting.
fn hex(channel: &str) -> String {
    channel.bytes().map(|b| format!("{b:02X}")).collect()
}

/// The user lock the holder keeps and the bell waits for: named for the
/// channel's end, which holds the client's random token (names are at most
/// 64 characters).
fn lock_name(channel: &str) -> String {
    let mut start = channel.len().saturating_sub(40);
    while !channel.is_char_boundary(start) {
        start += 1;
    }
    format!("lockguard bell {}", &channel[start..]).replace('\'', "")
}

/// The user lock the bell's connection holds, by which a ring finds it:
/// named for the channel's last 40 bytes, as the ring procedure computes
/// it (`CONCAT('lockguard ring ', RIGHT(channel, 40))`). A channel ends
/// with `waiters:` and the client's 32-digit token, so those bytes are
/// ASCII and the name is 55 characters.
fn ring_lock_name(channel: &str) -> String {
    let mut start = channel.len().saturating_sub(40);
    while !channel.is_char_boundary(start) {
        start += 1;
    }
    format!("lockguard ring {}", &channel[start..])
}

/// The statement a bell waits in, for at most `period`: at once when a
/// handoff waits in its mailbox or the bell's rung flag was set since it last
/// read it (see the module docs), else until it is rung.
///
/// Its hint gives it a time limit a minute past its wait, over MySQL's
/// `max_execution_time` (which limits a session's `SELECT`s, and would cut
/// the wait short; the session cannot set it to none in a statement
/// MariaDB accepts too): MariaDB before 12 reads the hint as a comment
/// (its own limit is set to none for the session, `NO_STATEMENT_LIMIT`),
/// MariaDB 12 as MySQL does.
fn wait_sql(prefix: &str, channel: &str, period: Duration) -> String {
    let h = hex(channel);
    let secs = period.as_secs().max(1);
    format!(
        "SELECT /*+ MAX_EXECUTION_TIME({}) */ 'lockguard bell {h}', IF(EXISTS(SELECT 1 \
         FROM {prefix}handoffs WHERE channel = 0x{h}) OR EXISTS(SELECT 1 FROM {prefix}bells \
         WHERE channel = 0x{h} AND rung = 1), 0, GET_LOCK('{}', {secs}))",
        (secs + 60).saturating_mul(1000),
        lock_name(channel),
    )
}

/// A bell's two connections: the holder of the lock, and the bell.
struct Pair {
    holder: Conn,
    bell: Conn,
}

/// Opens the bell's connections, takes the lock and records the bell under
/// `channel`.
async fn open(opts: &Opts, cfg: &Config, channel: &str) -> Result<Pair> {
    let what = "opening the mysql bell connections";
    net::within(
        cfg.connect_timeout,
        "mysql",
        || what.to_owned(),
        tokio::time::timeout(cfg.connect_timeout, async {
            let wait = cfg.connect_timeout.as_secs().max(1);
            let lock = lock_name(channel);
            let ring_lock = ring_lock_name(channel);
            let mut holder = Conn::new(opts.clone())
                .await
                .map_err(|e| mysql_error(e, what))?;
            if !try_lock(&mut holder, &lock, 0, what).await? {
                // Only this client's holders take the lock: one keeping it
                // is an earlier holder of this client's that the server
                // has not seen go. Behind a link that failed without a
                // reset, it stays, idle, until the server's `wait_timeout`
                // (8 h by default), and no bell of this client could wait
                // meanwhile. Its bell goes first (it waits for this lock,
                // and would take it as the holder goes), then the holder.
                end_earlier(&mut holder, &ring_lock, what).await?;
                end_earlier(&mut holder, &lock, what).await?;
                take_lock(&mut holder, &lock, wait, what, "the bell's lock").await?;
            }
            let mut bell = Conn::new(opts.clone())
                .await
                .map_err(|e| mysql_error(e, what))?;
            bell.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
                .await
                .map_err(|e| mysql_error(e, what))?;
            bell.query_drop(crate::schema::NO_STATEMENT_LIMIT)
                .await
                .map_err(|e| mysql_error(e, what))?;
            register(&mut bell, cfg, channel).await?;
            // Rings find the bell by this lock from here on. Only this
            // client's bells take it: one still holding it is an earlier
            // bell of this client that the server has not seen go (its
            // statement still running after the client gave the connection
            // up), and it goes now.
            end_earlier(&mut bell, &ring_lock, what).await?;
            take_lock(&mut bell, &ring_lock, wait, what, "the bell's ring lock").await?;
            Ok(Pair { holder, bell })
        })
        .await,
    )
}

/// Ends the connection holding the user lock `name`, if another than
/// `conn` does (`KILL`, which a user may do to its own connections): an
/// earlier connection of this client's, which only this client names.
async fn end_earlier(conn: &mut Conn, name: &str, what: &str) -> Result<()> {
    let earlier: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (name,))
        .await
        .map_err(|e| mysql_error(e, what))?;
    if let Some(Some(earlier)) = earlier
        && earlier != u64::from(conn.id())
    {
        tracing::debug!(
            connection = earlier,
            lock = name,
            "ending a stale bell connection"
        );
        // Gone already, it cannot be killed: no matter.
        let _ = conn.query_drop(format!("KILL {earlier}")).await;
    }
    Ok(())
}

/// Tries to take the user lock `name` on `conn`, waiting for it at most
/// `wait_s` seconds: whether it was taken.
async fn try_lock(conn: &mut Conn, name: &str, wait_s: u64, what: &str) -> Result<bool> {
    let got: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (name, wait_s))
        .await
        .map_err(|e| mysql_error(e, what))?;
    Ok(got == Some(Some(1)))
}

/// Takes the user lock `name` on `conn`, waiting for it at most `wait_s`
/// seconds: unavailable when another connection keeps it.
async fn take_lock(conn: &mut Conn, name: &str, wait_s: u64, what: &str, lock: &str) -> Result<()> {
    if try_lock(conn, name, wait_s, what).await? {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("{what}: {lock} is held elsewhere"),
        ))
    }
}

/// Renews the bell's row from the holder, putting it back (with the bell's
/// connection id `bell`) when it was removed.
async fn renew(holder: &mut Conn, cfg: &Config, channel: &str, bell: u32) -> Result<()> {
    let p = &cfg.prefix;
    let now = clock_us(NOW);
    holder
        .exec_drop(
            format!(
                "INSERT INTO {p}bells (channel, conn, at_us) VALUES (?, ?, {now}) \
                 ON DUPLICATE KEY UPDATE at_us = VALUES(at_us)"
            ),
            (channel, bell),
        )
        .await
        .map_err(|e| mysql_error(e, "renewing the mysql bell"))
}

/// Records (or renews) the bell's connection id under `channel`.
async fn register(conn: &mut Conn, cfg: &Config, channel: &str) -> Result<()> {
    let p = &cfg.prefix;
    let now = clock_us(NOW);
    conn.exec_drop(
        format!(
            "INSERT INTO {p}bells (channel, conn, at_us) \
             VALUES (?, CONNECTION_ID(), {now}) \
             ON DUPLICATE KEY UPDATE conn = VALUES(conn), at_us = VALUES(at_us), rung = 0"
        ),
        (channel,),
    )
    .await
    .map_err(|e| mysql_error(e, "registering the mysql bell"))
}

/// Reads the handoffs addressed to `channel`, with their mailbox ids
/// (which [`forget`] removes), and resets the bell's rung flag.
async fn read_mail(
    conn: &mut Conn,
    cfg: &Config,
    channel: &str,
) -> std::result::Result<(Vec<u64>, Vec<Handoff>), mysql_async::Error> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(format!("CALL {}read_mail(?)", cfg.prefix), (channel,))
        .await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut handoffs = Vec::with_capacity(rows.len());
    for row in rows {
        // Every row read is removed, also one that is no waiter's or that
        // cannot be read (left, it would end every wait at once).
        let Some(Ok(id)) = row.get_opt::<u64, _>(0) else {
            continue;
        };
        ids.push(id);
        let (Some(Ok(token)), Some(Ok(fence)), Some(Ok(attempt))) = (
            row.get_opt::<Vec<u8>, _>(1),
            row.get_opt::<u64, _>(2),
            row.get_opt::<u32, _>(3),
        ) else {
            continue;
        };
        let Some(token) = Token::parse(&token) else {
            continue;
        };
        if fence > 0 {
            handoffs.push(Handoff::new(token, FencingToken::new(fence), attempt));
        }
    }
    Ok((ids, handoffs))
}

/// Removes the mailbox rows `ids`, which the bell has read.
async fn forget(
    conn: &mut Conn,
    cfg: &Config,
    ids: &[u64],
) -> std::result::Result<(), mysql_async::Error> {
    let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    conn.query_drop(format!(
        "DELETE FROM {}handoffs WHERE id IN ({list})",
        cfg.prefix
    ))
    .await
}

/// What one bell's task needs.
struct Ringer {
    opts: Opts,
    cfg: Arc<Config>,
    channel: String,
}

impl net::Listening for Ringer {
    type Conn = Pair;

    async fn open(&self) -> Result<Pair> {
        open(&self.opts, &self.cfg, &self.channel).await
    }

    async fn listen(&self, mut pair: Pair, inbox: &Weak<dyn Inbox>) -> Stopped {
        let stopped = ring(&mut pair, &self.cfg, &self.channel, inbox).await;
        if stopped == Stopped::Lost {
            tokio::spawn(async move {
                let second = Duration::from_secs(1);
                let _ = tokio::time::timeout(second, pair.bell.disconnect()).await;
                let _ = tokio::time::timeout(second, pair.holder.disconnect()).await;
            });
        }
        stopped
    }
}

/// Waits in the bell's query and delivers the handoffs each ring brings,
/// until a connection fails or the client is gone.
async fn ring(pair: &mut Pair, cfg: &Config, channel: &str, inbox: &Weak<dyn Inbox>) -> Stopped {
    let wait = wait_sql(&cfg.prefix, channel, cfg.bell_period);
    // The wait answers within its period; past that and a request's
    // timeout, the server is gone or frozen.
    let wait_bound = cfg.bell_period + cfg.response_timeout;
    let mut renewed = tokio::time::Instant::now();
    loop {
        let (ids, handoffs) = match tokio::time::timeout(
            cfg.response_timeout,
            read_mail(&mut pair.bell, cfg, channel),
        )
        .await
        {
            Ok(Ok(mail)) => mail,
            // Rung while reading: read again (nothing was removed).
            Ok(Err(e)) if is_interrupted(&e) => continue,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "mysql bell connection lost");
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
        drop(i);
        // Delivered first, removed after: a handoff is lost by neither a
        // ring's kill nor a lost connection (the next read delivers again
        // what was not removed).
        while !ids.is_empty() {
            match tokio::time::timeout(cfg.response_timeout, forget(&mut pair.bell, cfg, &ids))
                .await
            {
                Ok(Ok(())) => break,
                // Rung while removing: the removal is sent again.
                Ok(Err(e)) if is_interrupted(&e) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "mysql bell connection lost");
                    return Stopped::Lost;
                }
                Err(_) => return Stopped::Lost,
            }
        }
        // Stale rows are swept after five minutes: renewed every minute,
        // through the holder, whose connection this keeps in use. A row
        // removed all the same (a clock step, the client paused) is put
        // back here, and by the next ring.
        if renewed.elapsed() >= Duration::from_secs(60) {
            let bell = pair.bell.id();
            if tokio::time::timeout(
                cfg.response_timeout,
                renew(&mut pair.holder, cfg, channel, bell),
            )
            .await
            .map_or(true, |r| r.is_err())
            {
                return Stopped::Lost;
            }
            renewed = tokio::time::Instant::now();
        }
        let conn = &mut pair.bell;
        let waited: std::result::Result<Option<mysql_async::Row>, _> =
            match tokio::time::timeout(wait_bound, conn.query_first(&wait)).await {
                Ok(r) => r,
                Err(_) => return Stopped::Lost,
            };
        match waited {
            // 0: a handoff waits, or the period passed; NULL: rung.
            Ok(Some(row)) => {
                let got = mysql_async::from_row_opt::<(String, Option<i64>)>(row);
                if let Ok((_, Some(1))) = got {
                    // The bell took the lock: the holder's connection is
                    // gone. Both are opened again.
                    return Stopped::Lost;
                }
            }
            Ok(None) => {}
            Err(e) if is_interrupted(&e) => {}
            Err(e) => {
                tracing::debug!(error = %e, "mysql bell connection lost");
                return Stopped::Lost;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_names_its_channel_in_hex() {
        let sql = wait_sql("lg_", "a'b", Duration::from_millis(1500));
        assert!(
            sql.starts_with("SELECT /*+ MAX_EXECUTION_TIME(61000) */ 'lockguard bell 612762'"),
            "{sql}"
        );
        assert!(sql.contains("channel = 0x612762"), "{sql}");
        assert!(
            sql.contains("lg_bells WHERE channel = 0x612762 AND rung = 1"),
            "{sql}"
        );
        assert!(sql.contains("GET_LOCK('lockguard bell ab', 1)"), "{sql}");
        let long = format!("{}waiters:{}", "é".repeat(40), "0123456789abcdef".repeat(2));
        let name = lock_name(&long);
        assert!(
            name.len() <= 64 && name.ends_with("0123456789abcdef"),
            "{name}"
        );
    }
}
