//! The order of a lock's queue: its nodes in the order they were created.
//!
//! ZooKeeper numbers a sequential node with its parent's children's version
//! (`cversion`), a signed 32-bit counter that every child created or
//! deleted moves on by one, written `%010d`. Until that counter reaches 2147483647 the
//! numbers are distinct and rise, and they are the order. At the end they
//! are not: on servers before 3.6 the counter wraps to -2147483648 (written
//! `-2147483648`), so new nodes number below old ones; from 3.6 on, the
//! server's replay guard keeps the larger of the old and new `cversion`, so
//! the counter sticks at 2147483647 and every later node takes that number
//! (creations in flight together still count on past it, into the
//! negatives). A hot key whose node is never empty long enough to be
//! removed gets there, and for good. Read as unsigned numbers, the queue
//! then puts a newcomer ahead of the holder, which then holds too.
//!
//! So the numbers are trusted only while none of the queue's nodes is at
//! or past the end of the counter. Otherwise the queue is ordered by each
//! node's creating zxid, a 64-bit number that rises with every write of the
//! ensemble, which costs a stat of each node (one pipelined round trip).

use super::admission::{READ, WRITE};

/// How a lock's children are put in queue order.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Order<'a> {
    /// By their sequence numbers: the queue, in order.
    Numbered(Vec<&'a str>),
    /// The numbers have run out: these queue nodes, in no order, are to be
    /// ordered by their creating zxids ([`by_creation`]).
    Unnumbered(Vec<&'a str>),
}

/// The queue nodes among a lock's children (`{token}-{sequence}`, or
/// `{token}-{mark}{sequence}` on a read-write lock; other names are left
/// out) in queue order when their numbers tell it.
pub(super) fn by_number(children: &[String]) -> Order<'_> {
    let mut queue: Vec<(i32, &str)> = children
        .iter()
        .filter_map(|c| Some((sequence(c)?, c.as_str())))
        .collect();
    if queue.iter().any(|&(n, _)| n == i32::MAX || n < 0) {
        return Order::Unnumbered(queue.into_iter().map(|(_, c)| c).collect());
    }
    queue.sort_unstable();
    Order::Numbered(queue.into_iter().map(|(_, c)| c).collect())
}

/// Queue nodes with their creating zxids in queue order: by zxid (distinct
/// for distinct nodes; the name breaks a tie all the same, so the order is
/// total).
pub(super) fn by_creation(mut nodes: Vec<(i64, &str)>) -> Vec<&str> {
    nodes.sort_unstable();
    nodes.into_iter().map(|(_, c)| c).collect()
}

/// The sequence number of a queue node, `{token}-{sequence}`: a token of
/// hex digits and ZooKeeper's signed 32-bit number, `0000000012`,
/// `2147483647`, `-2147483648`, `-000000012`; a read-write lock's node has
/// its mode's mark before the number (`{token}-__READ__0000000012`, see
/// [`admission`](super::admission)). `None` for any other name.
pub(super) fn sequence(name: &str) -> Option<i32> {
    let (token, rest) = name.split_once('-')?;
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let number = rest
        .strip_prefix(READ)
        .or_else(|| rest.strip_prefix(WRITE))
        .unwrap_or(rest);
    let digits = number.strip_prefix('-').unwrap_or(number);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    #[test]
    fn sequence_numbers_are_signed_32_bit() {
        assert_eq!(sequence("ab12-0000000012"), Some(12));
        assert_eq!(sequence("ab12-2147483647"), Some(i32::MAX));
        // Past the end, `%010d` puts the sign first.
        assert_eq!(sequence("ab12--2147483648"), Some(i32::MIN));
        assert_eq!(sequence("ab12--000000012"), Some(-12));
        // A read-write lock's nodes carry their mode first.
        assert_eq!(sequence("ab12-__READ__0000000012"), Some(12));
        assert_eq!(sequence("ab12-__WRIT__-2147483648"), Some(i32::MIN));
        for not_queue in [
            "stray",
            "ab12-",
            "ab12--",
            "-0000000012",
            "xyz-0000000012",
            "ab12-+000000012",
            "ab12-2147483648",
            "ab12-00000000x2",
            "ab12-__READ__",
            "ab12-__READ____WRIT__0000000001",
            "ab12-__OTHER_0000000001",
        ] {
            assert_eq!(sequence(not_queue), None, "{not_queue}");
        }
    }

    #[test]
    fn the_queue_is_in_sequence_order_before_the_counter_ends() {
        let children = names(&[
            "bbb-0000000012",
            "aaa-0000000003",
            "stray",
            "ccc-2147483646",
            "ddd-0000000100",
        ]);
        assert_eq!(
            by_number(&children),
            Order::Numbered(vec![
                "aaa-0000000003",
                "bbb-0000000012",
                "ddd-0000000100",
                "ccc-2147483646"
            ])
        );
    }

    #[test]
    fn numbers_at_the_end_of_the_counter_are_not_trusted() {
        // A 3.6+ server: stuck at the end, a token that sorts first must
        // not come first.
        let stuck = names(&["fff-2147483647", "000-2147483647"]);
        assert!(matches!(by_number(&stuck), Order::Unnumbered(q) if q.len() == 2));
        // An older server: wrapped, the newcomer numbers lowest.
        let wrapped = names(&["aaa-2147483646", "bbb--2147483648", "stray"]);
        assert_eq!(
            by_number(&wrapped),
            Order::Unnumbered(vec!["aaa-2147483646", "bbb--2147483648"])
        );
    }

    #[test]
    fn unnumbered_nodes_are_ordered_by_creation() {
        // The holder came first, whatever its name or number says.
        let nodes = vec![
            (0x1_0000_0009, "000-2147483647"),
            (0x1_0000_0002, "fff-2147483647"),
            (0x1_0000_0005, "aaa--2147483648"),
        ];
        assert_eq!(
            by_creation(nodes),
            ["fff-2147483647", "aaa--2147483648", "000-2147483647"]
        );
    }
}
