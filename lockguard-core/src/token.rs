//! Lock tokens: 128 random bits per acquisition.

use std::cell::RefCell;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

thread_local! {
    /// A fast generator per thread, seeded once from the operating system,
    /// so drawing a token costs no system call.
    static RNG: RefCell<fastrand::Rng> = RefCell::new(seeded());
}

fn seeded() -> fastrand::Rng {
    let mut seed = [0u8; 8];
    match getrandom::fill(&mut seed) {
        Ok(()) => fastrand::Rng::with_seed(u64::from_le_bytes(seed)),
        // No OS generator: fastrand's own seeding (time, thread, address).
        Err(_) => fastrand::Rng::new(),
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 128 random bits identifying one acquisition, hex encoded, stored inline
/// (copying a token allocates nothing).
///
/// A fresh token is drawn for every acquisition and never reused, so a
/// release or extend carrying it can only ever touch that acquisition.
/// Tokens are unique, not secret: the generator is a per-thread PRNG seeded
/// from the OS; anyone who can write to Redis can delete a lock anyway.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Token([u8; 32]);

impl Token {
    pub(crate) fn random() -> Self {
        let bits = RNG.with(|rng| {
            let mut rng = rng.borrow_mut();
            (u128::from(rng.u64(..)) << 64) | u128::from(rng.u64(..))
        });
        let mut hex = [0u8; 32];
        for (i, c) in hex.iter_mut().enumerate() {
            *c = HEX[((bits >> (124 - 4 * i)) & 0xf) as usize];
        }
        Self(hex)
    }

    /// The token whose text is `text`, if it is one.
    pub(crate) fn parse(text: &[u8]) -> Option<Self> {
        let hex: [u8; 32] = text.try_into().ok()?;
        hex.iter().all(|c| HEX.contains(c)).then_some(Self(hex))
    }

    pub(crate) fn as_str(&self) -> &str {
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

    #[test]
    fn threads_draw_different_tokens() {
        let a: Vec<Token> = std::thread::spawn(|| (0..100).map(|_| Token::random()).collect())
            .join()
            .unwrap();
        let b: Vec<Token> = (0..100).map(|_| Token::random()).collect();
        assert!(a.iter().all(|t| !b.contains(t)));
    }
}
