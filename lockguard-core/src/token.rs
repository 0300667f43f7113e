//! Lock tokens: 128 random bits per acquisition.

use std::cell::RefCell;
use std::fmt;

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

    #[test]
    fn threads_draw_different_tokens() {
        let a: Vec<Token> = std::thread::spawn(|| (0..100).map(|_| Token::random()).collect())
            .join()
            .unwrap();
        let b: Vec<Token> = (0..100).map(|_| Token::random()).collect();
        assert!(a.iter().all(|t| !b.contains(t)));
    }
}
