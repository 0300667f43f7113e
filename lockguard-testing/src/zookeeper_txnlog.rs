//! A ZooKeeper transaction log written by hand, to start a server on a data
//! tree that ordinary requests would take hours to build.
//!
//! What it is for: a node whose children's version (`cversion`, the counter
//! ZooKeeper numbers sequential children with) is near the wrap from
//! 2147483647 to -2147483648. Each child created or deleted adds one to
//! it, and no request sets it: at the hundred thousand a second a test
//! server manages (multis of a thousand creates and deletes, measured on
//! 3.8), 2^31 of them take over five hours. But
//! a logged create carries the parent's new `cversion`
//! (`CreateTxn.parentCVersion`), and a server replaying its log on start
//! takes it as it is. So a log of four transactions (create the node's
//! parents and the node, create a child that moves the node's `cversion`,
//! delete that child) gives a server whose next sequential child under the
//! node is numbered near the wrap, through ZooKeeper's own start-up path.
//!
//! The format is ZooKeeper 3.5+'s `version-2/log.<zxid in hex>`: a header,
//! then each transaction as its Adler-32 checksum, its length, its bytes
//! (a `TxnHeader` and the transaction, in jute: big-endian integers,
//! strings and buffers after their length) and a `B`. A log with no
//! snapshot beside it is replayed only with `snapshot.trust.empty=true`.

/// `"ZKLG"`, the magic number of a transaction log.
const LOG_MAGIC: i32 = 0x5A4B_4C47;

/// The log format's version.
const LOG_VERSION: i32 = 2;

/// `OpCode.create`.
const OP_CREATE: i32 = 1;

/// `OpCode.delete`.
const OP_DELETE: i32 = 2;

/// `ZooDefs.Perms.ALL`.
const PERMS_ALL: i32 = 31;

/// The zxid of the log's first transaction: epoch 1, counter 1.
const FIRST_ZXID: i64 = (1 << 32) | 1;

/// The name of the child created and deleted to move the `cversion`.
const SEED_CHILD: &str = "lockguard-testing-cversion-seed";

/// A transaction log (its file name and bytes) that creates `path` and
/// every missing parent as persistent, empty nodes open to anyone, and then
/// sets `path`'s children's version to `cversion` (by a child created and
/// deleted again).
///
/// # Panics
///
/// When `path` is not absolute, ends in `/`, or is `/`.
pub(crate) fn cversion_log(path: &str, cversion: i32) -> (String, Vec<u8>) {
    assert!(
        path.starts_with('/') && !path.ends_with('/') && !path.contains("//"),
        "not a ZooKeeper node path: {path:?}"
    );
    let mut log = Log::new();
    let mut parent = String::new();
    for part in path[1..].split('/') {
        parent.push('/');
        parent.push_str(part);
        // -1: the parent's `cversion` plus one, as for any create.
        log.create(&parent, -1);
    }
    let seed = format!("{path}/{SEED_CHILD}");
    log.create(&seed, cversion);
    log.delete(&seed);
    (format!("log.{FIRST_ZXID:x}"), log.bytes)
}

/// A log being written.
struct Log {
    bytes: Vec<u8>,
    zxid: i64,
}

impl Log {
    /// A log holding its header alone.
    fn new() -> Self {
        let mut bytes = Vec::new();
        put_i32(&mut bytes, LOG_MAGIC);
        put_i32(&mut bytes, LOG_VERSION);
        put_i64(&mut bytes, 0); // dbid
        Self {
            bytes,
            zxid: FIRST_ZXID,
        }
    }

    /// Logs a `CreateTxn` of a persistent node.
    fn create(&mut self, path: &str, parent_cversion: i32) {
        let mut txn = self.header(OP_CREATE);
        put_str(&mut txn, path);
        put_i32(&mut txn, 0); // data: an empty buffer
        put_i32(&mut txn, 1); // one ACL: world:anyone, every permission
        put_i32(&mut txn, PERMS_ALL);
        put_str(&mut txn, "world");
        put_str(&mut txn, "anyone");
        txn.push(0); // not ephemeral
        put_i32(&mut txn, parent_cversion);
        self.append(&txn);
    }

    /// Logs a `DeleteTxn`.
    fn delete(&mut self, path: &str) {
        let mut txn = self.header(OP_DELETE);
        put_str(&mut txn, path);
        self.append(&txn);
    }

    /// A `TxnHeader` of the next zxid, from no session.
    fn header(&mut self, op: i32) -> Vec<u8> {
        let mut txn = Vec::new();
        put_i64(&mut txn, 0); // clientId
        put_i32(&mut txn, 0); // cxid
        put_i64(&mut txn, self.zxid);
        put_i64(&mut txn, now_millis());
        put_i32(&mut txn, op);
        self.zxid += 1;
        txn
    }

    /// Appends one entry: checksum, length, bytes, end of record.
    fn append(&mut self, txn: &[u8]) {
        put_i64(&mut self.bytes, i64::from(adler32(txn)));
        put_i32(
            &mut self.bytes,
            i32::try_from(txn.len()).expect("a small transaction"),
        );
        self.bytes.extend_from_slice(txn);
        self.bytes.push(b'B');
    }
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// A jute `ustring`: its length in bytes, then its UTF-8.
fn put_str(out: &mut Vec<u8>, s: &str) {
    put_i32(out, i32::try_from(s.len()).expect("a short string"));
    out.extend_from_slice(s.as_bytes());
}

/// Milliseconds since the Unix epoch, the time of a logged transaction.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Adler-32 (RFC 1950), the checksum of each log entry
/// (`java.util.zip.Adler32`).
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % MOD;
        b = (b + a) % MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_matches_a_worked_example() {
        // The worked example of Wikipedia's article on Adler-32.
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b""), 1);
    }

    #[test]
    fn the_log_creates_each_parent_then_moves_the_cversion() {
        let (name, bytes) = cversion_log("/a/b", 7);
        assert_eq!(name, "log.100000001");
        assert_eq!(&bytes[..4], b"ZKLG");
        // Four entries, each ending in `B`: /a, /a/b, the seed, its delete.
        let mut at = 16;
        let mut ops = Vec::new();
        while at < bytes.len() {
            let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            let txn = &bytes[at + 12..at + 12 + len];
            let sum = i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
            assert_eq!(sum, i64::from(adler32(txn)));
            assert_eq!(bytes[at + 12 + len], b'B');
            ops.push(i32::from_be_bytes(txn[28..32].try_into().unwrap()));
            at += 12 + len + 1;
        }
        assert_eq!(ops, [OP_CREATE, OP_CREATE, OP_CREATE, OP_DELETE]);
    }
}
