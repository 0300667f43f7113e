//! One background task per channel that hears a client's wake-ups (a
//! database store's bell), started at the client's first wait and shared by
//! all its waiters.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

use super::{Inbox, StoreFuture};
use crate::error::{Error, ErrorKind, Result};

/// The tasks that hear a store's channels, one per channel, for a
/// [`Listener`](super::Listener) that runs a task of its own per client
/// (the PostgreSQL and MySQL stores' bells) rather than subscribing a
/// shared connection.
///
/// [`ChannelTasks::sync`] starts a channel's task once and answers every
/// caller when that task listens: the first caller, and every caller that
/// comes while the task still starts. A client's first wait waits for its
/// task one refresh period at most, then queues: a handoff made before
/// the task listens is not announced to it, and is found by the waiter's
/// own refresh (a store that leaves the handoff in the waiter's mail
/// finds it there as soon as the task listens). Dropping this aborts the
/// tasks.
///
/// # Examples
///
/// ```
/// # use std::sync::Arc;
/// # use lockguard_core::store::{ChannelTasks, Inbox, StoreFuture, Started};
/// # use lockguard_core::Result;
/// // In a `Listener::sync` (one bell per channel):
/// fn sync<'a>(tasks: &ChannelTasks, channel: &str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
///     let watched = Arc::downgrade(&inbox);
///     tasks.sync(channel, &*inbox, |started: Started| {
///         tokio::spawn(async move {
///             // Connect, register, then say so; then ring until the
///             // client (`watched`) is gone.
///             started.listening();
///             let _ = watched;
///         })
///     })
/// }
/// ```
#[derive(Default)]
pub struct ChannelTasks {
    running: Mutex<HashMap<String, Running>>,
}

/// A channel's task, and what it last said of its start.
struct Running {
    task: AbortHandle,
    state: watch::Receiver<State>,
}

/// What a channel's task last said of its start: nothing yet, listening,
/// or could not (the error's kind and message).
type State = Option<std::result::Result<(), (ErrorKind, String)>>;

impl fmt::Debug for ChannelTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("ChannelTasks")
            .field("channels", &running.len())
            .finish()
    }
}

impl ChannelTasks {
    /// No tasks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `channel`'s task with `spawn` unless it runs (or nobody of
    /// `inbox` wants the channel); the future answers once the task says
    /// it listens ([`Started::listening`]) or could not start
    /// ([`Started::failed`]: that error, to every caller waiting then).
    ///
    /// # Errors
    ///
    /// The task's error when it could not start; `Unavailable` when it
    /// ended before it said either.
    pub fn sync<'a, F>(
        &self,
        channel: &str,
        inbox: &dyn Inbox,
        spawn: F,
    ) -> StoreFuture<'a, Result<()>>
    where
        F: FnOnce(Started) -> JoinHandle<()>,
    {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = match running.get(channel) {
            Some(r) if !r.task.is_finished() => r.state.clone(),
            _ if !inbox.is_wanted(channel) => return StoreFuture::ready(Ok(())),
            _ => {
                let (tx, rx) = watch::channel(None);
                let task = spawn(Started(tx)).abort_handle();
                running.insert(
                    channel.to_owned(),
                    Running {
                        task,
                        state: rx.clone(),
                    },
                );
                rx
            }
        };
        drop(running);
        if let Some(answer) = state.borrow_and_update().clone() {
            return StoreFuture::ready(answer.map_err(|(kind, message)| Error::new(kind, message)));
        }
        StoreFuture::new(async move {
            match state.wait_for(Option::is_some).await {
                Ok(said) => said
                    .clone()
                    .unwrap_or(Ok(()))
                    .map_err(|(kind, message)| Error::new(kind, message)),
                Err(_) => Err(Error::new(
                    ErrorKind::Unavailable,
                    "the task listening for wake-ups stopped before it listened",
                )),
            }
        })
    }
}

impl Drop for ChannelTasks {
    fn drop(&mut self) {
        let running = self.running.get_mut().unwrap_or_else(|p| p.into_inner());
        for r in running.values() {
            r.task.abort();
        }
    }
}

/// What a channel's task tells the callers of [`ChannelTasks::sync`]: each
/// time it (re)connects, that it listens, or that it could not.
#[derive(Debug)]
pub struct Started(watch::Sender<State>);

impl Started {
    /// The task listens: a wake-up sent from now on reaches it.
    pub fn listening(&self) {
        self.0.send_replace(Some(Ok(())));
    }

    /// The task could not connect (it tries again): callers waiting now,
    /// and callers until it listens, get `error`'s kind and message, and
    /// their waiters rely on their timed refreshes.
    pub fn failed(&self, error: &Error) {
        self.0
            .send_replace(Some(Err((error.kind(), error.message().to_owned()))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Handoff, Token};

    struct Wanted;

    impl Inbox for Wanted {
        fn is_wanted(&self, _: &str) -> bool {
            true
        }
        fn deliver(&self, _: &str, _: &[u8]) {}
        fn handoff(&self, _: Handoff) {}
        fn wake(&self, _: &Token) {}
        fn near(&self, _: &Token) {}
        fn wake_all(&self) {}
    }

    /// A caller that comes while the channel's task starts waits until the
    /// task listens, as the first caller does; the task is started once.
    #[tokio::test]
    async fn every_caller_waits_until_the_task_listens() {
        let tasks = ChannelTasks::new();
        let (go, gate) = tokio::sync::oneshot::channel::<()>();
        let mut spawned = 0;
        let first = tasks.sync("c", &Wanted, |started| {
            spawned += 1;
            tokio::spawn(async move {
                let _ = gate.await;
                started.listening();
                std::future::pending::<()>().await;
            })
        });
        let second = tasks.sync("c", &Wanted, |_| unreachable!("started twice"));
        assert_eq!(spawned, 1);
        let (first, second) = (tokio::spawn(first), tokio::spawn(second));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !first.is_finished(),
            "the first caller answered before the task listened"
        );
        assert!(
            !second.is_finished(),
            "the second caller answered before the task listened"
        );
        go.send(()).unwrap();
        assert!(first.await.unwrap().is_ok());
        assert!(second.await.unwrap().is_ok());
        // Once it listens, at once.
        let third = tasks.sync("c", &Wanted, |_| unreachable!("started twice"));
        assert!(third.now().unwrap().is_ok());
    }

    /// A task that could not start gives its error to every waiting caller;
    /// one that ended without a word is an `Unavailable` error.
    #[tokio::test]
    async fn a_task_that_could_not_start_says_why() {
        let tasks = ChannelTasks::new();
        let failing = tasks.sync("c", &Wanted, |started| {
            tokio::spawn(async move {
                started.failed(&Error::new(ErrorKind::Timeout, "no answer"));
                std::future::pending::<()>().await;
            })
        });
        let e = failing.await.unwrap_err();
        assert_eq!((e.kind(), e.message()), (ErrorKind::Timeout, "no answer"));
        let silent = tasks.sync("d", &Wanted, |started| {
            tokio::spawn(async move { drop(started) })
        });
        assert_eq!(silent.await.unwrap_err().kind(), ErrorKind::Unavailable);
    }
}
