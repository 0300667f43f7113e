//! Interleaved rounds: lockguard and its yardstick measured back to back in
//! each round, the order alternating (lockguard first in odd rounds, second
//! in even ones), so a drift of the machine's speed hits both alike; ratios
//! are taken round by round and reported as their median with the lowest
//! and highest, so a reader can tell a change from noise.

use std::fmt;

/// What the rounds measured, each side's figures round by round.
#[derive(Debug)]
pub(crate) struct Rounds<T> {
    pub(crate) lockguard: Vec<T>,
    pub(crate) raw: Vec<T>,
}

/// Runs `rounds` rounds of `lockguard` and `raw`, each given the round's
/// number, alternating which goes first.
pub(crate) async fn interleaved<T>(
    rounds: usize,
    mut lockguard: impl AsyncFnMut(usize) -> T,
    mut raw: impl AsyncFnMut(usize) -> T,
) -> Rounds<T> {
    let mut out = Rounds {
        lockguard: Vec::with_capacity(rounds),
        raw: Vec::with_capacity(rounds),
    };
    for round in 0..rounds {
        if round % 2 == 0 {
            out.lockguard.push(lockguard(round).await);
            out.raw.push(raw(round).await);
        } else {
            out.raw.push(raw(round).await);
            out.lockguard.push(lockguard(round).await);
        }
    }
    out
}

impl<T> Rounds<T> {
    /// The median over the rounds of lockguard's `figure` divided by raw's
    /// in the same round, with the lowest and highest.
    pub(crate) fn ratio(&self, figure: impl Fn(&T) -> f64) -> Spread {
        Spread::of(
            self.lockguard
                .iter()
                .zip(&self.raw)
                .map(|(l, r)| figure(l) / figure(r))
                .collect(),
        )
    }

    /// The median of lockguard's `figure` over the rounds.
    pub(crate) fn lockguard_median(&self, figure: impl Fn(&T) -> f64) -> f64 {
        crate::median(self.lockguard.iter().map(figure).collect())
    }

    /// The median of raw's `figure` over the rounds.
    pub(crate) fn raw_median(&self, figure: impl Fn(&T) -> f64) -> f64 {
        crate::median(self.raw.iter().map(figure).collect())
    }
}

/// A ratio's median over rounds, with the lowest and the highest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) lo: f64,
    pub(crate) hi: f64,
}

impl Spread {
    /// The spread of `xs`, one or more figures.
    pub(crate) fn of(xs: Vec<f64>) -> Self {
        let (lo, hi) = crate::range(&xs);
        Self {
            median: crate::median(xs),
            lo,
            hi,
        }
    }

    /// The median as a table cell, `0.95x`.
    pub(crate) fn cell(&self) -> String {
        format!("{:.2}x", self.median)
    }

    /// The range as a table cell, `0.90–1.00x`.
    pub(crate) fn range_cell(&self) -> String {
        format!("{:.2}–{:.2}x", self.lo, self.hi)
    }
}

/// `0.95x (0.90–1.00x)`, as the targets table shows a ratio.
impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.cell(), self.range_cell())
    }
}

/// Runs `rounds` rounds of `variants` variants, each given the round's
/// number and the variant's index, every variant once a round in an order
/// that turns by one each round (so each goes first, second, ... in turn);
/// returns each variant's figures, round by round.
pub(crate) async fn turning<T>(
    rounds: usize,
    variants: usize,
    mut run: impl AsyncFnMut(usize, usize) -> T,
) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = (0..variants).map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for i in 0..variants {
            let variant = (round + i) % variants;
            out[variant].push(run(round, variant).await);
        }
    }
    out
}
