//! Lock tokens: unique by construction, a per-process random part and a
//! per-process counter.

use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The random half of every token this process draws, from the operating
/// system once.
static PROCESS: OnceLock<u64> = OnceLock::new();

/// How many tokens this process has drawn.
static DRAWN: AtomicU64 = AtomicU64::new(0);

fn process_part() -> u64 {
    *PROCESS.get_or_init(|| {
        let mut seed = [0u8; 8];
        match getrandom::fill(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed),
            // No OS generator: fastrand's own seeding (time, thread,
            // address), with the process id.
            Err(_) => fastrand::u64(..) ^ u64::from(std::process::id()).rotate_left(32),
        }
    })
}

/// A bijection of `u64` that spreads consecutive numbers over all bits
/// (SplitMix64's finalizer: xor-shifts and odd multipliers, each
/// invertible): distinct counts give distinct, random-looking halves.
fn spread(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 128 bits identifying one acquisition (or waiter), hex encoded, stored
/// inline (copying a token allocates nothing).
///
/// Unique by construction: the first 64 bits are drawn from the operating
/// system once per process, the last 64 bits are a bijection of a counter
/// of the tokens this process drew, which never repeats. Two tokens of one
/// process never match; tokens of two processes match only if their random
/// halves do (chance 2^-64 per pair of processes). A process forked without
/// `exec` after drawing tokens would repeat its parent's: lockguard does not
/// guard against that. Tokens are unique, not secret: anyone who can write
/// to the store can delete a lock anyway.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 32]);

impl Token {
    /// A token no other acquisition has (see the type's docs).
    pub fn random() -> Self {
        let count = DRAWN.fetch_add(1, Ordering::Relaxed);
        let bits = (u128::from(process_part()) << 64) | u128::from(spread(count));
        let mut hex = [0u8; 32];
        for (i, c) in hex.iter_mut().enumerate() {
            *c = HEX[((bits >> (124 - 4 * i)) & 0xf) as usize];
        }
        Self(hex)
    }

    /// The token whose text is `text` (32 lowercase hex digits), if it is
    /// one.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let hex: [u8; 32] = text.try_into().ok()?;
        hex.iter().all(|c| HEX.contains(c)).then_some(Self(hex))
    }

    /// The token as text: 32 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        // Always ASCII hex digits.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The hasher of in-process maps keyed by tokens (a semaphore's holders in
/// the in-memory store). Tokens are drawn at random here, never chosen by
/// a caller, so a multiply per 8 bytes spreads them as well as SipHash
/// would, at a fraction of its cost, with no flooding to fear.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        // The high bits mixed down too: the table indexes by the low ones.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
}

/// Builds [`TokenHasher`]s.
pub(crate) type TokenHashing = BuildHasherDefault<TokenHasher>;

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Enough to correlate log lines; not the whole token.
        write!(f, "Token({}..)", &self.as_str()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        let many: std::collections::HashSet<Token> = (0..10_000).map(|_| Token::random()).collect();
        assert_eq!(many.len(), 10_000);
    }

    /// Random tokens spread over a table's buckets as evenly as chance
    /// allows: no bucket of 1,024 gets more than a handful of 10,000.
    #[test]
    fn the_token_hasher_spreads_tokens() {
        use std::hash::BuildHasher;
        let mut buckets = vec![0u32; 1024];
        let mut top = vec![0u32; 128];
        for _ in 0..10_000 {
            let h = TokenHashing::default().hash_one(Token::random());
            buckets[(h % 1024) as usize] += 1;
            // hashbrown's control byte: the top 7 bits.
            top[(h >> 57) as usize] += 1;
        }
        // Expected about 9.8 per bucket; a fair draw's maximum is near 22.
        let most = *buckets.iter().max().unwrap();
        assert!(most < 30, "a bucket got {most} of 10,000");
        // Expected about 78 per value.
        let (lo, hi) = (*top.iter().min().unwrap(), *top.iter().max().unwrap());
        assert!(lo > 30 && hi < 135, "top bits from {lo} to {hi}");
    }

    /// Unique by construction: every token of the process carries its
    /// random half, and the other half never repeats, whichever thread
    /// draws.
    #[test]
    fn tokens_of_a_process_share_its_random_half_and_never_repeat() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..50_000).map(|_| Token::random()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for t in threads {
            for token in t.join().unwrap() {
                let (ours, count) = token.as_str().split_at(16);
                assert_eq!(ours, format!("{:016x}", process_part()));
                assert!(all.insert(count.to_owned()), "{count} repeated");
            }
        }
        assert_eq!(all.len(), 200_000);
    }

    /// The counter's spread is a bijection: it can be undone, so distinct
    /// counts never give the same half.
    #[test]
    fn spread_is_invertible() {
        fn unspread(mut x: u64) -> u64 {
            x = x ^ (x >> 31) ^ (x >> 62);
            x = x.wrapping_mul(0x3196_42b2_d24d_8ec3);
            x = x ^ (x >> 27) ^ (x >> 54);
            x = x.wrapping_mul(0x96de_1b17_3f11_9089);
            x ^ (x >> 30) ^ (x >> 60)
        }
        for x in (0..10_000).chain([u64::MAX, u64::MAX / 3, 1 << 63]) {
            assert_eq!(unspread(spread(x)), x);
        }
    }

    #[test]
    fn threads_draw_different_tokens() {
        let a: Vec<Token> = std::thread::spawn(|| (0..100).map(|_| Token::random()).collect())
            .join()
            .unwrap();
        let b: Vec<Token> = (0..100).map(|_| Token::random()).collect();
        assert!(a.iter().all(|t| !b.contains(t)));
    }
}
