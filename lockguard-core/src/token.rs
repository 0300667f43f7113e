//! Random lock tokens.

use std::fmt;

/// 128 random bits identifying one acquisition, hex encoded.
///
/// A fresh token is drawn for every acquisition and never reused, so a
/// release or extend carrying it can only ever touch that acquisition.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn random() -> Self {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // The OS generator is unavailable; fall back to a seeded PRNG,
            // which still gives distinct tokens within and across processes.
            let mut rng = fastrand::Rng::new();
            rng.fill(&mut bytes);
        }
        let mut s = String::with_capacity(32);
        for b in bytes {
            use fmt::Write;
            let _ = write!(s, "{b:02x}");
        }
        Self(s)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Enough to correlate log lines; not the whole secret.
        write!(f, "Token({}..)", &self.0[..8])
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
    }
}
