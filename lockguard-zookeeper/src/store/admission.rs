//! Which nodes of a queue hold, and what each waiter watches: the rules of
//! a lock, a semaphore and a read-write lock over the same queue of
//! ephemeral sequential nodes.
//!
//! A lock's and a semaphore's nodes are named `{token}-{sequence}`, and the
//! first `permits` of the queue hold. A read-write lock's nodes carry their
//! mode after the token, as Curator's `InterProcessReadWriteLock` names
//! them: `{token}-__READ__{sequence}` and `{token}-__WRIT__{sequence}`. A
//! writer holds when it is first, and waits for every node ahead of it,
//! like a lock's node; a reader holds when no writer is ahead of it, and
//! waits only for the nearest writer ahead (Curator's reader watches the
//! first one, which wakes every reader at each writer's release; the
//! nearest wakes only the readers that release admits). So the readers at
//! the head of the queue, up to its first writer, hold together, and a
//! reader that arrives while a writer waits queues behind it.

use lockguard_core::store::{LockKeys, RwMode};

/// The mark in a read-write lock's reader's node name, after its token.
pub(super) const READ: &str = "__READ__";

/// The mark in a read-write lock's writer's node name, after its token
/// (as long as [`READ`], as Curator has them).
pub(super) const WRITE: &str = "__WRIT__";

/// How a node of a queue comes to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// A lock's (`Permits(1)`) or a semaphore's node: the first `n` nodes
    /// hold. The first waiter watches them, each later one its predecessor
    /// (which touches its node when it comes to hold a permit).
    Permits(usize),
    /// A read-write lock's reader: holds when no writer is ahead of it,
    /// and watches the nearest writer ahead otherwise.
    Read,
    /// A read-write lock's writer: holds when it is first, and watches its
    /// predecessor otherwise, as a lock's node does.
    Write,
}

/// What a waiting node watches.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Waits<'q> {
    /// The nodes it watches: it asks again when any of them changes.
    pub(super) on: Vec<&'q str>,
    /// Whether `on` is one predecessor waiting like it: such a node found
    /// touched has come to hold a permit since the listing, which is then
    /// too old to watch by.
    pub(super) predecessor: bool,
}

impl Admission {
    /// The rule of `keys`' queue: a lock's or a semaphore's, or, for a
    /// read-write lock's keys, its mode's.
    pub(super) fn of(keys: &LockKeys) -> Self {
        match keys.rw_mode() {
            None => Self::Permits(keys.resource().permits() as usize),
            Some(mode) => Self::rw(mode),
        }
    }

    /// A read-write lock's `mode` node.
    pub(super) fn rw(mode: RwMode) -> Self {
        match mode {
            RwMode::Read => Self::Read,
            RwMode::Write => Self::Write,
        }
    }

    /// What a node of this rule is named with after its token and before
    /// its sequence number.
    pub(super) fn mark(self) -> &'static str {
        match self {
            Self::Permits(_) => "",
            Self::Read => READ,
            Self::Write => WRITE,
        }
    }

    /// Whether a node that comes to hold touches itself: a semaphore's
    /// holder, whose token is its touch's zxid and whose successor moves
    /// on when it sees the touch. Everyone else's token is its node's
    /// creation.
    pub(super) fn touches(self) -> bool {
        matches!(self, Self::Permits(n) if n > 1)
    }

    /// For the node at `rank` of `queue` (the queue nodes in order):
    /// `None` when it holds, else what it waits on.
    pub(super) fn waits<'q>(self, queue: &[&'q str], rank: usize) -> Option<Waits<'q>> {
        match self {
            Self::Permits(n) if rank < n => None,
            Self::Permits(n) if rank == n => Some(Waits {
                on: queue[..n].to_vec(),
                predecessor: false,
            }),
            Self::Permits(_) => Some(Waits {
                on: vec![queue[rank - 1]],
                predecessor: true,
            }),
            Self::Write => Self::Permits(1).waits(queue, rank),
            Self::Read => queue[..rank]
                .iter()
                .rposition(|n| is_writer(n))
                .map(|w| Waits {
                    on: vec![queue[w]],
                    predecessor: false,
                }),
        }
    }
}

/// Whether a queue node is a read-write lock's writer: `{token}-__WRIT__…`.
pub(super) fn is_writer(name: &str) -> bool {
    name.split_once('-')
        .is_some_and(|(_, rest)| rest.starts_with(WRITE))
}

/// The mode of a read-write lock's queue node, told by its mark
/// (`{token}-__READ__…`, `{token}-__WRIT__…`); `None` for a lock's or a
/// semaphore's node.
pub(super) fn mode_of(name: &str) -> Option<RwMode> {
    let (_, rest) = name.split_once('-')?;
    if rest.starts_with(READ) {
        Some(RwMode::Read)
    } else if rest.starts_with(WRITE) {
        Some(RwMode::Write)
    } else {
        None
    }
}

/// Who holds a read-write lock whose queue is `queue` (its nodes in
/// order): its first node when that is a writer (`(0, true)`), else the
/// run of readers before the first writer.
pub(super) fn rw_holders(queue: &[&str]) -> (usize, bool) {
    match queue.first() {
        Some(first) if is_writer(first) => (0, true),
        _ => (
            queue
                .iter()
                .position(|n| is_writer(n))
                .unwrap_or(queue.len()),
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(rule: Admission, queue: &[&'static str], rank: usize) -> Option<Vec<&'static str>> {
        rule.waits(queue, rank).map(|w| w.on)
    }

    #[test]
    fn a_lock_and_a_semaphore_admit_their_first_nodes() {
        let q = [
            "a-0000000001",
            "b-0000000002",
            "c-0000000003",
            "d-0000000004",
        ];
        assert_eq!(waits(Admission::Permits(1), &q, 0), None);
        assert_eq!(
            Admission::Permits(1).waits(&q, 1),
            Some(Waits {
                on: vec![q[0]],
                predecessor: false
            })
        );
        assert_eq!(
            Admission::Permits(1).waits(&q, 3),
            Some(Waits {
                on: vec![q[2]],
                predecessor: true
            })
        );
        assert_eq!(waits(Admission::Permits(2), &q, 1), None);
        assert_eq!(waits(Admission::Permits(2), &q, 2), Some(vec![q[0], q[1]]));
        assert_eq!(waits(Admission::Permits(2), &q, 3), Some(vec![q[2]]));
    }

    #[test]
    fn readers_wait_for_the_nearest_writer_ahead_and_writers_for_everyone() {
        let q = [
            "a-__READ__0000000001",
            "b-__READ__0000000002",
            "c-__WRIT__0000000003",
            "d-__READ__0000000004",
            "e-__WRIT__0000000005",
            "f-__READ__0000000006",
            "g-__READ__0000000007",
        ];
        assert_eq!(waits(Admission::Read, &q, 0), None);
        assert_eq!(waits(Admission::Read, &q, 1), None, "readers share");
        assert_eq!(waits(Admission::Write, &q, 2), Some(vec![q[1]]));
        assert_eq!(waits(Admission::Read, &q, 3), Some(vec![q[2]]));
        assert_eq!(waits(Admission::Write, &q, 4), Some(vec![q[3]]));
        // Behind two writers: the nearest one.
        assert_eq!(waits(Admission::Read, &q, 5), Some(vec![q[4]]));
        assert_eq!(waits(Admission::Read, &q, 6), Some(vec![q[4]]));
        // A writer first holds alone.
        let w = ["c-__WRIT__0000000003", "d-__READ__0000000004"];
        assert_eq!(waits(Admission::Write, &w, 0), None);
        assert_eq!(waits(Admission::Read, &w, 1), Some(vec![w[0]]));
    }

    #[test]
    fn the_holders_of_a_read_write_lock_are_its_head() {
        assert_eq!(rw_holders(&[]), (0, false));
        assert_eq!(
            rw_holders(&["a-__READ__1", "b-__READ__2", "c-__WRIT__3", "d-__READ__4"]),
            (2, false)
        );
        assert_eq!(rw_holders(&["c-__WRIT__3", "d-__READ__4"]), (0, true));
        assert_eq!(rw_holders(&["a-__READ__1", "b-__READ__2"]), (2, false));
    }

    #[test]
    fn writers_are_told_by_their_mark() {
        assert_eq!(mode_of("ab12-__WRIT__0000000001"), Some(RwMode::Write));
        assert_eq!(mode_of("ab12-__READ__0000000001"), Some(RwMode::Read));
        assert_eq!(mode_of("ab12-0000000001"), None);
        assert!(is_writer("ab12-__WRIT__0000000001"));
        assert!(is_writer("ab12-__WRIT__-000000001"));
        assert!(!is_writer("ab12-__READ__0000000001"));
        assert!(!is_writer("ab12-0000000001"));
        assert!(!is_writer("stray"));
    }
}
